"""In-process measurements: round trips, encode, decode, copies, memcpy, the inline sweep.

Every method runs on the same payload objects in the same process, one after another;
each operation gets warm-up calls and a time budget (:func:`bench.runner.measure`).
Decode-alone times decoding the frames the method's own ``encode`` produced, as they are
(mmcodec's memoryviews, pickle's bytes); the round trip is ``touch(decode(encode(x)))``.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import io
import pstats
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import torch

from bench.baselines import Baseline, Frame
from bench.runner import (
    Budget,
    Mmcodec,
    Stats,
    copied_tensor_bytes,
    measure,
    measure_interleaved,
    touch,
    wire_bytes,
)
from mmcodec.domain.multimodal import MultiModalFieldConfig, MultiModalKwargsItems, NestedTensors
from mmcodec.generated import multimodal as mm

__all__ = [
    "SYNTHETIC",
    "InProcessResult",
    "SweepResult",
    "memcpy_bandwidth",
    "profile_roundtrip",
    "ragged_tensors",
    "run_inline_sweep",
    "run_inprocess",
    "single_tensor",
]

MIB: Final = 1 << 20


def single_tensor(nbytes: int, seed: int = 0) -> MultiModalKwargsItems:
    """One item with one batched bf16 ``pixel_values`` of ``nbytes`` (rows of 1024 values)."""
    row = 1024 * 2
    if nbytes <= 0 or nbytes % row:
        raise ValueError(f"nbytes must be a positive multiple of {row}, not {nbytes}")
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn((1, nbytes // row, 1024), generator=g, dtype=torch.bfloat16)
    batch: dict[str, NestedTensors] = {"pixel_values": pixels}
    config = {"pixel_values": MultiModalFieldConfig.batched("image")}
    return MultiModalKwargsItems.from_hf_inputs(batch, config)


SYNTHETIC: Final[dict[str, Callable[[int], MultiModalKwargsItems]]] = {
    "single 2 MB": lambda seed: single_tensor(2 * MIB, seed),
    "single 22 MB": lambda seed: single_tensor(21 * MIB, seed),
    "single 67 MB": lambda seed: single_tensor(64 * MIB, seed),
}
"""Single-tensor payloads for the size-independence and 22 MB targets (2.1, 22.0, 67.1 MB)."""


RAGGED_SIZES: Final = (16, 64, 256, 1024, 4096, 16384)


def ragged_tensors(seed: int = 0, n: int = 64) -> MultiModalKwargsItems:
    """One item holding a list of ``n`` separately allocated float32 tensors.

    Sizes cycle through :data:`RAGGED_SIZES` bytes, and no two share a storage, so every
    tensor is its own payload region: the inline threshold decides, tensor by tensor,
    between a copy into the header and a frame of its own (the case the threshold is for).
    """
    g = torch.Generator().manual_seed(seed)
    tensors: list[NestedTensors] = [
        torch.randn(RAGGED_SIZES[i % len(RAGGED_SIZES)] // 4, generator=g) for i in range(n)
    ]
    batch: dict[str, NestedTensors] = {"embeds": [tensors]}
    config = {"embeds": MultiModalFieldConfig.batched("image")}
    return MultiModalKwargsItems.from_hf_inputs(batch, config)


@dataclass(frozen=True, slots=True)
class InProcessResult:
    """One method on one payload."""

    payload: str
    method: str
    roundtrip: Stats
    encode: Stats
    decode: Stats
    wire_bytes: int
    frames: int
    copied_bytes: int
    note: str = ""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A method not run on a payload, and why."""

    payload: str
    method: str
    note: str


def _probe(method: Baseline, items: MultiModalKwargsItems) -> tuple[float, float, float, Any]:
    clock = time.perf_counter
    t0 = clock()
    frames = method.encode(items)
    t1 = clock()
    decoded = method.decode(frames)
    t2 = clock()
    touch(decoded)
    t3 = clock()
    return t1 - t0, t2 - t1, t3 - t0, (frames, decoded)


def run_inprocess(
    payloads: Mapping[str, MultiModalKwargsItems],
    methods: Sequence[Baseline],
    budget: Budget,
    *,
    skip: Mapping[tuple[str, str], str] | None = None,
    single_shot_above: float = 0.5,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[InProcessResult], list[Skipped]]:
    """Every method on every payload, side by side (:func:`measure_interleaved`).

    A method whose first round trip takes longer than ``single_shot_above`` seconds is
    reported from that one call (n = 1).
    """
    results: list[InProcessResult] = []
    skipped: list[Skipped] = []
    for payload, items in payloads.items():
        progress(f"in-process: {payload}")
        probed: list[tuple[Baseline, list[Frame], int]] = []
        done: dict[str, InProcessResult] = {}
        for method in methods:
            why = skip.get((payload, method.name)) if skip else None
            if why is not None:
                skipped.append(Skipped(payload, method.name, why))
                continue
            enc, dec, rt, (frames, decoded) = _probe(method, items)
            copied = copied_tensor_bytes(items, decoded)
            del decoded
            if rt > single_shot_above:
                done[method.name] = InProcessResult(
                    payload,
                    method.name,
                    Stats.of([rt]),
                    Stats.of([enc]),
                    Stats.of([dec]),
                    wire_bytes(frames),
                    len(frames),
                    copied,
                    f"one call ({rt:.1f} s)",
                )
                del frames
                gc.collect()
            else:
                probed.append((method, frames, copied))
        fns: dict[tuple[str, str], Callable[[], object]] = {}
        for method, frames, _ in probed:
            fns[(method.name, "roundtrip")] = _roundtrip(method, items)
            fns[(method.name, "encode")] = functools.partial(method.encode, items)
            fns[(method.name, "decode")] = functools.partial(method.decode, frames)
        stats = measure_interleaved(fns, budget)
        for method, frames, copied in probed:
            done[method.name] = InProcessResult(
                payload,
                method.name,
                roundtrip=stats[(method.name, "roundtrip")],
                encode=stats[(method.name, "encode")],
                decode=stats[(method.name, "decode")],
                wire_bytes=wire_bytes(frames),
                frames=len(frames),
                copied_bytes=copied,
            )
        results += [done[m.name] for m in methods if m.name in done]
        del probed, fns
        gc.collect()
    return results, skipped


def _roundtrip(method: Baseline, items: MultiModalKwargsItems) -> Callable[[], object]:
    encode, decode = method.encode, method.decode

    def roundtrip() -> object:
        return touch(decode(encode(items)))

    return roundtrip


def measure_touch(items: MultiModalKwargsItems, budget: Budget) -> Stats:
    """What :func:`touch` alone costs on mmcodec's decoded ``items`` (part of each round trip)."""
    decoded = mm.decode(mm.encode(items), mm.MultiModalKwargsItems)
    return measure(lambda: touch(decoded), budget)


# -- memcpy -----------------------------------------------------------------------------------


def memcpy_bandwidth(sizes: Sequence[int], budget: Budget) -> dict[int, Stats]:
    """Seconds per single-threaded copy (``np.copyto``) of ``size`` bytes into a warm buffer.

    GB/s is ``size / seconds``. numpy copies on one thread (a plain ``memcpy``); both
    buffers are written once before timing, so page faults are not timed.
    """
    out: dict[int, Stats] = {}
    for size in sizes:
        src = np.ones(size, dtype=np.uint8)
        dst = np.zeros(size, dtype=np.uint8)
        out[size] = measure(functools.partial(np.copyto, dst, src), budget)
        del src, dst
    return out


# -- inline threshold sweep -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepResult:
    """mmcodec with one inline threshold on one payload."""

    payload: str
    threshold: int
    roundtrip: Stats
    wire_bytes: int
    frames: int
    copied_bytes: int


def run_inline_sweep(
    payloads: Mapping[str, MultiModalKwargsItems],
    thresholds: Sequence[int],
    budget: Budget,
    progress: Callable[[str], None] = lambda _: None,
) -> list[SweepResult]:
    """In-process round trips of mmcodec at each inline threshold, side by side."""
    results = []
    for payload, items in payloads.items():
        progress(f"inline sweep: {payload}")
        methods = [Mmcodec(t, label_threshold=True) for t in thresholds]
        stats = measure_interleaved(
            {m.inline_threshold: _roundtrip(m, items) for m in methods}, budget
        )
        for method in methods:
            frames = method.encode(items)
            results.append(
                SweepResult(
                    payload,
                    method.inline_threshold,
                    stats[method.inline_threshold],
                    wire_bytes(frames),
                    len(frames),
                    copied_tensor_bytes(items, method.decode(frames)),
                )
            )
    return results


# -- profile ----------------------------------------------------------------------------------


def profile_roundtrip(items: MultiModalKwargsItems, calls: int = 200, top: int = 20) -> str:
    """cProfile of mmcodec's touched round trip, ``top`` functions by own time."""
    method = Mmcodec()
    roundtrip = _roundtrip(method, items)
    for _ in range(5):
        roundtrip()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        roundtrip()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()
