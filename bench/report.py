"""Reports: tables (plain text and markdown), the targets' PASS/FAIL lines, the plot.

Nothing here measures; it turns a :class:`Results` into text and a PNG. Times are
medians with the 10th-90th percentile spread in parentheses; a ratio is a baseline's
median divided by mmcodec's (above 1: mmcodec is faster).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.crossprocess import MMCODEC_SHM, CrossResult
from bench.floor import STEPS, FloorResult
from bench.inprocess import InProcessResult, Skipped, SweepResult
from bench.runner import MMCODEC, Stats
from bench.rust import RustRow

__all__ = [
    "FLOOR_TARGETS",
    "PayloadInfo",
    "Results",
    "Target",
    "check_targets",
    "markdown",
    "plot",
    "text",
]

SMALL: Final = "64 small items"
TWELVE_MB: Final = "qwen2.5-vl"
SIZE_SMALL, SIZE_22, SIZE_LARGE = "single 2 MB", "single 22 MB", "single 67 MB"
MEMCPY_REFERENCE: Final = 12 * (1 << 20)
"""The memcpy size the 12 MB throughput target compares with (like for like)."""


@dataclass(frozen=True, slots=True)
class PayloadInfo:
    name: str
    tensor_bytes: int
    tensors: int


@dataclass(slots=True)
class Results:
    """Everything one ``python -m bench`` run measured, and where and how."""

    command: str
    date: str
    machine: dict[str, str]
    payloads: list[PayloadInfo]
    inprocess: list[InProcessResult] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    touch: Stats | None = None
    memcpy: dict[int, Stats] = field(default_factory=dict)
    cross: list[CrossResult] = field(default_factory=list)
    cross_skipped: list[Skipped] = field(default_factory=list)
    transport_used: bool = False
    shm_bytes: int = 0
    """Size of the sender's shared-memory pool for "mmcodec shm" (0: not run)."""
    sweep: list[SweepResult] = field(default_factory=list)
    sweep_cross: list[CrossResult] = field(default_factory=list)
    rust: list[RustRow] = field(default_factory=list)
    """Decode and encode of each payload in Rust and in Python (bench/rust.py)."""
    floor: list[FloorResult] = field(default_factory=list)
    """mmcodec against the floor (:mod:`bench.floor`), side by side, per floor payload."""
    seconds: float = 0.0

    def find(self, payload: str, method: str) -> InProcessResult | None:
        for r in self.inprocess:
            if r.payload == payload and r.method == method:
                return r
        return None

    def find_cross(self, payload: str, method: str) -> CrossResult | None:
        for r in self.cross:
            if r.payload == payload and r.method == method:
                return r
        return None

    def methods(self) -> list[str]:
        return list(dict.fromkeys(r.method for r in self.inprocess))

    def cross_methods(self) -> list[str]:
        return list(dict.fromkeys(r.method for r in self.cross))


# -- formatting -------------------------------------------------------------------------------

_UNITS: Final = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"))


def _unit(seconds: float) -> tuple[float, str]:
    for scale, name in _UNITS:
        if seconds >= scale:
            return scale, name
    return _UNITS[-1]


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_time(seconds: float) -> str:
    """``963 µs``, ``21.1 ms``, ``2.50 s``."""
    scale, unit = _unit(seconds)
    return f"{_num(seconds / scale)} {unit}"


def fmt_stats(stats: Stats) -> str:
    """The median and, when there are several samples, the p10-p90 spread in its unit."""
    scale, unit = _unit(stats.median)
    if stats.n == 1:
        return f"{_num(stats.median / scale)} {unit} (n=1)"
    return (
        f"{_num(stats.median / scale)} {unit} ({_num(stats.p10 / scale)}-{_num(stats.p90 / scale)})"
    )


def fmt_ratio(ratio: float) -> str:
    return f"{_num(ratio)}x"


def fmt_bytes(n: int) -> str:
    return f"{n:,}"


def fmt_rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1e6:,.0f}"


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    notes: Sequence[str] = ()

    def text(self) -> str:
        widths = [
            max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
            for i, h in enumerate(self.headers)
        ]

        def line(cells: Sequence[str]) -> str:
            first, *rest = cells
            out = [first.ljust(widths[0])]
            out += [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
            return "  ".join(out).rstrip()

        lines = [self.title, line(self.headers), "  ".join("-" * w for w in widths)]
        lines += [line(r) for r in self.rows]
        lines += self.notes
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [f"**{self.title}**", ""]
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append("|" + "|".join([":---", *["---:"] * (len(self.headers) - 1)]) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.notes:
            lines.append("")
            lines += [f"{n}  " for n in self.notes]
        return "\n".join(lines)


# -- tables -----------------------------------------------------------------------------------


def _ratio(base: Stats, ours: Stats | None) -> str:
    if ours is None or ours.median <= 0:
        return ""
    if base is ours:
        return "1"
    return fmt_ratio(base.median / ours.median)


def inprocess_tables(results: Results) -> list[Table]:
    tables = []
    for info in results.payloads:
        rows = [r for r in results.inprocess if r.payload == info.name]
        if not rows:
            continue
        ours = results.find(info.name, MMCODEC)
        body = []
        for r in rows:
            body.append(
                [
                    r.method,
                    fmt_stats(r.roundtrip),
                    _ratio(r.roundtrip, ours.roundtrip if ours else None),
                    fmt_stats(r.encode),
                    _ratio(r.encode, ours.encode if ours else None),
                    fmt_stats(r.decode),
                    _ratio(r.decode, ours.decode if ours else None),
                    fmt_bytes(r.wire_bytes),
                    str(r.frames),
                    fmt_bytes(r.copied_bytes),
                ]
            )
        notes = [f"{r.method}: {r.note}" for r in rows if r.note]
        notes += [
            f"{s.method}: not run ({s.note})" for s in results.skipped if s.payload == info.name
        ]
        tables.append(
            Table(
                f"In-process — {info.name}: {fmt_bytes(info.tensor_bytes)} tensor bytes "
                f"in {info.tensors} tensors",
                [
                    "method",
                    "round trip",
                    "x",
                    "encode",
                    "x",
                    "decode",
                    "x",
                    "wire bytes",
                    "frames",
                    "tensor bytes copied",
                ],
                body,
                notes,
            )
        )
    return tables


def summary_table(results: Results) -> Table:
    """Round-trip ratios, every payload against every baseline."""
    baselines = [m for m in results.methods() if m != MMCODEC]
    rows = []
    for info in results.payloads:
        ours = results.find(info.name, MMCODEC)
        if ours is None:
            continue
        row = [info.name, fmt_stats(ours.roundtrip)]
        for name in baselines:
            base = results.find(info.name, name)
            row.append(_ratio(base.roundtrip, ours.roundtrip) if base else "—")
        rows.append(row)
    return Table(
        "Round trip (touched), mmcodec and baseline ÷ mmcodec",
        ["payload", "mmcodec", *baselines],
        rows,
    )


def floor_table(floors: Sequence[FloorResult], codec: str = MMCODEC) -> Table:
    """``codec`` against the floor, step by step: times and the ratio by median and by p10."""
    rows = [
        [
            r.payload,
            step,
            fmt_stats(r.codec[step]),
            fmt_stats(r.floor[step]),
            fmt_ratio(r.ratio(step)),
            fmt_ratio(r.ratio(step, "p10")),
        ]
        for r in floors
        for step in STEPS
    ]
    return Table(
        f"{codec} against the floor (what any codec must do; bench/floor.py), side by side",
        ["payload", "step", codec, "floor", "x (median)", "x (p10)"],
        rows,
        [
            "floor encode: walk every element, read every distinct tensor's layout (data_ptr, "
            "shape, stride, dtype, storage_offset, nbytes). floor decode: from the same memory, "
            "build the same objects (one view per run, fields, elements, items), no wire work. "
            "Decodes and round trips touch every tensor. x is the codec's time ÷ the floor's.",
        ],
    )


def memcpy_lines(results: Results) -> list[str]:
    return [
        f"memcpy {size >> 20} MiB (np.copyto, one thread): "
        f"{size / stats.median / 1e9:.1f} GB/s "
        f"({size / stats.p90 / 1e9:.1f}-{size / stats.p10 / 1e9:.1f})"
        for size, stats in sorted(results.memcpy.items())
    ]


def _memcpy_rate(results: Results, size: int = MEMCPY_REFERENCE) -> float | None:
    stats = results.memcpy.get(size)
    return None if stats is None else size / stats.median


def cross_table(results: Results) -> Table:
    memcpy = _memcpy_rate(results)
    rows = []
    for info in results.payloads:
        ours = results.find_cross(info.name, MMCODEC)
        for r in results.cross:
            if r.payload != info.name:
                continue
            rows.append(
                [
                    info.name,
                    r.method,
                    fmt_stats(r.latency),
                    _ratio(r.latency, ours.latency if ours else None),
                    fmt_rate(r.throughput),
                    f"{100 * r.throughput / memcpy:.0f} %" if memcpy else "",
                    str(r.messages),
                ]
            )
    transport = (
        "mmcodec through mmcodec.transport.zmq"
        if results.transport_used
        else "mmcodec through send_multipart/recv_multipart (copy=False): no transport module"
    )
    shm = (
        [
            f"{MMCODEC_SHM}: the same transport, with frames of 64 KiB and more copied once "
            f"into a {results.shm_bytes / (1 << 20):,.0f} MiB shared-memory pool on the sender "
            "and decoded in place from the shared pages by the receiver."
        ]
        if results.shm_bytes
        else []
    )
    notes = [
        "send → decoded: from before encode to decoded and touched in the receiver process.",
        f"throughput: payload (tensor) bytes per second, streaming, {transport}.",
        *shm,
        *memcpy_lines(results),
        *(f"{s.payload} / {s.method}: not run ({s.note})" for s in results.cross_skipped),
    ]
    return Table(
        "Cross-process over ZMQ ipc:// (PUSH/PULL, receiver process decodes and acks)",
        ["payload", "method", "send → decoded", "x", "MB/s", "of memcpy 12 MiB", "messages"],
        rows,
        notes,
    )


def sweep_table(results: Results) -> Table:
    rows = []
    for s in results.sweep:
        cross = next(
            (
                c
                for c in results.sweep_cross
                if c.payload == s.payload and c.method.endswith(f"<{s.threshold}")
            ),
            None,
        )
        rows.append(
            [
                s.payload,
                fmt_bytes(s.threshold),
                fmt_stats(s.roundtrip),
                fmt_bytes(s.wire_bytes),
                str(s.frames),
                fmt_bytes(s.copied_bytes),
                fmt_stats(cross.latency) if cross else "",
            ]
        )
    return Table(
        "mmcodec inline threshold (payload regions below it travel in the header)",
        [
            "payload",
            "threshold",
            "round trip",
            "wire bytes",
            "frames",
            "tensor bytes copied",
            "send → decoded",
        ],
        rows,
    )


def size_table(results: Results) -> Table:
    """Encode and decode against payload size (single-tensor payloads)."""
    rows = []
    for name in (SIZE_SMALL, SIZE_22, SIZE_LARGE):
        info = next((p for p in results.payloads if p.name == name), None)
        if info is None:
            continue
        for r in results.inprocess:
            if r.payload == name:
                rows.append(
                    [
                        name,
                        r.method,
                        fmt_stats(r.encode),
                        fmt_stats(r.decode),
                        fmt_stats(r.roundtrip),
                        fmt_bytes(r.copied_bytes),
                    ]
                )
    return Table(
        "Payload size: one bf16 tensor of 2.1, 22.0 and 67.1 MB",
        ["payload", "method", "encode", "decode", "round trip", "tensor bytes copied"],
        rows,
    )


# -- targets ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """One of the issue's targets: what was measured and whether it meets the bar."""

    name: str
    measured: str
    bar: str
    passed: bool | None  # None: not measured in this run

    def line(self) -> str:
        status = {True: "PASS", False: "FAIL", None: "N/A "}[self.passed]
        return f"{status}  {self.name}: {self.measured} (target {self.bar})"


def _ratio_target(
    results: Results, name: str, payload: str, baseline: str, at_least: float
) -> Target:
    ours, base = results.find(payload, MMCODEC), results.find(payload, baseline)
    if ours is None or base is None:
        return Target(name, "not measured", f"≥ {at_least:g}x", None)
    ratio = base.roundtrip.median / ours.roundtrip.median
    measured = (
        f"{fmt_ratio(ratio)} ({fmt_time(base.roundtrip.median)} vs "
        f"{fmt_time(ours.roundtrip.median)})"
    )
    return Target(name, measured, f"≥ {at_least:g}x", ratio >= at_least)


def _size_target(results: Results, op: str) -> Target:
    name = f"mmcodec {op} time independent of size (67 MB vs 2 MB)"
    small, large = results.find(SIZE_SMALL, MMCODEC), results.find(SIZE_LARGE, MMCODEC)
    if small is None or large is None:
        return Target(name, "not measured", "≤ 2x for 32x the bytes", None)
    a, b = getattr(small, op).median, getattr(large, op).median
    measured = f"{fmt_time(b)} vs {fmt_time(a)}, {b / a:.2f}x"
    return Target(name, measured, "≤ 2x for 32x the bytes", b / a <= 2.0)


def check_targets(results: Results) -> list[Target]:
    targets = [
        _ratio_target(results, f"{SMALL}, round trip vs pickle protocol 5", SMALL, "pickle", 30),
        _ratio_target(results, f"{SMALL}, round trip vs msgspec hooks", SMALL, "msgspec hooks", 5),
    ]
    ours, hooks = results.find(SMALL, MMCODEC), results.find(SMALL, "msgspec hooks")
    if ours is None or hooks is None:
        targets.append(Target(f"{SMALL}, wire bytes vs hooks", "not measured", "≤ 0.5x", None))
    else:
        share = ours.wire_bytes / hooks.wire_bytes
        targets.append(
            Target(
                f"{SMALL}, wire bytes vs msgspec hooks",
                f"{fmt_bytes(ours.wire_bytes)} vs {fmt_bytes(hooks.wire_bytes)}, {share:.2f}x",
                "≤ 0.5x",
                share <= 0.5,
            )
        )
    targets += floor_targets(results.floor, MMCODEC)
    targets += [_size_target(results, "encode"), _size_target(results, "decode")]
    sized = [results.find(n, MMCODEC) for n in (SIZE_SMALL, SIZE_22, SIZE_LARGE)]
    if all(sized):
        copied = sum(r.copied_bytes for r in sized if r)
        targets.append(
            Target(
                "mmcodec tensor bytes copied in-process, single-tensor payloads",
                fmt_bytes(copied),
                "0",
                copied == 0,
            )
        )
    targets.append(
        _ratio_target(results, "22 MB, round trip vs pickle protocol 5", SIZE_22, "pickle", 500)
    )
    targets.append(_throughput_target(results))
    return targets


FLOOR_TARGETS: Final = {"encode": 2.0, "round trip": 1.5}
"""Issue 24: on the 64 small items, the codec's step at most this many times the floor's,
by the median and by the 10th percentile of the same run."""


def floor_targets(floors: Sequence[FloorResult], codec: str) -> list[Target]:
    found = next((r for r in floors if r.payload == SMALL), None)
    targets = []
    for step, bar in FLOOR_TARGETS.items():
        name = f"{SMALL}, {codec} {step} vs the floor"
        if found is None:
            targets.append(Target(name, "not measured", f"≤ {bar:g}x", None))
            continue
        median, p10 = found.ratio(step), found.ratio(step, "p10")
        measured = (
            f"{fmt_ratio(median)} by median ({fmt_time(found.codec[step].median)} vs "
            f"{fmt_time(found.floor[step].median)}), {fmt_ratio(p10)} by p10"
        )
        targets.append(Target(name, measured, f"≤ {bar:g}x", max(median, p10) <= bar))
    return targets


_THROUGHPUT_ROWS: Final = ((MMCODEC_SHM, "mmcodec shm"), (MMCODEC, "mmcodec over ipc://"))
"""The cross-process rows the throughput target reports, each against memcpy."""


def _throughput_target(results: Results) -> Target:
    """Every mmcodec row against memcpy; met when one row reaches half of it (named)."""
    name = f"cross-process throughput, {TWELVE_MB} (12.2 MB) vs memcpy 12 MiB"
    memcpy = _memcpy_rate(results)
    rows = [
        (label, row)
        for method, label in _THROUGHPUT_ROWS
        if (row := results.find_cross(TWELVE_MB, method)) is not None
    ]
    if not rows or memcpy is None:
        return Target(name, "not measured", "≥ 50 %", None)
    parts = [f"memcpy {fmt_rate(memcpy)} MB/s"]
    for label, row in rows:
        part = f"{label} {fmt_rate(row.throughput)} MB/s, {100 * row.throughput / memcpy:.0f} %"
        others = [
            f"{100 * row.throughput * stats.median / size:.0f} % of memcpy {size >> 20} MiB"
            for size, stats in sorted(results.memcpy.items())
            if size != MEMCPY_REFERENCE
        ]
        parts.append(part + (f" ({', '.join(others)})" if others else ""))
    meeting = [label for label, row in rows if row.throughput / memcpy >= 0.5]
    bar = "≥ 50 %" + (f", met by {meeting[0]}" if meeting else "")
    return Target(name, "; ".join(parts), bar, bool(meeting))


# -- whole reports ----------------------------------------------------------------------------


def rust_table(results: Results) -> Table:
    """Each payload's message decoded and encoded by both runtimes, in the same run."""
    rows = []
    for row in results.rust:
        cells = [row.payload]
        for op in ("decode", "encode", "encode_bytes"):
            python, rust = row.python[op], row.rust[op]
            cells += [fmt_stats(python), fmt_stats(rust), _ratio(python, rust)]
        cells.append(fmt_bytes(row.rust_copied))
        rows.append(cells)
    headers = ["payload"]
    for op in ("decode", "encode", "encode_bytes"):
        headers += [f"{op} Python", f"{op} Rust", "x"]
    headers.append("bytes Rust copied")
    notes = [
        "The same message on both sides: Python encodes the payload into one buffer; Rust "
        "(rust/tools, mmcodec-bench, release build) and Python decode its frames, and encode "
        "the value again to frames and to one buffer. x is Python's median ÷ Rust's. Rust's "
        "decoded tensors are slices of the input: the last column counts tensor bytes outside "
        "it."
    ]
    return Table("Rust and Python runtimes, same message", headers, rows, notes)


def _tables(results: Results) -> list[Table]:
    tables = [summary_table(results), *inprocess_tables(results), size_table(results)]
    if results.floor:
        tables.append(floor_table(results.floor))
    if results.rust:
        tables.append(rust_table(results))
    if results.cross:
        tables.append(cross_table(results))
    if results.sweep:
        tables.append(sweep_table(results))
    return [t for t in tables if t.rows]


def _touch_note(results: Results) -> list[str]:
    if results.touch is None:
        return []
    return [
        f"Touching every decoded tensor (one byte each, {SMALL}) costs "
        f"{fmt_stats(results.touch)} of each round trip, for every method."
    ]


def text(results: Results) -> str:
    machine = ", ".join(f"{k}: {v}" for k, v in results.machine.items())
    parts = [f"mmcodec benchmark, {results.date}: {results.command}\n{machine}"]
    parts += [t.text() for t in _tables(results)]
    parts.append("\n".join(_touch_note(results) + [t.line() for t in check_targets(results)]))
    parts.append(f"total: {results.seconds:.0f} s")
    return "\n\n".join(parts)


def markdown(results: Results, plot_name: str | None = "bench.png") -> str:
    machine = ", ".join(f"{k}: {v}" for k, v in results.machine.items())
    head = [
        "# mmcodec benchmark: latest results",
        "",
        f"Command: `{results.command}` — {results.date}, {results.seconds:.0f} s.  ",
        f"Machine: {machine}.",
        "",
        "Times are medians with the 10th-90th percentile in parentheses; x is the "
        "baseline's median ÷ mmcodec's. Round trips touch every decoded tensor "
        "(read one byte of each tensor reference).",
    ]
    parts = ["\n".join(head)]
    parts += [t.markdown() for t in _tables(results)]
    lines = ["**Targets**", ""] + [f"- `{t.line()}`" for t in check_targets(results)]
    lines += ["", *_touch_note(results)]
    parts.append("\n".join(lines).rstrip())
    if plot_name:
        parts.append(f"![benchmark plot]({plot_name})")
    return "\n\n".join(parts) + "\n"


# -- plot -------------------------------------------------------------------------------------


def _legend(ax: Any, **kwargs: Any) -> None:
    """A legend when the panel has labelled data, else a note that it has none."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)
    else:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)


def plot(results: Results, path: Path) -> None:
    """One panel per measurement, log scales, written as a PNG (matplotlib's Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(16, 15))
    methods = results.methods()
    payloads = [p.name for p in results.payloads]

    def bars(
        ax: Any,
        value: Callable[[str, str], tuple[float, float, float] | None],
        names: Sequence[str] = payloads,
        methods: Sequence[str] = methods,
    ) -> None:
        width = 0.8 / max(len(methods), 1)
        for i, method in enumerate(methods):
            xs, ys, lo, hi = [], [], [], []
            for j, payload in enumerate(names):
                v = value(payload, method)
                if v is None:
                    continue
                xs.append(j + (i - (len(methods) - 1) / 2) * width)
                ys.append(v[0])
                lo.append(v[0] - v[1])
                hi.append(v[2] - v[0])
            if xs:
                ax.bar(xs, ys, width, yerr=[lo, hi], label=method, capsize=2)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_yscale("log")
        ax.grid(axis="y", which="major", alpha=0.3)

    def rt(payload: str, method: str) -> tuple[float, float, float] | None:
        r = results.find(payload, method)
        s = r.roundtrip if r else None
        return None if s is None else (s.median * 1e6, s.p10 * 1e6, s.p90 * 1e6)

    ax = axes[0][0]
    bars(ax, rt)
    ax.set_title("In-process round trip, every tensor touched (µs, log)")
    _legend(ax, fontsize=8)

    def wire(payload: str, method: str) -> tuple[float, float, float] | None:
        r = results.find(payload, method)
        return None if r is None else (r.wire_bytes,) * 3

    ax = axes[0][1]
    bars(ax, wire)
    _legend(ax, fontsize=8)
    ax.set_title("Wire bytes per message (log)")

    def latency(payload: str, method: str) -> tuple[float, float, float] | None:
        r = results.find_cross(payload, method)
        s = r.latency if r else None
        return None if s is None else (s.median * 1e6, s.p10 * 1e6, s.p90 * 1e6)

    def rate(payload: str, method: str) -> tuple[float, float, float] | None:
        r = results.find_cross(payload, method)
        return None if r is None else (r.throughput / 1e6,) * 3

    crossed = [p for p in payloads if any(r.payload == p for r in results.cross)]
    ax = axes[1][0]
    bars(ax, latency, crossed, results.cross_methods())
    _legend(ax, fontsize=8)
    ax.set_title("Cross-process send → decoded over ZMQ ipc:// (µs, log)")
    ax = axes[1][1]
    bars(ax, rate, crossed, results.cross_methods())
    for (size, stats), style in zip(sorted(results.memcpy.items()), ("--", ":"), strict=False):
        ax.axhline(
            size / stats.median / 1e6,
            linestyle=style,
            color="black",
            linewidth=1,
            label=f"memcpy {size >> 20} MiB",
        )
    _legend(ax, fontsize=8)
    ax.set_title("Cross-process throughput (payload MB/s, log)")

    ax = axes[2][0]
    sizes = [(SIZE_SMALL, 2 * (1 << 20)), (SIZE_22, 21 * (1 << 20)), (SIZE_LARGE, 64 * (1 << 20))]
    for method in methods:
        for op, style in (("encode", "-o"), ("decode", "--s")):
            points = [
                (n / 1e6, getattr(r, op).median * 1e6)
                for name, n in sizes
                if (r := results.find(name, method)) is not None
            ]
            if points:
                ax.plot(*zip(*points, strict=True), style, label=f"{method} {op}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([n / 1e6 for _, n in sizes], [f"{n / 1e6:.1f}" for _, n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("payload MB")
    ax.set_title("Encode / decode vs payload size (µs, log-log)")
    _legend(ax, fontsize=7, ncol=2)
    ax.grid(which="major", alpha=0.3)

    ax = axes[2][1]
    for payload in dict.fromkeys(s.payload for s in results.sweep):
        sweep = [s for s in results.sweep if s.payload == payload]
        ax.errorbar(
            range(len(sweep)),
            [s.roundtrip.median * 1e6 for s in sweep],
            yerr=[
                [(s.roundtrip.median - s.roundtrip.p10) * 1e6 for s in sweep],
                [(s.roundtrip.p90 - s.roundtrip.median) * 1e6 for s in sweep],
            ],
            marker="o",
            capsize=3,
            label=f"{payload}, in-process round trip",
        )
        ax.set_xticks(range(len(sweep)), [fmt_bytes(s.threshold) for s in sweep])
    for payload in dict.fromkeys(c.payload for c in results.sweep_cross):
        cross = [c for c in results.sweep_cross if c.payload == payload]
        ax.plot(
            range(len(cross)),
            [c.latency.median * 1e6 for c in cross],
            "--^",
            label=f"{payload}, send → decoded",
        )
    ax.set_yscale("log")
    ax.set_xlabel("inline threshold (bytes)")
    ax.set_title("mmcodec inline threshold (µs, log)")
    _legend(ax, fontsize=8)
    ax.grid(which="major", alpha=0.3)

    fig.suptitle(f"mmcodec benchmark — {results.date}", fontsize=14)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
