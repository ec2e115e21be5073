"""Decoded values as canonical JSON, the same description ``rust/tools`` prints for the
Rust side's values (``Describer``), so that the two can be compared value by value.

Tensors are described by dtype, shape, size, a checksum of their bytes (:func:`digest`,
computed the same way in Rust) and where their bytes lie in the buffer they were decoded
from (None when they do not lie in it, or hold no bytes).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from mmcodec.generated import multimodal as mm

_MASK = (1 << 64) - 1


def digest(data: memoryview | bytes) -> int:
    """The wrapping sum of each little-endian u64 word times 2i + 1 (last word padded)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    padded = np.zeros((len(raw) + 7) // 8 * 8, dtype=np.uint8)
    padded[: len(raw)] = raw
    words = padded.view("<u8")
    weights = np.arange(1, 2 * len(words), 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int((words * weights).sum(dtype=np.uint64)) & _MASK


def _bytes_of(t: torch.Tensor) -> memoryview:
    flat = t.contiguous().reshape(-1).view(torch.uint8)
    array: Any = flat.numpy()
    return memoryview(array)


class Describer:
    """Describes values decoded from ``base`` (the address range tensors may lie in)."""

    def __init__(self, base: Any) -> None:
        view = memoryview(base)
        self.start = np.frombuffer(view, dtype=np.uint8).ctypes.data if len(view) else 0
        self.end = self.start + len(view)

    def tensor(self, t: torch.Tensor) -> dict[str, Any]:
        address = t.data_ptr()
        inside = self.start <= address and address + t.nbytes <= self.end and t.nbytes > 0
        return {
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "nbytes": t.nbytes,
            "digest": f"{digest(_bytes_of(t)):016x}",
            "offset": address - self.start if inside else None,
        }

    def nested(self, n: Any) -> dict[str, Any]:
        if isinstance(n, torch.Tensor):
            return {"tensor": self.tensor(n)}
        if type(n) is int:
            return {"int": n}
        if type(n) is float:
            return {"float": f"{np.float64(n).view(np.uint64):016x}"}
        kind = "list" if type(n) is list else "tuple"
        return {kind: [self.nested(i) for i in n]}

    @staticmethod
    def _slice(s: slice) -> list[Any]:
        return [s.start, s.stop, s.step]

    def field(self, f: Any) -> dict[str, Any]:
        name = type(f).__name__.lower()
        if "batched" in name:
            return {"batched": {"keep_on_cpu": f.keep_on_cpu}}
        if "flat" in name:
            slices = []
            for s in f.slices:
                if type(s) is slice:
                    slices.append({"slice": self._slice(s)})
                else:
                    kind = "tuple" if type(s) is tuple else "list"
                    slices.append({kind: [self._slice(p) for p in s]})
            return {"flat": {"slices": slices, "dim": f.dim, "keep_on_cpu": f.keep_on_cpu}}
        return {"shared": {"batch_size": f.batch_size, "keep_on_cpu": f.keep_on_cpu}}

    def elem(self, e: Any) -> dict[str, Any]:
        data = None if e.data is None else self.nested(e.data)
        return {"data": data, "field": self.field(e.field)}

    def item(self, item: Any) -> list[Any]:
        return [[k, self.elem(e)] for k, e in item.items()]

    def items(self, items: Any) -> list[Any]:
        return [
            [m, [None if i is None else self.item(i) for i in entries]]
            for m, entries in items.items()
        ]

    def range(self, r: Any) -> dict[str, Any]:
        embed = None if r.is_embed is None else self.tensor(r.is_embed)
        return {"offset": r.offset, "length": r.length, "is_embed": embed}

    def spec(self, s: Any) -> dict[str, Any]:
        return {
            "data": None if s.data is None else self.item(s.data),
            "modality": s.modality,
            "identifier": s.identifier,
            "mm_position": self.range(s.mm_position),
            "mm_hash": s.mm_hash,
        }

    def describe(self, value: Any, tp: Any) -> Any:
        by_type = {
            mm.MultiModalKwargsItems: self.items,
            mm.MultiModalKwargsItem: self.item,
            mm.MultiModalFeatureSpec: self.spec,
            mm.MultiModalFieldElem: self.elem,
            mm.PlaceholderRange: self.range,
        }
        return by_type[tp](value)


def parse(line: str) -> Any:
    return json.loads(line)
