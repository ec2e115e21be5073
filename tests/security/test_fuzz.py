"""Structure-aware fuzzing of the decoder: mutate valid messages, demand a value or DecodeError.

Every case starts from one of the valid messages in ``samples.SAMPLES`` and mutates it:

- frames: flipped, overwritten (with msgpack markers: huge array/map/bin lengths,
  extension types, int extremes), inserted and deleted bytes, truncation, deep nesting
  spliced into frame 0, swapped, missing, duplicated, extra and odd-typed frames;
- structure: frame 0 decoded to plain values, then a value replaced (ints at the edges,
  dtype names, strings, bytes, extension types, containers, deep nesting, long lists),
  deleted, inserted, duplicated or swapped, with targeted changes to tensor runs (dtype,
  shape, frame index, offset, count), the reference table and back-references to shared
  union and struct values;
- the single buffer of ``decode_bytes``: bytes and frame-table entries;
- payload bytes only, where the message must still decode to the same structure;
- generic, coordinate-free mutations of the frames' bytes: a pattern replaced wherever
  it occurs, a slice repeated or duplicated elsewhere, slices swapped or reversed, a
  splice with another sample's header;
- amplification by padding: a run declaring thousands of (empty) tensors beside padding
  that buys room for them in the header (an extra envelope entry, a long key, an unknown
  trailing field of a body struct, extra run entries);
- per-limit probes: each ``Limits`` field set to a bound and a message measuring just
  under, at and just over it (the decoder takes it exactly when it is within the bound,
  and the encoder, given the same limits, refuses exactly what the decoder would).

The oracle: decoding either raises ``DecodeError`` (exactly that class, with a path and a
message from a deliberate check, not the catch-all ``rejected (...)``), or returns a
well-typed value of the schema that survives an encode/decode round trip unchanged.
Nothing else may escape; each test runs under a timeout and a peak-RSS bound, and each
decode's peak traced allocation is bounded per input byte (:data:`BYTES_PER_BYTE`).

Every judged decode is timed, and re-run under ``tracemalloc``; the most expensive case
per input byte is printed at the end of the run (and written as JSON to
``MMCODEC_FUZZ_COST_FILE`` when that is set): see docs/security.md.

Cases: ``MMCODEC_FUZZ_EXAMPLES`` in all (default 10,000, the ``make test`` run; ``make fuzz``
sets 100,000), split between the tests by the shares below.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import resource
import struct
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.dtypes import BY_NAME
from tests.security.samples import (
    HEAD_BODY,
    HEAD_REFS,
    HEAD_TENSORS,
    RUN_COUNT,
    SAMPLES,
    check_value,
    same,
)

EXAMPLES = int(os.environ.get("MMCODEC_FUZZ_EXAMPLES", "10000"))
SHARES = {
    "frames": 0.28,
    "structure": 0.28,
    "buffer": 0.12,
    "payload": 0.12,
    "generic": 0.1,
    "padding": 0.06,
    "limits": 0.04,
}
SECONDS_PER_CASE = 0.05
"""Generous: a case takes a few milliseconds. Only the timeout uses it."""
RSS_GROWTH_LIMIT = 512 << 20
MAX_REPEATED_BYTES = 4 << 20
"""A generic "repeat" grows a frame by at most this much. Repeats compound over a case's
mutations (1000 x 1000 x 1000 of a 364-byte header is 364 GB); unbounded, the test's own
input, not the decoder, would exhaust memory and trip ``RSS_GROWTH_LIMIT``."""
BYTES_PER_BYTE = 64
FIXED_BYTES = 1 << 20
"""A decode may allocate at most ``BYTES_PER_BYTE`` per input byte, plus ``FIXED_BYTES``
(traced by ``tracemalloc``; payload frames are views, so most inputs allocate far less)."""
SMALL_INPUT = 1024
"""Per-byte costs are reported for inputs of at least this many bytes (below it, the fixed
cost of a call dominates any ratio), and again for inputs of at least ``LARGE_INPUT``."""
LARGE_INPUT = 64 << 10


def _settings(share: str) -> settings:
    return settings(
        max_examples=max(10, round(EXAMPLES * SHARES[share])),
        deadline=None,
        database=None,
        derandomize=False,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )


def _timeout(share: str) -> pytest.MarkDecorator:
    return pytest.mark.timeout(120 + EXAMPLES * SHARES[share] * SECONDS_PER_CASE)


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


@dataclass(frozen=True)
class Sample:
    tp: type[Any]
    value: Any
    frames: tuple[bytes, ...]
    buffer: bytes
    bool_frames: frozenset[int]
    """Payload frames that hold bool tensors: a flipped byte there may be rejected."""


@cache
def samples() -> dict[str, Sample]:
    out = {}
    for name, (tp, make) in SAMPLES.items():
        value = make()
        frames = tuple(bytes(f) for f in mm.encode(value))
        envelope = msgspec.msgpack.decode(frames[0])
        bool_frames = frozenset(
            run[2] for run in envelope[HEAD_TENSORS] if run[0] == "bool" and isinstance(run[2], int)
        )
        out[name] = Sample(tp, value, frames, bytes(mm.encode_bytes(value)), bool_frames)
    return out


LIMITS = [
    mm.DEFAULT_LIMITS,
    mm.Limits(max_elements=3, max_depth=2, max_ndim=2),
    mm.Limits(max_frames=2, max_total_bytes=4096, max_header_bytes=300),
]

# -- the cost of each case ---------------------------------------------------------------------


@dataclass
class Worst:
    """The most expensive case seen, by one measure."""

    per_byte: float = 0.0
    value: float = 0.0
    size: int = 0
    test: str = ""


@dataclass
class Costs:
    """What the fuzzer measured: per-byte and absolute worst time and peak allocation."""

    cases: dict[str, int] = field(default_factory=dict)
    seconds: Worst = field(default_factory=Worst)
    peak: Worst = field(default_factory=Worst)
    large_seconds: Worst = field(default_factory=Worst)
    large_peak: Worst = field(default_factory=Worst)
    max_seconds: Worst = field(default_factory=Worst)
    max_peak: Worst = field(default_factory=Worst)

    def record(self, test: str, size: int, seconds: float, peak: int) -> None:
        self.cases[test] = self.cases.get(test, 0) + 1
        if size >= SMALL_INPUT:
            if seconds / size > self.seconds.per_byte:
                self.seconds = Worst(seconds / size, seconds, size, test)
            if peak / size > self.peak.per_byte:
                self.peak = Worst(peak / size, peak, size, test)
        if size >= LARGE_INPUT:
            if seconds / size > self.large_seconds.per_byte:
                self.large_seconds = Worst(seconds / size, seconds, size, test)
            if peak / size > self.large_peak.per_byte:
                self.large_peak = Worst(peak / size, peak, size, test)
        if seconds > self.max_seconds.value:
            self.max_seconds = Worst(seconds / max(size, 1), seconds, size, test)
        if peak > self.max_peak.value:
            self.max_peak = Worst(peak / max(size, 1), peak, size, test)

    def summary(self) -> list[str]:
        total = sum(self.cases.values())
        by_test = ", ".join(f"{name} {count:,}" for name, count in sorted(self.cases.items()))
        ms, mp = self.max_seconds, self.max_peak
        lines = [f"fuzz cases judged: {total:,} ({by_test})"]
        for least, s, p in (
            (SMALL_INPUT, self.seconds, self.peak),
            (LARGE_INPUT, self.large_seconds, self.large_peak),
        ):
            lines += [
                f"worst time per input byte (inputs >= {least:,} B): {s.per_byte * 1e6:.3f} us/B "
                f"({s.value * 1e3:.2f} ms for {s.size:,} B, {s.test})",
                f"worst peak allocation per input byte (inputs >= {least:,} B): "
                f"{p.per_byte:.1f} B/B ({p.value / 1e6:.2f} MB for {p.size:,} B, {p.test})",
            ]
        return [
            *lines,
            f"slowest case: {ms.value * 1e3:.2f} ms for {ms.size:,} B ({ms.test}); largest peak: "
            f"{mp.value / 1e6:.2f} MB for {mp.size:,} B ({mp.test})",
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "seconds_per_byte": vars(self.seconds),
            "peak_bytes_per_byte": vars(self.peak),
            "seconds_per_byte_large": vars(self.large_seconds),
            "peak_bytes_per_byte_large": vars(self.large_peak),
            "slowest": vars(self.max_seconds),
            "largest_peak": vars(self.max_peak),
        }


COSTS = Costs()
"""Filled by :func:`judge` over the whole run; printed by ``tests/security/conftest.py``."""


def input_size(given: Any) -> int:
    """Bytes of a decode's input: the frames' lengths, or the buffer's."""
    if isinstance(given, (list, tuple)):
        return sum(_size_of(frame) for frame in given)
    return _size_of(given)


def _size_of(frame: Any) -> int:
    try:
        return memoryview(frame).nbytes
    except TypeError:
        return len(frame) if isinstance(frame, str) else 0


def measured(decode: Callable[[], Any], size: int) -> Callable[[], Any]:
    """``decode``, timed and then re-run under tracemalloc; the costs go to :data:`COSTS`,
    and the peak must stay within ``BYTES_PER_BYTE * size + FIXED_BYTES``."""

    def run() -> Any:
        start = time.perf_counter()
        try:
            return decode()
        finally:
            seconds = time.perf_counter() - start
            if size >= SMALL_INPUT and seconds / size > min(
                COSTS.seconds.per_byte,
                COSTS.large_seconds.per_byte if size >= LARGE_INPUT else float("inf"),
            ):
                seconds = min(seconds, _retimed(decode))  # a new worst: not a scheduler hiccup
            tracemalloc.start()
            try:
                with contextlib.suppress(mm.DecodeError):
                    decode()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            COSTS.record(_current_test(), size, seconds, peak)
            assert peak <= BYTES_PER_BYTE * size + FIXED_BYTES, (
                f"a decode of {size} bytes allocated {peak} bytes at peak"
            )

    return run


def _retimed(decode: Callable[[], Any], times: int = 3) -> float:
    """The fastest of a few more runs, with the collector paused (a collection of the
    fuzzer's own heap would otherwise be charged to the case it happened in)."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(times):
            start = time.perf_counter()
            with contextlib.suppress(mm.DecodeError):
                decode()
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def _current_test() -> str:
    name = os.environ.get("PYTEST_CURRENT_TEST", "?")
    return name.split("::")[-1].split(" ")[0].removeprefix("test_fuzz_")


# -- the oracle -----------------------------------------------------------------------------


def judge(
    decode: Callable[[], Any],
    sample: Sample,
    *,
    payload_only: bool = False,
    bools: bool = False,
    size: int | None = None,
) -> None:
    """The decode either fails with a deliberate DecodeError or yields a correct value.

    With ``size`` (the input's bytes), the decode's cost is measured and bounded."""
    if size is not None:
        decode = measured(decode, size)
    try:
        result = decode()
    except mm.DecodeError as error:
        assert type(error) is mm.DecodeError
        assert error.path.startswith("$")
        assert error.message
        assert str(error) == f"{error.path}: {error.message}"
        # The catch-all names an exception nobody checked for: a check is missing.
        assert not error.message.startswith("rejected"), error
        if payload_only:
            # Payload bytes are the transport's business; only bool bytes are checked.
            assert bools and "bool payload holds a byte other than 0 and 1" in error.message
        _event("rejected")
        return
    _event("decoded")
    check_value(result, sample.tp)
    if payload_only:
        assert same(result, sample.value, values=False)
    again = mm.decode(mm.encode(result), sample.tp)
    assert same(again, result)


def _event(outcome: str) -> None:
    """Count outcomes; ``--hypothesis-show-statistics`` shows the mix."""
    if currently_in_test_context():
        event(outcome)


# -- strategies ------------------------------------------------------------------------------

NAMES = list(SAMPLES)

EDGE_INTS = [
    0, 1, 2, 3, 4, 7, 8, 16, 63, 64, 255, 256, 1023, 1024, 4095, 4096, 65535, 65536,
    2**20, 2**20 + 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53, 2**62, 2**63 - 1,
    2**63, 2**64 - 1, -1, -2, -8, -(2**31), -(2**63),
]  # fmt: skip
INTS = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(2**63), 2**64 - 1), st.integers(-4, 40))
WORDS = [*BY_NAME, "float128", "", "mmc", "multimodal", "MultiModalKwargsItems", "image", "b00l"]
EXT = msgspec.msgpack.Ext
LEAVES = st.one_of(
    INTS,
    st.sampled_from(WORDS),
    st.text(max_size=8),
    st.binary(max_size=80),
    st.none(),
    st.booleans(),
    st.floats(),
    st.builds(EXT, st.integers(-128, 127), st.binary(max_size=8)),
)
VALUES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=6), INTS), children, max_size=3),
    ),
    max_leaves=10,
)

# Raw msgpack to splice into frame 0: huge lengths, extension types, edge ints, bad opcodes.
MARKERS = [
    b"\xdd\xff\xff\xff\xff",  # array32 of 4 billion
    b"\xdc\xff\xff",  # array16 of 65535
    b"\xdf\xff\xff\xff\xff",  # map32
    b"\xc6\xff\xff\xff\xff",  # bin32
    b"\xdb\xff\xff\xff\xff",  # str32
    b"\xc7\xff\x01",  # ext8
    b"\xc9\xff\xff\xff\xff\x01",  # ext32
    b"\xd4\x01\x00",  # fixext1
    b"\xd8\x05" + bytes(16),  # fixext16
    b"\xcf" + b"\xff" * 8,  # uint64 max
    b"\xd3\x80" + bytes(7),  # int64 min
    b"\xcb\x7f\xf8" + bytes(6),  # float64 NaN
    b"\xc1",  # never used
    b"\xc0",
    b"\xc2",
    b"\xc3",
    b"\x90",
    b"\x80",
    b"\xa0",
    b"\xff",
    b"\x00",
    b"\x7f",
    b"\x9f",
    b"\x8f",
]


def _frame_index(data: st.DataObject, frames: list[Any]) -> int:
    # Frame 0 (the header) is where the structure is: pick it half the time.
    last = len(frames) - 1
    return data.draw(st.one_of(st.just(0), st.integers(0, last)), label="frame")


def _as_bytes(frame: Any) -> bytes:
    return bytes(frame) if isinstance(frame, (bytes, bytearray, memoryview)) else b""


def _edit(data: st.DataObject, blob: bytes) -> bytes:
    """One byte-level edit of ``blob``."""
    size = len(blob)
    kind = data.draw(
        st.sampled_from(["flip", "overwrite", "marker", "insert", "delete", "truncate", "deep"]),
        label="edit",
    )
    at = data.draw(st.integers(0, size), label="at")
    if kind == "flip" and size:
        at = min(at, size - 1)
        mask = data.draw(st.integers(1, 255), label="mask")
        return blob[:at] + bytes([blob[at] ^ mask]) + blob[at + 1 :]
    if kind == "overwrite":
        chunk = data.draw(st.binary(min_size=1, max_size=8), label="chunk")
        return blob[:at] + chunk + blob[at + len(chunk) :]
    if kind == "marker":
        chunk = data.draw(st.sampled_from(MARKERS), label="marker")
        replace = data.draw(st.booleans(), label="replace")
        return blob[:at] + chunk + blob[at + (len(chunk) if replace else 0) :]
    if kind == "insert":
        return blob[:at] + data.draw(st.binary(min_size=1, max_size=16), label="insert") + blob[at:]
    if kind == "delete":
        length = data.draw(st.integers(1, 32), label="length")
        return blob[:at] + blob[at + length :]
    if kind == "truncate":
        return blob[:at]
    if kind == "deep":
        depth = data.draw(st.sampled_from([2, 33, 100, 1_000, 10_000, 200_000]), label="depth")
        opener = data.draw(st.sampled_from([b"\x91", b"\x92\x01\x91", b"\x81\xa1k"]), label="op")
        return blob[:at] + opener * depth + b"\x00" + blob[at:]
    return blob


def _odd_frame(data: st.DataObject, frame: bytes) -> Any:
    """A frame of another Python type: some are fine (bytearray, float arrays), some not."""
    kind = data.draw(
        st.sampled_from(["bytearray", "memoryview", "numpy", "floats", "strided", "str", "none"]),
        label="odd",
    )
    if kind == "bytearray":
        return bytearray(frame)
    if kind == "memoryview":
        return memoryview(frame)
    if kind == "numpy":
        return np.frombuffer(frame, dtype=np.uint8).reshape(1, -1)
    if kind == "floats":
        usable = len(frame) // 4 * 4
        return np.frombuffer(frame[:usable], dtype=np.float32)
    if kind == "strided":
        return memoryview(frame)[::2]
    if kind == "str":
        return frame.decode("latin-1")
    return None


def _mutate_frames(data: st.DataObject, frames: list[Any]) -> list[Any]:
    op = data.draw(
        st.sampled_from(
            ["edit", "edit", "edit", "swap", "drop", "duplicate", "extra", "empty", "odd"]
        ),
        label="frames op",
    )
    if op == "edit" or (op in ("swap", "drop") and len(frames) < 2):
        index = _frame_index(data, frames)
        frames[index] = _edit(data, _as_bytes(frames[index]))
    elif op == "swap":
        i = data.draw(st.integers(0, len(frames) - 1), label="i")
        j = data.draw(st.integers(0, len(frames) - 1), label="j")
        frames[i], frames[j] = frames[j], frames[i]
    elif op == "drop":
        del frames[data.draw(st.integers(0, len(frames) - 1), label="drop")]
    elif op == "duplicate":
        index = data.draw(st.integers(0, len(frames) - 1), label="dup")
        frames.insert(data.draw(st.integers(0, len(frames)), label="to"), frames[index])
    elif op == "extra":
        frames.append(data.draw(st.binary(max_size=128), label="extra"))
    elif op == "empty":
        frames[_frame_index(data, frames)] = b""
    else:
        index = _frame_index(data, frames)
        frames[index] = _odd_frame(data, _as_bytes(frames[index]))
    return frames


# -- msgpack-level (structural) mutations -------------------------------------------------------

Location = tuple[Any, Any]
"""(container, key): a list and an index, or a dict and one of its keys."""


def _locations(tree: Any) -> list[Location]:
    out: list[Location] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for index, child in enumerate(node):
                out.append((node, index))
                stack.append(child)
        elif isinstance(node, dict):
            for key, child in node.items():
                out.append((node, key))
                stack.append(child)
    return out


def _deep_value(data: st.DataObject) -> Any:
    depth = data.draw(st.sampled_from([1, 2, 31, 32, 33, 64, 300]), label="depth")
    leaf = data.draw(st.sampled_from([0, 1, None, [0, 5], 2.5]), label="leaf")
    tagged = data.draw(st.booleans(), label="tagged")
    value: Any = leaf
    for _ in range(depth):
        value = [1, [value]] if tagged else [value]
    return value


def _run_field_value(data: st.DataObject, field: int, n_frames: int) -> Any:
    if field == 0:
        return data.draw(st.sampled_from(WORDS), label="dtype")
    if field == 1:
        return data.draw(st.lists(INTS, max_size=20), label="shape")
    if field == 2:
        return data.draw(
            st.one_of(st.integers(-2, n_frames + 2), st.binary(max_size=64), INTS), label="data"
        )
    return data.draw(INTS, label="offset or count")


def _mutate_tree(data: st.DataObject, envelope: list[Any], n_frames: int) -> list[Any]:
    op = data.draw(
        st.sampled_from(
            ["replace", "replace", "tweak", "delete", "insert", "duplicate", "swap", "deep",
             "long", "run", "run", "refs", "root", "backref", "backref", "backref",
             "structref", "structref"]
        ),
        label="tree op",
    )  # fmt: skip
    runs = envelope[HEAD_TENSORS] if len(envelope) > HEAD_TENSORS else None
    if op == "run" and isinstance(runs, list) and runs:
        run = runs[data.draw(st.integers(0, len(runs) - 1), label="run")]
        if isinstance(run, list):
            field = data.draw(st.integers(0, RUN_COUNT + 1), label="field")
            if field > RUN_COUNT:
                run.append(data.draw(INTS, label="extra field"))
            else:
                while len(run) <= field:
                    run.append(1 if len(run) == RUN_COUNT else 0)
                run[field] = _run_field_value(data, field, n_frames)
            return envelope
    if op == "refs" and len(envelope) > HEAD_REFS:
        envelope[HEAD_REFS] = data.draw(
            st.one_of(st.lists(st.integers(-1, 30), max_size=40), VALUES), label="refs"
        )
        return envelope
    if op == "root":
        return data.draw(st.one_of(VALUES, st.just(envelope[:HEAD_BODY])), label="root")
    locations = _locations(envelope)
    if op == "backref":
        # A union value sent once is referred back to as [-1, index] ("@ref" for str
        # tags): point a reference at another shared value, or past the end.
        backrefs = [
            (c, k)
            for c, k in locations
            if isinstance(c[k], list) and len(c[k]) == 2 and c[k][0] in (-1, "@ref")
        ]
        if backrefs:
            container, key = backrefs[data.draw(st.integers(0, len(backrefs) - 1), label="ref")]
            container[key][1] = data.draw(st.one_of(st.integers(0, 12), INTS), label="index")
            return envelope
    if op == "structref":
        # A struct value sent once is referred back to by a bare index: turn an element
        # (a [data, field] pair in an item's dict) into an index, in range or not.
        elements = [
            (c, k)
            for c, k in locations
            if isinstance(c, dict) and isinstance(c[k], list) and len(c[k]) == 2
        ]
        if elements:
            container, key = elements[data.draw(st.integers(0, len(elements) - 1), label="elem")]
            container[key] = data.draw(st.one_of(st.integers(0, 12), INTS), label="index")
            return envelope
    container, key = locations[data.draw(st.integers(0, len(locations) - 1), label="where")]
    if op == "tweak" and type(container[key]) is int:
        value = container[key]
        delta = data.draw(st.sampled_from([1, -1, 2, -2, 64, value, -2 * value]), label="delta")
        container[key] = min(max(value + delta, -(2**63)), 2**64 - 1)
    elif op == "delete":
        del container[key]
    elif op == "insert" and isinstance(container, list):
        container.insert(key, data.draw(VALUES, label="inserted"))
    elif op == "insert":
        container[data.draw(st.one_of(st.text(max_size=6), INTS), label="key")] = data.draw(
            VALUES, label="value"
        )
    elif op == "duplicate" and isinstance(container, list):
        container.insert(key, container[key])
    elif op == "swap" and isinstance(container, list):
        other = data.draw(st.integers(0, len(container) - 1), label="other")
        container[key], container[other] = container[other], container[key]
    elif op == "deep":
        container[key] = _deep_value(data)
    elif op == "long":
        count = data.draw(st.sampled_from([100, 1_000, 5_000]), label="count")
        container[key] = [data.draw(st.sampled_from([0, 1, None, []]), label="item")] * count
    else:
        container[key] = data.draw(VALUES, label="value")
    return envelope


# -- the tests --------------------------------------------------------------------------------


def _pick(data: st.DataObject) -> Sample:
    return samples()[data.draw(st.sampled_from(NAMES), label="sample")]


def _options(data: st.DataObject) -> dict[str, Any]:
    return {
        "copy": data.draw(st.booleans(), label="copy"),
        "limits": data.draw(st.sampled_from(LIMITS), label="limits"),
    }


@_timeout("frames")
@settings(_settings("frames"))
@given(st.data())
def test_fuzz_frames(data: st.DataObject) -> None:
    sample = _pick(data)
    frames: list[Any] = list(sample.frames)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        frames = _mutate_frames(data, frames)
    options = _options(data)
    judge(lambda: mm.decode(frames, sample.tp, **options), sample, size=input_size(frames))


@_timeout("structure")
@settings(_settings("structure"))
@given(st.data())
def test_fuzz_structure(data: st.DataObject) -> None:
    sample = _pick(data)
    envelope: Any = msgspec.msgpack.decode(sample.frames[0])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if not isinstance(envelope, list) or not envelope:
            break
        envelope = _mutate_tree(data, envelope, len(sample.frames))
    frames = [msgspec.msgpack.encode(envelope), *sample.frames[1:]]
    options = _options(data)
    judge(lambda: mm.decode(frames, sample.tp, **options), sample, size=input_size(frames))


_TABLE_FIELDS = struct.Struct("<4sIQ")


@_timeout("buffer")
@settings(_settings("buffer"))
@given(st.data())
def test_fuzz_buffer(data: st.DataObject) -> None:
    sample = _pick(data)
    buffer = sample.buffer
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if data.draw(st.booleans(), label="table") and len(buffer) >= 64:
            # One u32/u64 field of the prefix or the frame table (offsets and lengths).
            slot = data.draw(st.integers(0, 8), label="slot")
            width, at = (4, 4) if slot == 0 else (8, 8 * slot)
            size = len(buffer)
            value = data.draw(
                st.one_of(
                    st.sampled_from([0, 1, 63, 64, size - 1, size, size + 1, 4096, 4097]),
                    st.integers(0, 2 ** (8 * width) - 1),
                ),
                label="value",
            )
            buffer = buffer[:at] + value.to_bytes(width, "little") + buffer[at + width :]
        else:
            buffer = _edit(data, buffer)
    kind = data.draw(st.sampled_from(["bytes", "bytearray", "memoryview", "numpy"]), label="as")
    given_buffer: Any = buffer
    if kind == "bytearray":
        given_buffer = bytearray(buffer)
    elif kind == "memoryview":
        given_buffer = memoryview(buffer)
    elif kind == "numpy":
        given_buffer = np.frombuffer(buffer, np.uint8)
    options = _options(data)
    judge(
        lambda: mm.decode_bytes(given_buffer, sample.tp, **options),
        sample,
        size=input_size(given_buffer),
    )


@_timeout("payload")
@settings(_settings("payload"))
@given(st.data())
def test_fuzz_payload(data: st.DataObject) -> None:
    sample = _pick(data)
    frames = list(sample.frames)
    touched: set[int] = set()
    for _ in range(data.draw(st.integers(1, 8), label="mutations")):
        index = data.draw(st.integers(1, len(frames) - 1), label="frame")
        frame = bytearray(frames[index])
        at = data.draw(st.integers(0, len(frame) - 1), label="at")
        chunk = data.draw(st.binary(min_size=1, max_size=8), label="chunk")[: len(frame) - at]
        frame[at : at + len(chunk)] = chunk
        frames[index] = bytes(frame)
        touched.add(index)
    copy = data.draw(st.booleans(), label="copy")
    judge(
        lambda: mm.decode(frames, sample.tp, copy=copy),
        sample,
        payload_only=True,
        bools=bool(touched & sample.bool_frames),
        size=input_size(frames),
    )


# -- generic, coordinate-free mutations ----------------------------------------------------------


def _generic(data: st.DataObject, blob: bytes, other: bytes) -> bytes:
    """One mutation that knows nothing of the format: no offsets into a structure."""
    size = len(blob)
    kind = data.draw(
        st.sampled_from(["replace", "repeat", "duplicate", "swap", "reverse", "splice"]),
        label="generic",
    )
    if kind == "replace" and size:
        # Every occurrence of a pattern taken from the blob itself, replaced.
        at = data.draw(st.integers(0, size - 1), label="at")
        pattern = blob[at : at + data.draw(st.integers(1, 3), label="width")]
        with_ = data.draw(st.one_of(st.binary(max_size=4), st.sampled_from(MARKERS)), label="by")
        return blob.replace(pattern, with_)
    a, b = sorted(data.draw(st.lists(st.integers(0, size), min_size=2, max_size=2), label="ab"))
    if kind == "repeat":
        times = data.draw(st.sampled_from([2, 3, 16, 1000]), label="times")
        times = min(times, max(1, MAX_REPEATED_BYTES // max(1, b - a)))
        return blob[:a] + blob[a:b] * times + blob[b:]
    if kind == "duplicate":
        to = data.draw(st.integers(0, size), label="to")
        return blob[:to] + blob[a:b] + blob[to:]
    if kind == "swap":
        c = data.draw(st.integers(b, size), label="c")
        return blob[:a] + blob[b:c] + blob[a:b] + blob[c:]
    if kind == "reverse":
        return blob[:a] + blob[a:b][::-1] + blob[b:]
    # splice: this blob's head, another sample's tail
    cut = data.draw(st.integers(0, len(other)), label="cut")
    return blob[:a] + other[cut:]


@settings(max_examples=200, deadline=None, database=None)
@given(st.data(), st.sampled_from([0, 364, 3_360, 3 << 20]))
def test_generic_mutations_grow_a_frame_by_a_bounded_amount(data: st.DataObject, size: int) -> None:
    blob, other = bytes(range(256)) * (size // 256) + bytes(size % 256), b"\x91\xc0" * 100
    out = _generic(data, blob, other)
    assert len(out) <= len(blob) + len(other) + MAX_REPEATED_BYTES


@_timeout("generic")
@settings(_settings("generic"))
@given(st.data())
def test_fuzz_generic(data: st.DataObject) -> None:
    sample, other = _pick(data), _pick(data)
    frames: list[Any] = list(sample.frames)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        index = _frame_index(data, frames)
        frames[index] = _generic(data, frames[index], other.frames[0])
    options = _options(data)
    judge(lambda: mm.decode(frames, sample.tp, **options), sample, size=input_size(frames))


# -- amplification by padding ------------------------------------------------------------------

COUNTS = [2, 1_000, 1_024, 1_025, 4_000, 20_000]


def _padding(data: st.DataObject, count: int) -> bytes:
    return bytes(data.draw(st.integers(0, 255), label="byte")) * data.draw(
        st.sampled_from([0, count // 2, count, count + 64]), label="padding"
    )


@_timeout("padding")
@settings(_settings("padding"))
@given(st.data())
def test_fuzz_padding(data: st.DataObject) -> None:
    """A header that declares many tensors and pads itself to afford them: it is rejected,
    or decodes building only what its body uses, within the per-byte allocation bound."""
    sample = _pick(data)
    envelope: Any = msgspec.msgpack.decode(sample.frames[0])
    count = data.draw(st.sampled_from(COUNTS), label="count")
    shape = data.draw(st.sampled_from([[0], [0] * 16, [3, 0], [], [1]]), label="shape")
    nbytes = 4 * count if 0 not in shape else 0  # float32
    if shape == [] or nbytes:
        payload: Any = bytes(nbytes) if nbytes < (1 << 16) else b""
    else:
        payload = b""
    run = ["float32", shape, payload, 0, count]
    runs = envelope[HEAD_TENSORS]
    runs.insert(data.draw(st.integers(0, len(runs)), label="where"), run)
    if envelope[HEAD_REFS] and data.draw(st.booleans(), label="refs cover it"):
        total = sum(r[RUN_COUNT] if len(r) > RUN_COUNT else 1 for r in runs)
        envelope[HEAD_REFS] = envelope[HEAD_REFS] + list(range(total - count, total))
    pad = _padding(data, count)
    where = data.draw(
        st.sampled_from(["envelope", "run", "key", "unknown field", "none"]), label="pad at"
    )
    if where == "envelope":
        envelope.append(pad)
    elif where == "run":
        run.append(pad)
    elif where == "key" and isinstance(envelope[HEAD_BODY], dict):
        envelope[HEAD_BODY][pad.decode("latin-1")] = envelope[HEAD_BODY].pop(
            next(iter(envelope[HEAD_BODY]), ""), []
        )
    elif where == "unknown field":
        structs = [
            (c, k)
            for c, k in _locations(envelope[HEAD_BODY:])
            if isinstance(c[k], list) and len(c[k]) == 2 and isinstance(c, dict)
        ]
        if structs:
            container, key = structs[data.draw(st.integers(0, len(structs) - 1), label="s")]
            container[key] = [*container[key], pad]
    frames = [msgspec.msgpack.encode(envelope), *sample.frames[1:]]
    options = _options(data)
    judge(lambda: mm.decode(frames, sample.tp, **options), sample, size=input_size(frames))


# -- per-limit probes ------------------------------------------------------------------------------


def _value_measuring(name: str, quantity: int) -> mm.MultiModalKwargsItems:
    """A value whose encoding measures ``quantity`` for limit ``name`` (frames, depth ...)."""
    if name == "max_frames":  # frame 0 and one frame per separately stored tensor
        data: Any = [torch.full((256,), float(i)) for i in range(quantity - 1)]
    elif name == "max_depth":
        data = torch.zeros(1)
        for _ in range(quantity):
            data = [data]
    elif name in ("max_elements", "max_tensors"):
        data = [torch.zeros(1) for _ in range(quantity)]  # a list and that many tensors
    elif name == "max_ndim":
        data = torch.zeros([1] * quantity)
    else:  # the byte limits: measured on a value, see test_fuzz_limits
        data = torch.zeros(quantity)
    elem = mm.MultiModalFieldElem(data, mm.BatchedField())
    return mm.MultiModalKwargsItems({"image": [mm.MultiModalKwargsItem({"x": elem})]})


LIMIT_FIELDS = [f.name for f in dataclasses.fields(mm.Limits) if f.name != "max_reduce_ratio"]
"""The limits a decode applies (max_reduce_ratio bounds get_data; tests/domain tests it)."""


@_timeout("limits")
@settings(_settings("limits"))
@given(st.data())
def test_fuzz_limits(data: st.DataObject) -> None:
    """Each limit at a bound, and a message just under, at and just over it: the decoder
    takes it exactly when within the bound, and the encoder (given the same limits)
    refuses exactly what the decoder would."""
    name = data.draw(st.sampled_from(LIMIT_FIELDS), label="limit")
    offset = data.draw(st.sampled_from([-1, 0, 1]), label="offset")
    if name in ("max_total_bytes", "max_header_bytes"):
        value = _value_measuring(name, data.draw(st.integers(0, 600), label="numel"))
        frames = mm.encode(value)
        measure = frames[0].nbytes if name == "max_header_bytes" else input_size(frames)
        bound = measure - offset
    else:
        bound = data.draw(st.integers(2, 40), label="bound")
        value = _value_measuring(name, bound + offset)
    limits = mm.Limits(**{name: bound})
    within = offset <= 0
    try:
        sent = mm._CODEC.encode(value, limits=limits)
    except mm.EncodeError as error:
        assert not within, f"{name}={bound}: the encoder refused {offset:+}: {error}"
        assert str(bound) in error.message, error  # it names the limit it applied
        generous = dataclasses.replace(mm.DEFAULT_LIMITS, **{name: 1 << 40})
        sent = mm._CODEC.encode(value, limits=generous)  # what a careless sender would send
    else:
        assert within, f"{name}={bound}: the encoder sent {offset:+}"
    try:
        decoded = measured(
            lambda: mm.decode(sent, mm.MultiModalKwargsItems, limits=limits), input_size(sent)
        )()
    except mm.DecodeError as error:
        assert not within, f"{name}={bound}: the decoder refused {offset:+}: {error}"
        assert not error.message.startswith("rejected"), error
        _event("rejected")
    else:
        assert within, f"{name}={bound}: the decoder took {offset:+}"
        _event("decoded")
        check_value(decoded, mm.MultiModalKwargsItems)
        assert same(decoded, value)


@pytest.fixture(autouse=True)
def _bounded_memory() -> Iterator[None]:
    """Peak RSS may grow by at most RSS_GROWTH_LIMIT over one whole fuzz test."""
    before = _max_rss()
    yield
    assert _max_rss() - before < RSS_GROWTH_LIMIT


def test_the_samples_are_valid_and_cover_the_shapes_of_the_schema() -> None:
    seen_frames = set()
    for sample in samples().values():
        judge(lambda s=sample: mm.decode(list(s.frames), s.tp), sample)  # type: ignore[misc]
        assert same(mm.decode_bytes(sample.buffer, sample.tp), sample.value)
        seen_frames.add(len(sample.frames))
    assert min(seen_frames) >= 2  # every sample has payload frames to attack
    assert any(sample.bool_frames for sample in samples().values())


def test_the_oracle_catches_a_wrong_value() -> None:
    # A decoder that returned a slice where a field variant belongs would be caught.
    sample = samples()["nested_item"]
    wrong = mm.decode(list(sample.frames), sample.tp)
    wrong["cached"].field = slice(1)
    with pytest.raises(AssertionError, match=r"\$\['cached'\]\.field: expected a BatchedField"):
        judge(lambda: wrong, sample)
    with pytest.raises(AssertionError, match=r"\$: expected a MultiModalKwargsItem, got dict"):
        judge(lambda: {}, sample)
    # A payload change must not change the structure, nor be rejected (bool bytes aside).
    items, other = samples()["kwargs_items"], samples()["runs_and_dtypes"]
    with pytest.raises(AssertionError):
        judge(lambda: mm.decode(list(other.frames), other.tp), items, payload_only=True)
    with pytest.raises(AssertionError):
        judge(lambda: mm.decode([b"x"], items.tp), items, payload_only=True, bools=True)
    # The catch-all message means a check is missing.
    with pytest.raises(AssertionError, match="rejected"):
        judge(_raise(mm.DecodeError("rejected (KeyError: 1)")), items)


def _raise(error: Exception) -> Callable[[], Any]:
    def fail() -> Any:
        raise error

    return fail
