"""What every measurement shares: the methods under test, timing, touching, copy accounting.

A *method* is a codec with ``name``, ``encode(obj) -> frames`` and ``decode(frames) -> obj``
(:class:`bench.baselines.Baseline`); :class:`Mmcodec` adapts the generated codec to it.
:func:`measure` times a call with warm-up and a time budget and keeps every sample, so
reports give medians with their spread. :func:`touch` is what "every decoded tensor
touched" means, applied identically to every method. :func:`copied_tensor_bytes` counts
the decoded bytes that do not alias the source tensors' memory.
"""

from __future__ import annotations

import ctypes
import gc
import math
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import torch

from bench.baselines import BASELINES, Baseline, Frame
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import iter_tensors
from mmcodec.runtime.builtins import expect_mapping
from mmcodec.runtime.tensors import DEFAULT_INLINE_THRESHOLD

K = TypeVar("K", bound=Hashable)

__all__ = [
    "METHODS",
    "MMCODEC",
    "Mmcodec",
    "Stats",
    "copied_tensor_bytes",
    "measure",
    "measure_interleaved",
    "method_by_name",
    "touch",
    "wire_bytes",
]


class Mmcodec:
    """The generated codec as a method: ``mm.encode`` / ``mm.decode`` (zero-copy views).

    With an ``inline_threshold`` other than the default it encodes through the schema
    codec's ``inline_threshold`` parameter (the sweep that chose the default); decoding
    is the same either way. Its name is ``"mmcodec"`` for the default threshold unless
    ``label_threshold``, else ``"mmcodec inline<N"`` (inline below N bytes).
    """

    def __init__(
        self, inline_threshold: int = DEFAULT_INLINE_THRESHOLD, *, label_threshold: bool = False
    ) -> None:
        self.inline_threshold = inline_threshold
        if inline_threshold == DEFAULT_INLINE_THRESHOLD and not label_threshold:
            self.name = MMCODEC
        else:
            self.name = f"{MMCODEC}{_INLINE_SUFFIX}{inline_threshold}"

    def encode(self, obj: Any) -> list[Frame]:
        if self.inline_threshold == DEFAULT_INLINE_THRESHOLD:
            return list(mm.encode(obj))
        return list(mm._CODEC.encode(obj, inline_threshold=self.inline_threshold))

    def decode(self, frames: Sequence[Frame]) -> mm.MultiModalKwargsItems:
        return mm.decode(frames, mm.MultiModalKwargsItems)


MMCODEC: Final = "mmcodec"
_INLINE_SUFFIX: Final = " inline<"

METHODS: Final[list[Baseline]] = [Mmcodec(), *BASELINES]
"""mmcodec first, then the baselines in report order."""


def method_by_name(name: str) -> Baseline:
    """The method a report (or the receiver process) names, including sweep variants."""
    for method in METHODS:
        if method.name == name:
            return method
    prefix = MMCODEC + _INLINE_SUFFIX
    if name.startswith(prefix) and name[len(prefix) :].isdigit():
        return Mmcodec(int(name[len(prefix) :]), label_threshold=True)
    raise KeyError(f"unknown method {name!r}")


# -- timing -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """Samples of one timed operation, in seconds, sorted ascending."""

    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Iterable[float]) -> Stats:
        ordered = tuple(sorted(samples))
        if not ordered:
            raise ValueError("no samples")
        return cls(ordered)

    @property
    def n(self) -> int:
        return len(self.samples)

    def quantile(self, q: float) -> float:
        """Linear interpolation between closest ranks (numpy's default method)."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} outside [0, 1]")
        position = q * (len(self.samples) - 1)
        low = math.floor(position)
        high = min(low + 1, len(self.samples) - 1)
        fraction = position - low
        return self.samples[low] + (self.samples[high] - self.samples[low]) * fraction

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def p10(self) -> float:
        return self.quantile(0.1)

    @property
    def p90(self) -> float:
        return self.quantile(0.9)


@dataclass(frozen=True, slots=True)
class Budget:
    """How long to time one operation: warm-up calls, then samples until the budget is spent."""

    warmup: int = 2
    min_reps: int = 5
    max_reps: int = 300
    seconds: float = 0.25


def measure(fn: Callable[[], object], budget: Budget) -> Stats:
    """Time ``fn()`` after ``budget.warmup`` untimed calls.

    Samples until at least ``min_reps`` were taken and ``seconds`` have passed, or
    ``max_reps`` were taken. The garbage collector stays enabled (engines run with it),
    but a collection runs before timing so earlier garbage is not charged here.
    """
    return measure_interleaved({0: fn}, budget, rounds=1)[0]


def measure_interleaved(
    fns: Mapping[K, Callable[[], object]], budget: Budget, rounds: int = 10
) -> dict[K, Stats]:
    """Time several calls side by side: warm each up, then ``rounds`` rounds of blocks.

    Each round gives every call a block of ``budget.seconds / rounds`` (at least
    ``ceil(min_reps / rounds)`` samples, at most ``max_reps // rounds``), so a machine
    that gets busier or quieter during the run shifts every call alike instead of
    whichever happened to run then. A garbage collection starts each round.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be positive, not {rounds}")
    for fn in fns.values():
        for _ in range(budget.warmup):
            fn()
    block = Budget(
        warmup=0,
        min_reps=-(-budget.min_reps // rounds),
        max_reps=max(1, budget.max_reps // rounds),
        seconds=budget.seconds / rounds,
    )
    samples: dict[K, list[float]] = {key: [] for key in fns}
    for _ in range(rounds):
        gc.collect()
        for key, fn in fns.items():
            samples[key] += _block(fn, block)
    return {key: Stats.of(values) for key, values in samples.items()}


def _block(fn: Callable[[], object], budget: Budget) -> list[float]:
    samples: list[float] = []
    clock = time.perf_counter
    started = clock()
    while len(samples) < budget.max_reps:
        t0 = clock()
        fn()
        t1 = clock()
        samples.append(t1 - t0)
        if len(samples) >= budget.min_reps and t1 - started >= budget.seconds:
            break
    return samples


# -- touching and copy accounting -------------------------------------------------------------

_byte_at = ctypes.c_ubyte.from_address
_Tensor = torch.Tensor


def touch(items: mm.MultiModalKwargsItems) -> tuple[int, int]:
    """Touch every decoded tensor: read the first byte of its memory.

    Every tensor *reference* in every element's data is touched (a tensor shared by 64 items
    is touched 64 times), so the work is the same for every method whatever it dedups. The
    read goes through ``ctypes`` (``data_ptr``, then the ``c_ubyte`` at that address), the
    cheapest way to prove the memory is there without paying a torch operator per tensor: a
    third of the instructions of ``ctypes.string_at``, a foreign-function call. Every method
    pays the touch alike, so its cost only dilutes their ratios. Returns (tensor references,
    their total ``nbytes``), the same for every lossless or lossy method on one payload.

    Mappings are read the way the encoder reads them (``expect_mapping``): vLLM's item
    classes are ``UserDict``s, whose own ``values()`` is Python code costing about 1 µs per
    entry, a cost of the container class that neither codec has and both would pay alike.
    """
    count = 0
    nbytes = 0
    for item_list in expect_mapping(items).values():
        for item in item_list:
            if item is None:
                continue
            for elem in expect_mapping(item).values():
                data = elem.data
                if type(data) is _Tensor:
                    size = data.nbytes
                    if size:
                        _ = _byte_at(data.data_ptr()).value  # the read is the point
                    count += 1
                    nbytes += size
                elif data is not None:
                    c, b = _touch_nested(data)
                    count += c
                    nbytes += b
    return count, nbytes


def _touch_nested(data: object) -> tuple[int, int]:
    if isinstance(data, _Tensor):
        size = data.nbytes
        if size:
            _ = _byte_at(data.data_ptr()).value
        return 1, size
    if isinstance(data, (list, tuple)):
        count = nbytes = 0
        for x in data:
            c, b = _touch_nested(x)
            count += c
            nbytes += b
        return count, nbytes
    return 0, 0


def wire_bytes(frames: Sequence[Frame]) -> int:
    """The bytes a transport moves: the sum of the frames' sizes."""
    return sum(memoryview(f).nbytes for f in frames)


def _storage_ranges(obj: object) -> list[tuple[int, int]]:
    ranges = set()
    for t in iter_tensors(obj):
        storage = t.untyped_storage()
        if storage.nbytes():
            ranges.add((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return sorted(ranges)


def copied_tensor_bytes(source: object, decoded: object) -> int:
    """Bytes of decoded tensor data that do not alias the source tensors' memory.

    In-process, a zero-copy codec's decoded tensors view frames that view the source's
    storages, so every decoded tensor lies inside a source storage and this is 0; each
    byte a codec copied (inline payloads, pickled storages) shows up here. Each distinct
    decoded tensor (by identity) counts once, with its own ``nbytes``.
    """
    ranges = _storage_ranges(source)
    copied = 0
    for t in iter_tensors(decoded):
        size = t.nbytes
        if not size:
            continue
        start = t.data_ptr()
        end = start + size
        if not any(lo <= start and end <= hi for lo, hi in ranges):
            copied += size
    return copied
