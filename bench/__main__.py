"""``python -m bench`` (``make bench``): every method side by side, tables, targets, a plot.

Runs, in one process run: memcpy bandwidth; in-process round trips, encode and decode of
every payload with mmcodec and every baseline; mmcodec against the floor (``bench.floor``:
what any codec must do) on the floor payloads; the inline-threshold sweep; decode and
encode of every payload by the Rust runtime beside Python's (``bench/rust.py``); cross-process
send -> decoded and throughput over ZMQ ``ipc://`` with a receiver process, for every
method and for "mmcodec shm" (large frames through a shared-memory pool). Prints the
tables and the targets' PASS/FAIL lines (the exit status does not depend on them) and
writes ``bench/results/latest.md`` and ``bench/results/bench.png``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec
import numpy as np
import torch
import zmq

from bench import report
from bench.crossprocess import SHM_METHOD, WINDOW, Receiver, shm_pool_bytes
from bench.floor import FLOOR_PAYLOADS, measure_floor
from bench.inprocess import (
    SYNTHETIC,
    Skipped,
    measure_touch,
    memcpy_bandwidth,
    profile_roundtrip,
    ragged_tensors,
    run_inline_sweep,
    run_inprocess,
)
from bench.runner import METHODS, Budget, Mmcodec
from bench.rust import run_rust
from mmcodec.domain import multimodal as domain
from mmcodec.domain.multimodal import MultiModalKwargsItems
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, iter_tensors, tensor_bytes

RAGGED: Final = "64 ragged tensors"
RESULTS: Final = Path(__file__).resolve().parent / "results"
SWEEP_THRESHOLDS: Final = (0, 256, 1024, 4096, 16384, 65536)
SWEEP_PAYLOADS: Final = (report.SMALL, RAGGED, report.TWELVE_MB)
MEMCPY_SIZES: Final = (report.MEMCPY_REFERENCE, 256 * (1 << 20))
SINGLE_SHOT_ABOVE: Final = 0.5
"""Seconds: a method slower than this per round trip is timed once and not streamed."""
SKIP_INPROCESS: Final = {
    ("qwen2.5-vl x16", "pickle oob"): (
        "the same bytes and time as pickle: torch tensors never go out of band; ~25 s a call"
    ),
}

FULL: Final = Budget(warmup=2, min_reps=5, max_reps=100_000, seconds=1.0)
"""Sampled by time, not capped by count: a cap of a few hundred calls sampled a fast method
for a few ms in all, too little on a host whose speed changes within seconds."""
FULL_CROSS: Final = Budget(warmup=2, min_reps=5, max_reps=200, seconds=0.3)
QUICK: Final = Budget(warmup=1, min_reps=2, max_reps=2, seconds=0.0)


def _machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / (1 << 20):.0f} GiB RAM"
                break
    except OSError:
        pass
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory or "unknown",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "msgspec": msgspec.__version__,
        "pyzmq": f"{zmq.__version__} (libzmq {zmq.zmq_version()})",
        "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", "unset"),
        "load average at start": _load(),
    }


def _load() -> str:
    """The 1-minute load average: other work on the machine shows up in the spread."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def _command(argv: Sequence[str]) -> str:
    if os.environ.get("MAKELEVEL") and not argv:
        return "make bench"
    tunables = os.environ.get("GLIBC_TUNABLES")
    prefix = f"GLIBC_TUNABLES={tunables} " if tunables else ""
    return " ".join([f"{prefix}python -m bench", *argv])


def _progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    names = [*PAYLOADS, *SYNTHETIC]
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--payloads", nargs="+", choices=names, metavar="NAME", help=f"subset of: {names}"
    )
    parser.add_argument("--quick", action="store_true", help="tiny repetitions (a smoke run)")
    parser.add_argument("--no-cross", action="store_true", help="skip cross-process runs")
    parser.add_argument("--no-sweep", action="store_true", help="skip the inline sweep")
    parser.add_argument(
        "--no-rust", action="store_true", help="skip the Rust runtime's rows (needs cargo)"
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="where latest.md and bench.png go"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print a cProfile of mmcodec's round trip on 64 small items",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(args_list)
    started = time.perf_counter()
    budget, cross_budget = (QUICK, QUICK) if args.quick else (FULL, FULL_CROSS)
    progress = _progress

    generators = {**PAYLOADS, **SYNTHETIC}
    selected = args.payloads or list(generators)
    payloads: dict[str, MultiModalKwargsItems] = {
        name: generators[name](args.seed) for name in generators if name in selected
    }
    results = report.Results(
        command=_command(args_list),
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=_machine(),
        payloads=[
            report.PayloadInfo(name, tensor_bytes(items), len(list(iter_tensors(items))))
            for name, items in payloads.items()
        ],
    )

    progress("memcpy")
    results.memcpy = memcpy_bandwidth(MEMCPY_SIZES, budget)
    results.inprocess, results.skipped = run_inprocess(
        payloads,
        METHODS,
        budget,
        skip=SKIP_INPROCESS,
        single_shot_above=SINGLE_SHOT_ABOVE,
        progress=progress,
    )
    if report.SMALL in payloads:
        results.touch = measure_touch(payloads[report.SMALL], budget)
    for name in FLOOR_PAYLOADS:
        if name in payloads:
            progress(f"floor: {name}")
            results.floor.append(
                measure_floor(name, payloads[name], domain, mm.encode, _decode_items, budget)
            )
    # The sweep adds its own payload, of separately allocated tensors, to "64 small items".
    sweep_source = {**payloads, RAGGED: ragged_tensors(args.seed)}
    sweep_payloads: dict[str, MultiModalKwargsItems] = {
        name: sweep_source[name]
        for name in SWEEP_PAYLOADS
        if name in payloads or (name == RAGGED and report.SMALL in payloads)
    }
    if not args.no_sweep:
        results.sweep = run_inline_sweep(sweep_payloads, SWEEP_THRESHOLDS, budget, progress)

    if not args.no_rust:
        real = {name: items for name, items in payloads.items() if name in PAYLOADS}
        results.rust = run_rust(real, budget, progress)

    if not args.no_cross:
        _cross(args, payloads, sweep_payloads, cross_budget, results)

    results.seconds = time.perf_counter() - started
    results.machine["load average at end"] = _load()
    print(report.text(results))
    args.out.mkdir(parents=True, exist_ok=True)
    plot_name = None if args.no_plot else "bench.png"
    if plot_name:
        report.plot(results, args.out / plot_name)
    (args.out / "latest.md").write_text(report.markdown(results, plot_name), encoding="utf-8")
    print(f"wrote {args.out / 'latest.md'}" + ("" if args.no_plot else f" and {plot_name}"))
    if args.profile and report.SMALL in payloads:
        print(f"\ncProfile, mmcodec round trip on {report.SMALL}, 200 calls:")
        print(profile_roundtrip(payloads[report.SMALL]))
    return 0


def _decode_items(frames: list[memoryview]) -> MultiModalKwargsItems:
    return mm.decode(frames, MultiModalKwargsItems)


def _cross(
    args: argparse.Namespace,
    payloads: dict[str, MultiModalKwargsItems],
    sweep_payloads: dict[str, MultiModalKwargsItems],
    budget: Budget,
    results: report.Results,
) -> None:
    real = {n: items for n, items in payloads.items() if n in PAYLOADS}
    slow = {
        (r.payload, r.method): f"in-process round trip {report.fmt_time(r.roundtrip.median)}"
        for r in results.inprocess
        if r.roundtrip.median > SINGLE_SHOT_ABOVE
    }
    slow.update({(s.payload, s.method): s.note for s in results.skipped})
    progress = _progress
    # Room for every message the throughput stream may have in flight, and one more.
    wanted = max((tensor_bytes(items) for items in real.values()), default=0) * (WINDOW + 1)
    shm_bytes = shm_pool_bytes(max(wanted, 1 << 20))
    with Receiver(shm_bytes=max(shm_bytes, 1 << 20)) as receiver:
        results.transport_used = receiver.transport is not None
        results.shm_bytes = shm_bytes
        extra = [SHM_METHOD] if receiver.transport is not None and shm_bytes >= 1 << 20 else []
        for payload, items in real.items():
            methods = []
            for method in [METHODS[0], *extra, *METHODS[1:]]:
                note = slow.get((payload, method.name))
                if note is None:
                    methods.append(method)
                else:
                    results.cross_skipped.append(Skipped(payload, method.name, note))
            progress(f"cross-process: {payload}")
            results.cross += receiver.measure(payload, methods, items, budget)
        if not args.no_sweep:
            for payload, items in sweep_payloads.items():
                progress(f"cross-process sweep: {payload}")
                sweep = [Mmcodec(t, label_threshold=True) for t in SWEEP_THRESHOLDS]
                results.sweep_cross += receiver.measure(payload, sweep, items, budget)


if __name__ == "__main__":
    sys.exit(main())
