"""``mmcodec compat`` on generated schema pairs: a field inserted anywhere but at the end of
a struct is breaking, appending one with a default is not (a property over struct lengths,
field kinds and positions, where the hand-written cases in test_compat.py pick a few)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mmcodec.codegen.cli import main

TYPES = {"int": "3", "str": "x", "float": "1.5", "bool": "true"}
"""Field types, each with a default value of its own."""


def _field(name: str, kind: str, default: bool) -> str:
    extra = f", default: {TYPES[kind]}" if default else ""
    return f"      {name}: {{type: {kind}{extra}}}"


def _schema(fields: list[str]) -> str:
    lines = "\n".join(fields)
    # Another struct after the one that changes: nothing in it changes.
    return (
        f"schema: props\nversion: 1\ntypes:\n  S:\n    struct:\n{lines}\n"
        "  Other:\n    struct:\n      id: {type: int}\n"
    )


def _compat(old: str, new: str) -> tuple[int, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "old.yaml").write_text(old, encoding="utf-8")
        (root / "new.yaml").write_text(new, encoding="utf-8")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["--root", tmp, "compat", "--format", "json", "old.yaml", "new.yaml"])
    return code, json.loads(out.getvalue())


@st.composite
def insertions(draw: st.DrawFn) -> tuple[list[tuple[str, bool]], int, tuple[str, bool]]:
    """A struct's fields as (type, has a default), the required ones first (the schema's
    rule); a position from 0 to its length; the inserted field, valid at that position."""
    length = draw(st.integers(1, 6))
    required = draw(st.integers(0, length))
    kinds = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=length, max_size=length))
    fields = [(kind, index >= required) for index, kind in enumerate(kinds)]
    position = draw(st.integers(0, length))
    inserted = (draw(st.sampled_from(sorted(TYPES))), draw(st.booleans()))
    # No required field after one with a default: otherwise the new schema is invalid.
    assume(position >= required if inserted[1] else position <= required)
    return fields, position, inserted


@settings(max_examples=80, deadline=None)
@given(insertions())
def test_an_insertion_is_breaking_everywhere_but_at_the_end(
    case: tuple[list[tuple[str, bool]], int, tuple[str, bool]],
) -> None:
    fields, position, (kind, default) = case
    old = [_field(f"f{index}", k, d) for index, (k, d) in enumerate(fields)]
    new = [*old[:position], _field("added", kind, default), *old[position:]]
    code, report = _compat(_schema(old), _schema(new))
    breaking = [(row["subject"], row["line"], row["message"]) for row in report["breaking"]]
    assert report["errors"] == [] and report["notes"] == []
    line = 6 + position  # where the new schema has the inserted field
    if position < len(fields):
        message = f"field `added` inserted at position {position}; only appending is compatible"
        assert (code, breaking) == (1, [("S", line, message)])
    elif default:
        assert (code, breaking) == (0, [])
    else:
        message = f"field `added` appended at position {position} without a default"
        assert (code, breaking) == (1, [("S", line, f"{message} (older messages lack it)")])


def test_an_insertion_among_fields_with_defaults_is_breaking_at_every_position() -> None:
    # The audit's case, every length and position: every field optional, the new one too,
    # so nothing but the position can make it breaking (an older codec would read it as
    # the field that was there before). All 27 cases, not a sample.
    for length in range(1, 7):
        old = [_field(f"f{index}", "int", True) for index in range(length)]
        for position in range(length + 1):
            new = [*old[:position], _field("added", "str", True), *old[position:]]
            code, report = _compat(_schema(old), _schema(new))
            expected = (
                [f"field `added` inserted at position {position}; only appending is compatible"]
                if position < length
                else []
            )
            got = (code, [row["message"] for row in report["breaking"]])
            assert got == (int(bool(expected)), expected), (length, position)
