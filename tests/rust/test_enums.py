"""Enums between Rust and Python: ``tests/schemas/enums.yaml`` compiled to both
(``tests/golden/enums.py``, ``tests/golden_rust/enums.rs``).

* Rust builds every enum case of ``tests/codegen/test_enums.py`` from its generated
  types: the bytes Python encodes, and Python decodes them to its own value, members of
  their classes. (Python encodes and Rust decodes and re-encodes them byte for byte in
  ``test_conformance.py``.)
* A field an older sender left off comes back as the schema's default member on both
  sides.
* Whatever a sender puts where an enum goes (an unknown member, a value of the wrong
  kind, a refused mapping key, a union's enum variant), Rust accepts exactly what Python
  accepts, and where both refuse, names the same value with the same message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.golden.enums as e
from mmcodec.runtime import framing
from mmcodec.runtime.equality import values_equal
from mmcodec.runtime.limits import DEFAULT_LIMITS
from tests.codegen.test_enums import CASES, DECODE_ERRORS, _item
from tests.rust.cargo import run

_LIMITS = " ".join(
    str(getattr(DEFAULT_LIMITS, name))
    for name in (
        "max_frames",
        "max_total_bytes",
        "max_header_bytes",
        "max_depth",
        "max_elements",
        "max_tensors",
        "max_ndim",
    )
)
_TYPE_NAMES = {id(tp): name for name, tp in e.NAMED_TYPES.items()}


def test_rust_builds_every_enum_case_as_python_does(tmp_path: Path) -> None:
    run("enums", tmp_path)
    assert sorted(p.stem for p in tmp_path.iterdir()) == sorted(c[0] for c in CASES)
    for case, tp, value in CASES:
        built = (tmp_path / f"{case}.mmcb").read_bytes()
        explicit = tp if tp is e.Setting else None
        assert built == bytes(e.encode_bytes(value, type=explicit)), case
        back = e.decode_bytes(built, tp)
        assert values_equal(back, value), case
        assert type(back) is type(value), case  # a member of its class; 10 stays an int


# -- what the receivers accept ----------------------------------------------------------


def _header(value: Any, tp: Any = None) -> list[Any]:
    """A message's header, as Python would decode it untyped (to tamper with)."""
    header: list[Any] = msgspec.msgpack.decode(e.encode(value, type=tp)[0])
    return header


def _message(header: list[Any], body: Any) -> bytes:
    """The message of ``header`` with ``body`` in place of its body, as one frame."""
    return msgspec.msgpack.encode([*header[:-1], body])


def _python(frame: bytes, tp: Any) -> dict[str, Any]:
    """Python's outcome, in the conformance tool's words."""
    try:
        e.decode([frame], tp)
    except e.DecodeError as error:
        return {"error": {"path": error.path, "message": error.message}}
    return {"ok": True}


def _rust(folder: Path, cases: list[tuple[bytes, Any]]) -> list[dict[str, Any]]:
    """Rust's outcome of each (frame, type), the cases decoded by one process."""
    folder.mkdir(exist_ok=True)
    lines = []
    for index, (frame, tp) in enumerate(cases):
        (folder / f"case{index}").write_bytes(bytes(framing.join([memoryview(frame)])))
        lines.append(f"case{index} frames enums.{_TYPE_NAMES[id(tp)]} {_LIMITS}\n")
    (folder / "manifest.txt").write_text("".join(lines))
    results = [json.loads(line) for line in run("replay", folder / "manifest.txt").splitlines()]
    assert [r["case"] for r in results] == [f"case{i}" for i in range(len(cases))]
    return [r["result"] for r in results]


def _differs_by_design(python: dict[str, Any], rust: dict[str, Any]) -> bool:
    """An int variant beyond int64 (Python's ints reach uint64, Rust's i64 does not), or
    an error Python could not place in the schema (it then gives the wire path, as for an
    unknown tag of a union at the root) that Rust places, with the same message."""
    message: str | None = rust.get("error", {}).get("message")
    if "ok" in python:
        return message == f"Expected `int` <= {2**63 - 1}"
    wire_path: str = python["error"]["path"]
    return wire_path.endswith("(wire path)") and python["error"]["message"] == message


def assert_same_outcomes(folder: Path, cases: list[tuple[bytes, Any]]) -> None:
    python = [_python(frame, tp) for frame, tp in cases]
    rust = _rust(folder, cases)
    wrong = [
        (msgspec.msgpack.decode(frame)[-1], p, r)
        for (frame, _), p, r in zip(cases, python, rust, strict=True)
        if p != r and not _differs_by_design(p, r)
    ]
    assert not wrong, wrong[:5]


ITEM = _header(_item())
SETTING = _header(e.Level.LOW, e.Setting)
ROOT = _header(e.Level.LOW)
NAMES = _header(e.LevelNames({e.Level.LOW: "low"}))


def _with_field(index: int, value: Any) -> bytes:
    body = list(ITEM[-1])
    body[index] = value
    return _message(ITEM, body)


EXPLICIT: list[tuple[bytes, Any]] = [
    *[(_with_field(index, value), e.Item) for index, value, _ in DECODE_ERRORS],
    (_with_field(2, {1: 2}), e.Item),  # an int where a str key goes
    (_with_field(2, {"audio": "x"}), e.Item),  # a good key, a bad value
    (_with_field(7, "HIGH"), e.Item),  # an optional enum of the wrong kind
    (_message(ROOT, 5), e.Level),
    (_message(ROOT, 10), e.Level),
    (_message(SETTING, [2, "sound"]), e.Setting),
    (_message(SETTING, [0, "image"]), e.Setting),
    (_message(SETTING, [2, "video"]), e.Setting),
    (_message(SETTING, [0, -1]), e.Setting),
    (_message(SETTING, [3, 1]), e.Setting),
    (_message(NAMES, {"0": "x"}), e.LevelNames),
    (_message(NAMES, {10: "x", 11: "y"}), e.LevelNames),
    (_message(NAMES, {10: 1}), e.LevelNames),
    (_message(NAMES, {None: "x"}), e.LevelNames),
    (_message(NAMES, {True: "x"}), e.LevelNames),
    (_message(NAMES, {1e16: "x"}), e.LevelNames),
    (_message(NAMES, {-0.00001: "x"}), e.LevelNames),
    (_message(NAMES, {b"it's\x00": "x"}), e.LevelNames),
]


def test_rust_refuses_what_python_refuses_with_the_same_path_and_message(tmp_path: Path) -> None:
    python = [_python(frame, tp) for frame, tp in EXPLICIT]
    assert sum("error" in p for p in python) == len(DECODE_ERRORS) + 15
    # Python's messages of test_enums.py, which Rust must repeat.
    for (_, _, message), outcome in zip(DECODE_ERRORS, python, strict=False):
        path, _, text = message.partition(": ")
        assert outcome == {"error": {"path": path, "message": text}}
    assert_same_outcomes(tmp_path, EXPLICIT)


# Wire values where an enum goes: ints of every width, strings (of characters whose
# repr the two sides write alike: not format, private-use or unassigned ones, see
# docs/rust.md, "Differences"), and values of other kinds.
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cf", "Co", "Cn")), max_size=8)
_INT = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_MEMBER_LIKE = st.sampled_from(["image", "audio", "video", "px", "pt", 0, 10, -1, 1, 2])
WIRE = (
    _MEMBER_LIKE
    | _INT
    | _TEXT
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.binary(max_size=4)
    | st.lists(_INT, max_size=2)
)
_KEY = (
    _MEMBER_LIKE
    | _INT
    | _TEXT
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.binary(max_size=4)
)
"""Mapping keys: any value a Python dict can have as a key (a refused one is named by its
``repr``: ``$['music'] (key)``, ``$[1.5] (key)``, ``$[b'x'] (key)``)."""

_FIELD_CASE = st.one_of(
    st.tuples(st.sampled_from([0, 5, 6, 7, 8]), WIRE).map(lambda c: _with_field(*c)),
    st.lists(WIRE, max_size=3).map(lambda items: _with_field(1, items)),
    st.dictionaries(_KEY, st.integers(-9, 9) | WIRE, max_size=3).map(lambda d: _with_field(2, d)),
    st.tuples(WIRE, WIRE).map(lambda pair: _with_field(3, list(pair))),
    st.lists(WIRE, max_size=3).map(lambda items: _with_field(4, items)),
).map(lambda frame: (frame, e.Item))
_SETTING_CASE = st.tuples(st.sampled_from([0, 1, 2, 3, -1, "x"]), WIRE).map(
    lambda c: (_message(SETTING, list(c)), e.Setting)
)
_ROOT_CASE = WIRE.map(lambda v: (_message(ROOT, v), e.Level)) | st.dictionaries(
    _KEY, _TEXT | WIRE, max_size=3
).map(lambda d: (_message(NAMES, d), e.LevelNames))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_FIELD_CASE | _SETTING_CASE | _ROOT_CASE, min_size=20, max_size=60))
def test_hostile_enum_values_meet_the_same_fate_on_both_sides(
    tmp_path_factory: pytest.TempPathFactory, cases: list[tuple[bytes, Any]]
) -> None:
    assert_same_outcomes(tmp_path_factory.mktemp("enums"), cases)
