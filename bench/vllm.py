"""``python -m bench.vllm`` (``make bench-vllm``, in .venv-vllm): vLLM's codec vs the vLLM binding.

On the very same vLLM objects (the design payloads built by ``vllm.multimodal.inputs``,
64 small items, one 22 MB item), side by side and interleaved in one run
(:func:`bench.runner.measure_interleaved`): vLLM 0.33's ``MsgpackEncoder`` /
``MsgpackDecoder(MultiModalKwargsItems)`` against ``mmcodec.generated.multimodal_vllm``;
and, in the same rounds, ``mmcodec.generated.multimodal`` on the same payloads built with
its mirror classes (``mmcodec.domain.multimodal``). Every decoded tensor is touched
(:func:`bench.runner.touch`). vLLM's decoder is given ``bytearray`` headers (it warns about
read-only ``bytes``); its payload frames, and all of ours, are passed as encoded. Then the
binding against the floor on vLLM's classes (:mod:`bench.floor`), and the plugin at every
process boundary of vLLM, stock vs plugin (:mod:`bench.vllm_sites`). Writes
``bench/results/vllm.md``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # before vllm is imported
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import msgspec
import torch
import vllm
import vllm.multimodal.inputs as vi
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from bench import vllm_sites
from bench.floor import FLOOR_PAYLOADS, FloorResult, measure_floor
from bench.inprocess import single_tensor
from bench.report import floor_table, floor_targets
from bench.runner import Budget, Stats, measure_interleaved, touch, wire_bytes
from mmcodec.generated import multimodal as mm
from mmcodec.generated import multimodal_vllm as mv
from mmcodec.payloads import PAYLOADS, tensor_bytes

RESULTS: Final = Path(__file__).resolve().parent / "results" / "vllm.md"
SITES_RESULTS: Final = RESULTS.with_name("vllm-plugin.md")
"""Where ``--sites`` writes: it runs only the second part, so vllm.md keeps the last full run."""
SMALL: Final = "64 small items"
LARGE: Final = "single 22 MB"
TARGETS: Final = {(SMALL, "mmcodec"): 8.0, (SMALL, "mirror"): 10.0, (LARGE, "mmcodec"): 1.5}
"""Round-trip speed-up over vLLM's codec: issue 24 for the 64 small items (the binding on
vLLM's classes, and mmcodec on its mirror classes), issue 9 for the 22 MB item."""
WIRE_TARGET: Final = 0.5
"""Wire bytes at most this fraction of vLLM's, on the 64 small items."""

FULL: Final = Budget(warmup=3, min_reps=20, max_reps=1_000_000, seconds=2.0)
"""Sampled by time in ROUNDS blocks: with a cap of 2,000 calls a 50 µs round trip was sampled
for 0.1 s, and two runs minutes apart put the 22 MB ratio at 0.93x and 1.26x."""
ROUNDS: Final = 20
QUICK: Final = Budget(warmup=1, min_reps=2, max_reps=4, seconds=0.0)
SITES_FULL: Final = Budget(warmup=3, min_reps=20, max_reps=1_000_000, seconds=1.5)
"""Per site and payload: each path sampled for 1.5 s in SITES_ROUNDS blocks."""
SITES_QUICK: Final = Budget(warmup=1, min_reps=2, max_reps=4, seconds=0.0)
SITES_ROUNDS: Final = 10


def single_22mb(seed: int) -> Any:
    """One item, one batched bf16 ``pixel_values`` of 21 MiB (as ``make bench``'s row)."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn((1, 21 * 1024 // 2, 1024), generator=g, dtype=torch.bfloat16)
    config = {"pixel_values": vi.MultiModalFieldConfig.batched("image")}
    return vi.MultiModalKwargsItems.from_hf_inputs({"pixel_values": pixels}, config)


def payloads() -> dict[str, Callable[[int], Any]]:
    built: dict[str, Callable[[int], Any]] = {
        name: (lambda seed, make=make: make(seed, api=vi))  # type: ignore[misc]
        for name, make in PAYLOADS.items()
    }
    built[LARGE] = single_22mb
    return built


def mirror_payloads() -> dict[str, Callable[[int], Any]]:
    """The same payloads built with mmcodec's mirror classes (the same seeds, shapes, values)."""
    built: dict[str, Callable[[int], Any]] = dict(PAYLOADS)
    built[LARGE] = lambda seed: single_tensor(21 * (1 << 20), seed)
    return built


class _Vllm:
    name: Final = "vllm"

    def __init__(self) -> None:
        self._encoder = MsgpackEncoder()
        self._decoder = MsgpackDecoder(vi.MultiModalKwargsItems)

    def encode(self, obj: Any) -> list[Any]:
        return list(self._encoder.encode(obj))

    def receive(self, frames: Sequence[Any]) -> list[Any]:
        """What a transport hands the decoder: a writable header, payload frames as they are."""
        return [bytearray(f) if isinstance(f, bytes) else f for f in frames]

    def decode(self, frames: Sequence[Any]) -> Any:
        return self._decoder.decode(frames)


class _Binding:
    name: Final = "mmcodec"

    def encode(self, obj: Any) -> list[Any]:
        return mv.encode(obj)

    def receive(self, frames: Sequence[Any]) -> list[Any]:
        return list(frames)

    def decode(self, frames: Sequence[Any]) -> Any:
        return mv.decode(frames, vi.MultiModalKwargsItems)


class _Mirror:
    """mmcodec on its mirror classes: what an engine that adopts them pays."""

    name: Final = "mirror"

    def encode(self, obj: Any) -> list[Any]:
        return mm.encode(obj)

    def receive(self, frames: Sequence[Any]) -> list[Any]:
        return list(frames)

    def decode(self, frames: Sequence[Any]) -> Any:
        return mm.decode(frames, mm.MultiModalKwargsItems)


METHODS: Final = (_Vllm(), _Binding(), _Mirror())


def run(budget: Budget) -> list[dict[Any, Any]]:
    rows = []
    mirrors = mirror_payloads()
    for name, make in payloads().items():
        items = make(0)
        mirror_items = mirrors[name](0)
        fns: dict[tuple[str, str], Callable[[], object]] = {}
        row: dict[Any, Any] = {"payload": name, "tensor bytes": tensor_bytes(items)}
        for method in METHODS:
            if method.name == "mirror":
                items = mirror_items
            frames = method.receive(method.encode(items))
            decoded = method.decode(frames)
            assert decoded == items, f"{method.name} changed {name}"  # vLLM's equality
            row[f"{method.name} wire"] = wire_bytes(frames)
            row[f"{method.name} frames"] = len(frames)

            def round_trip(m: Any = method, obj: Any = items) -> object:
                return touch(m.decode(m.receive(m.encode(obj))))

            def decode(m: Any = method, f: list[Any] = frames) -> object:
                return touch(m.decode(f))

            def encode(m: Any = method, obj: Any = items) -> object:
                return m.encode(obj)

            fns[(method.name, "round trip")] = round_trip
            fns[(method.name, "encode")] = encode
            fns[(method.name, "decode")] = decode
        for key, stats in measure_interleaved(fns, budget, rounds=ROUNDS).items():
            row[key] = stats
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _t(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _stats(s: Stats) -> str:
    return f"{_t(s.median)} ({_t(s.p10)}-{_t(s.p90)})"


def _ratio(row: dict[Any, Any], op: str, stat: str = "median", method: str = "mmcodec") -> float:
    """vLLM's ``stat`` ÷ ``method``'s; ``"p10"``: both codecs in the host's fast mode
    (docs/performance.md)."""
    vllm, ours = row[("vllm", op)], row[(method, op)]
    return getattr(vllm, stat) / getattr(ours, stat)  # type: ignore[no-any-return]


def floors(budget: Budget) -> list[FloorResult]:
    """The binding against the floor on vLLM's classes (see :mod:`bench.floor`)."""
    made = payloads()
    return [
        measure_floor(name, made[name](0), vi, mv.encode, _Binding().decode, budget, ROUNDS)
        for name in FLOOR_PAYLOADS
    ]


def _line(row: dict[Any, Any]) -> str:
    return (
        f"{row['payload']:>16}: round trip vllm {_t(row[('vllm', 'round trip')].median)}, "
        f"mmcodec {_t(row[('mmcodec', 'round trip')].median)}, {_ratio(row, 'round trip'):.2f}x; "
        f"mirror {_ratio(row, 'round trip', method='mirror'):.2f}x; "
        f"wire {row['mmcodec wire'] / row['vllm wire']:.2f}x"
    )


def report(
    rows: list[dict[Any, Any]],
    floor: list[FloorResult],
    command: str,
    seconds: float,
    load: tuple[str, str],
) -> str:
    out = [
        "# mmcodec inside vLLM: vLLM's codec vs the vLLM binding",
        "",
        f"Command: `{command}` — {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{seconds:.0f} s.  ",
        f"Machine: {platform.processor() or platform.machine()}, cores: {os.cpu_count()}, "
        f"Python {platform.python_version()}, vllm {vllm.__version__}, torch {torch.__version__}, "
        f"msgspec {msgspec.__version__}, GLIBC_TUNABLES: {os.environ.get('GLIBC_TUNABLES', '-')}, "
        f"load average at start: {load[0]}, at end: {load[1]}.",
        "",
        "Both codecs run on the very same vLLM objects (`vllm.multimodal.inputs`, built by "
        "`MultiModalKwargsItems.from_hf_inputs`), interleaved in one process. vLLM is "
        "`MsgpackEncoder()` / `MsgpackDecoder(MultiModalKwargsItems)` (size threshold 256 B); "
        "mmcodec is `mmcodec.generated.multimodal_vllm`; mirror is `mmcodec.generated.multimodal` "
        "on the same payloads built with mmcodec's mirror classes. Every decoded tensor is "
        "touched. Times are medians with the 10th-90th percentile; x is vLLM's median ÷ "
        "mmcodec's (mirror x: ÷ the mirror's).",
        "",
        "| payload | tensor bytes | vLLM round trip | mmcodec round trip | x | encode x | "
        "decode x | mirror round trip | mirror x | vLLM wire | mmcodec wire | wire ÷ vLLM |",
        "|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        out.append(
            f"| {row['payload']} | {row['tensor bytes']:,} | "
            f"{_stats(row[('vllm', 'round trip')])} | {_stats(row[('mmcodec', 'round trip')])} | "
            f"{_ratio(row, 'round trip'):.2f}x | {_ratio(row, 'encode'):.2f}x | "
            f"{_ratio(row, 'decode'):.2f}x | {_stats(row[('mirror', 'round trip')])} | "
            f"{_ratio(row, 'round trip', method='mirror'):.2f}x | {row['vllm wire']:,} | "
            f"{row['mmcodec wire']:,} | {row['mmcodec wire'] / row['vllm wire']:.2f} |"
        )
    if floor:
        out += ["", floor_table(floor, "mmcodec (vLLM's classes)").markdown()]
    out += ["", "**Targets (issues 9 and 24)**", ""]
    by_name = {row["payload"]: row for row in rows}
    for (name, method), target in TARGETS.items():
        if name in by_name:
            got = _ratio(by_name[name], "round trip", method=method)
            verdict = "PASS" if got >= target else "FAIL"
            label = "mmcodec on its mirror classes" if method == "mirror" else "the vLLM binding"
            out.append(
                f"- {verdict}: {name} round trip, {label}, {got:.2f}x vLLM (target ≥ {target}x); "
                f"{_ratio(by_name[name], 'round trip', 'p10', method):.2f}x at the 10th "
                "percentile"
            )
    if SMALL in by_name:
        wire = by_name[SMALL]["mmcodec wire"] / by_name[SMALL]["vllm wire"]
        verdict = "PASS" if wire <= WIRE_TARGET else "FAIL"
        out.append(f"- {verdict}: {SMALL} wire {wire:.2f}x vLLM's bytes (target ≤ {WIRE_TARGET})")
    out += [f"- {t.line()}" for t in floor_targets(floor, "the vLLM binding")]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vllm", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few samples each (a smoke run)")
    parser.add_argument(
        "--out",
        type=Path,
        help=f"the Markdown report ({RESULTS.name}; {SITES_RESULTS.name} with --sites)",
    )
    parser.add_argument(
        "--sites",
        action="store_true",
        help="only the plugin's process boundaries (bench.vllm_sites)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    budget = QUICK if args.quick else FULL
    rows = [] if args.sites else run(budget)
    floor = [] if args.sites else floors(budget)
    site_rows = vllm_sites.run(SITES_QUICK if args.quick else SITES_FULL, SITES_ROUNDS)
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    elapsed = time.perf_counter() - started
    sites = "\n".join(vllm_sites.report(site_rows)) + "\n"
    if args.sites:
        text = (
            f"<!-- python -m bench.vllm --sites{' --quick' if args.quick else ''}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed:.0f} s, "
            f"load average {load_start} at start, {load_end} at end -->\n{sites}"
        )
    else:
        command = "make bench-vllm" + (" (--quick)" if args.quick else "")
        text = report(rows, floor, command, elapsed, (load_start, load_end)) + "\n" + sites
    out = args.out or (SITES_RESULTS if args.sites else RESULTS)
    out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
