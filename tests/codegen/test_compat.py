"""``mmcodec compat``: wire-compatibility of a schema with its previous version.

Struct fields travel by position, so changes are reported as the user made them (inserted,
removed, moved, swapped; renamed is a note), each at file:line:col of the new schema.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmcodec.codegen import ir
from mmcodec.codegen.cli import main
from mmcodec.codegen.compat import Change, compare_schemas
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.render import render_module
from mmcodec.codegen.validate import compile_schemas

ROOT = Path(__file__).resolve().parents[2]
EVOLUTION = ROOT / "tests" / "evolution"
MMCODEC = Path(sys.executable).parent / "mmcodec"  # the console script of this environment

BASE = """\
schema: shop
version: {major}
types:
  Item:
    struct:
      name: {{type: str}}
      price: {{type: float, ge: 0}}
{extra_fields}
  Payment:
    union:
      - {{tag: 0, type: Cash}}
      - {{tag: 1, type: Card}}
      - {{tag: 2, type: Voucher}}
{extra_variants}
  Cash:
    struct:
      amount: {{type: float}}
  Card:
    struct:
      number: {{type: str}}
  Voucher:
    struct:
      code: {{type: str}}
{extra_types}"""


def write(
    path: Path,
    major: int = 1,
    extra_fields: str = "",
    extra_variants: str = "",
    extra_types: str = "",
) -> Path:
    text = BASE.format(
        major=major,
        extra_fields=extra_fields,
        extra_variants=extra_variants,
        extra_types=extra_types,
    )
    path.write_text(text)
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["--root", "/", "compat", *args])
    return code, capsys.readouterr().out


def test_appending_fields_with_defaults_is_compatible(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, str(EVOLUTION / "v1.yaml"), str(EVOLUTION / "v2.yaml"))
    assert (code, out) == (0, "ok: 1 schema(s) compatible with the older version\n")


def test_removing_fields_is_breaking(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, str(EVOLUTION / "v2.yaml"), str(EVOLUTION / "v1.yaml"))
    shown = (EVOLUTION / "v1.yaml").relative_to("/")
    reuse = "a field appended later would be read as it by older codecs"
    assert (code, out.splitlines()) == (
        1,
        [
            f"{shown}:8:3: Record: field `note` removed from position 3; {reuse}",
            f"{shown}:8:3: Record: field `weights` removed from position 4; {reuse}",
            f"{shown}:15:3: Batch: field `source` removed from position 2; {reuse}",
            "3 breaking change(s): they need a new major version (the schema's `version`)",
        ],
    )


GIFT = "  Gift:\n    struct:\n      sender: {type: str}\n"


@pytest.mark.parametrize(
    ("extra_fields", "extra_variants", "old_types", "new_types", "expected"),
    [
        (
            "      note: {type: str}",
            "",
            "",
            "",
            ":8:7: Item: field `note` appended at position 2 without a default "
            "(older messages lack it)",
        ),
        # a new struct as a new variant with a new tag: compatible
        ("", "      - {tag: 3, type: Gift}", "", GIFT, None),
        # an existing struct that becomes a variant gains a tag: its wire form changes
        (
            "",
            "      - {tag: 3, type: Gift}",
            GIFT,
            GIFT,
            ":24:3: Gift: became a union variant (tag 3), which changes its own wire form; "
            "add a new struct as the new variant instead",
        ),
    ],
)
def test_appended_members(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra_fields: str,
    extra_variants: str,
    old_types: str,
    new_types: str,
    expected: str | None,
) -> None:
    old = write(tmp_path / "old.yaml", extra_types=old_types)
    new = write(
        tmp_path / "new.yaml",
        extra_fields=extra_fields,
        extra_variants=extra_variants,
        extra_types=new_types,
    )
    code, out = run(capsys, str(old), str(new))
    if expected is None:
        assert code == 0, out
    else:
        assert code == 1
        assert out.splitlines()[0] == f"{new.relative_to('/')}{expected}"


def test_changed_types_constraints_and_variants_are_breaking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml")
    new = tmp_path / "new.yaml"
    new.write_text(
        old.read_text()
        .replace("price: {type: float, ge: 0}", "price: {type: float, ge: 1}")
        .replace("name: {type: str}", "name: {type: bytes}")
        .replace("      - {tag: 1, type: Card}\n", "")
        .replace("      - {tag: 2, type: Voucher}", "      - {tag: 2, type: Card}")
    )
    code, out = run(capsys, str(old), str(new))
    shown = str(new.relative_to("/"))
    assert (code, out.splitlines()) == (
        1,
        [
            f"{shown}:6:7: Item: field `name` type changed from str to bytes",
            f"{shown}:7:7: Item: field `price` constraints changed from {{'ge': 0}} to "
            "{'ge': 1} (old messages may not satisfy them)",
            f"{shown}:9:3: Payment: variant with tag 1 (Card) removed",
            f"{shown}:12:9: Payment: variant with tag 2 changed from Voucher to Card",
            f"{shown}:17:3: Card: tag changed from 1 to 2",
            f"{shown}:20:3: Voucher: is no longer a union variant (it had tag 2), which changes "
            "its own wire form",
            "6 breaking change(s): they need a new major version (the schema's `version`)",
        ],
    )


def test_a_new_major_version_may_break_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml")
    new = tmp_path / "new.yaml"
    new.write_text(
        old.read_text()
        .replace("version: 1", "version: 2")
        .replace("name: {type: str}", "name: {type: bytes}")
        .replace("price: {type: float, ge: 0}", "cost: {type: float, ge: 0}")
    )
    code, out = run(capsys, str(old), str(new))
    shown = str(new.relative_to("/"))
    # Allowed (exit 0), and the report says that the major changed and what it broke.
    assert (code, out.splitlines()) == (
        0,
        [
            f"{shown}:2:10: note: schema 'shop': major version 1 -> 2; old and new codecs "
            "reject each other's messages; 1 breaking change below",
            f"{shown}:7:7: note: Item: field `price` renamed to `cost` (compatible: names do not "
            "travel; the Python API and bound classes see the new name) [major version 1 -> 2]",
            f"{shown}:6:7: Item: field `name` type changed from str to bytes "
            "[major version 1 -> 2]",
            "ok: 1 schema(s) with a new major version",
        ],
    )
    assert main(["--root", "/", "compat", "--format", "json", str(old), str(new)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["breaking"] == [] and report["notes"] == []
    (major,) = report["majors"]
    assert {k: major[k] for k in ("file", "line", "column", "schema", "old", "new")} == {
        "file": shown,
        "line": 2,
        "column": 10,
        "schema": "shop",
        "old": 1,
        "new": 2,
    }
    assert [c["message"] for c in major["breaking"]] == [
        "field `name` type changed from str to bytes"
    ]
    assert [c["subject"] for c in major["notes"]] == ["Item"]


def test_a_major_version_raised_without_need_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml")
    new = write(tmp_path / "new.yaml", major=4)
    code, out = run(capsys, str(old), str(new))
    assert (code, out.splitlines()[0]) == (
        0,
        f"{new.relative_to('/')}:2:10: note: schema 'shop': major version 1 -> 4; old and new "
        "codecs reject each other's messages; nothing in it breaks the old version (a new "
        "major version was not needed)",
    )


def test_a_lowered_major_version_is_breaking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml", major=2)
    new = write(tmp_path / "new.yaml", major=1)
    code, out = run(capsys, str(old), str(new))
    assert (code, out.splitlines()[0]) == (
        1,
        f"{new.relative_to('/')}:2:10: schema 'shop': major version lowered from 2 to 1; a "
        "major version only goes up (codecs of an earlier version 1 would misread these "
        "messages)",
    )


ENUM = "  Mode:\n    enum:\n{members}\n"
MEMBERS = "      FAST: 0\n      SAFE: 1"


@pytest.mark.parametrize(
    ("members", "code", "expected"),
    [
        ("      FAST: 0\n      SAFE: 1\n      LAZY: 2", 0, []),  # a member with a new value
        ("      SAFE: 1\n      FAST: 0", 0, []),  # order does not travel
        (
            "      QUICK: 0\n      SAFE: 1",
            0,
            [
                "26:7: note: Mode: member `FAST` renamed to `QUICK` (compatible: its value 0 "
                "is what travels; the Python API sees the new name)"
            ],
        ),
        (
            "      FAST: 0\n      SAFE: 2",
            1,
            ["27:7: Mode: member `SAFE` value changed from 1 to 2; the value is what travels"],
        ),
        (
            "      FAST: 0",
            1,
            ["24:3: Mode: member `SAFE` (1) removed; messages holding it can no longer be read"],
        ),
        (
            "      FAST: fast\n      SAFE: safe",
            1,
            ["24:3: Mode: values changed from ints to strings"],
        ),
    ],
    ids=["added", "reordered", "renamed", "renumbered", "removed", "kind"],
)
def test_enum_members_travel_by_value(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    members: str,
    code: int,
    expected: list[str],
) -> None:
    old = write(tmp_path / "old.yaml", extra_types=ENUM.format(members=MEMBERS))
    new = write(tmp_path / "new.yaml", extra_types=ENUM.format(members=members))
    found, out = run(capsys, str(old), str(new))
    shown = str(new.relative_to("/"))
    lines = out.splitlines()
    assert found == code, out
    assert lines[: len(expected)] == [f"{shown}:{line}" for line in expected]


# -- changes by position, in the user's terms (the examples) ----------------------

STOPS = """\
schema: transit
version: 1
types:
  S:
    struct:
{s}
  Stop:
    struct:
{stop}
"""
S = "      a: {type: int}\n      b: {type: str}"
STOP = "      id: {type: str}\n      name: {type: str}"


def compat_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], s: str = S, stop: str = STOP
) -> tuple[int, list[str]]:
    (tmp_path / "old.yaml").write_text(STOPS.format(s=S, stop=STOP))
    (tmp_path / "new.yaml").write_text(STOPS.format(s=s, stop=stop))
    code = main(["--root", str(tmp_path), "compat", "old.yaml", "new.yaml"])
    return code, capsys.readouterr().out.splitlines()


def test_swapped_fields_are_named_as_swapped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    swapped = "      b: {type: str}\n      a: {type: int}"
    assert compat_of(tmp_path, capsys, s=swapped) == (
        1,
        [
            "new.yaml:6:7: S: fields `a` and `b` swapped (positions 0 and 1); "
            "fields travel by position",
            "1 breaking change(s): they need a new major version (the schema's `version`)",
        ],
    )


def test_a_field_inserted_before_others_is_named_as_inserted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inserted = "      code: {type: int}\n" + STOP
    assert compat_of(tmp_path, capsys, stop=inserted) == (
        1,
        [
            "new.yaml:10:7: Stop: field `code` inserted at position 0; "
            "only appending is compatible",
            "1 breaking change(s): they need a new major version (the schema's `version`)",
        ],
    )


@pytest.mark.parametrize(
    ("new_fields", "expected"),
    [
        (
            "cab",
            "new.yaml:6:7: S: field `c` moved from position 2 to 0; fields travel by position",
        ),
        (
            "ac",
            "new.yaml:4:3: S: field `b` removed from position 1; fields travel by position, so "
            "the ones after it would be misread",
        ),
        (
            "cba",
            "new.yaml:6:7: S: fields `a` and `c` swapped (positions 0 and 2); fields "
            "travel by position",
        ),
    ],
)
def test_moved_and_removed_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], new_fields: str, expected: str
) -> None:
    def fields(names: str) -> str:
        return "\n".join(f"      {n}: {{type: int}}" for n in names)

    (tmp_path / "old.yaml").write_text(STOPS.format(s=fields("abc"), stop=STOP))
    (tmp_path / "new.yaml").write_text(STOPS.format(s=fields(new_fields), stop=STOP))
    assert main(["--root", str(tmp_path), "compat", "old.yaml", "new.yaml"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        expected,
        "1 breaking change(s): they need a new major version (the schema's `version`)",
    ]


def test_a_rename_in_place_is_a_note_not_a_break(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = "      id: {type: str}\n      title: {type: str}"
    assert compat_of(tmp_path, capsys, stop=renamed) == (
        0,
        [
            "new.yaml:11:7: note: Stop: field `name` renamed to `title` (compatible: names do "
            "not travel; the Python API and bound classes see the new name)",
            "ok: 1 schema(s) compatible with the older version",
        ],
    )


def test_a_type_change_points_at_the_field_in_the_new_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's FlatField.dim from int to str, on the project's own schema."""
    schema = (ROOT / "schema" / "multimodal.yaml").read_text()
    lines = schema.splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if line.strip().startswith("dim: {type: int"))
    indent = lines[number][: lines[number].index("dim")]
    lines[number] = f'{indent}dim: {{type: str, default: "0"}}\n'
    (tmp_path / "old.yaml").write_text(schema)
    (tmp_path / "new.yaml").write_text("".join(lines))
    column = lines[number].index("dim") + 1
    assert main(["--root", str(tmp_path), "compat", "old.yaml", "new.yaml"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"new.yaml:{number + 1}:{column}: FlatField: field `dim` type ")
    assert out[0].endswith("changed from int to str")


def test_removing_the_last_field_without_a_default_is_breaking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing after it moves, and it has no default, so older codecs reject its absence."""
    assert compat_of(tmp_path, capsys, s="      a: {type: int}") == (
        1,
        [
            "new.yaml:4:3: S: field `b` removed from position 1; older codecs require it",
            "1 breaking change(s): they need a new major version (the schema's `version`)",
        ],
    )


def test_an_insertion_does_not_hide_a_type_change_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = "      a: {type: int}\n      x: {type: int}\n      b: {type: bytes}"
    assert compat_of(tmp_path, capsys, s=changed) == (
        1,
        [
            "new.yaml:7:7: S: field `x` inserted at position 1; only appending is compatible",
            "new.yaml:8:7: S: field `b` type changed from str to bytes",
            "2 breaking change(s): they need a new major version (the schema's `version`)",
        ],
    )


EMPTY = "schema: transit\nversion: 1\ntypes:\n  S:\n    struct: {}\n"
FILLED = (
    "schema: transit\nversion: 1\ntypes:\n  S:\n    struct:\n"
    "      a: {type: int}\n      b: {type: str, default: x}\n"
)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            EMPTY,
            FILLED,
            [
                "new.yaml:6:7: S: field `a` appended at position 0 without a default (older "
                "messages lack it)",
                "1 breaking change(s): they need a new major version (the schema's `version`)",
            ],
        ),
        (
            FILLED,
            EMPTY,
            [
                "new.yaml:4:3: S: field `a` removed from position 0; older codecs require it",
                "new.yaml:4:3: S: field `b` removed from position 1; a field appended later "
                "would be read as it by older codecs",
                "2 breaking change(s): they need a new major version (the schema's `version`)",
            ],
        ),
    ],
    ids=["grows", "shrinks"],
)
def test_an_empty_struct_grows_and_shrinks_by_appending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, expected: list[str]
) -> None:
    """No field kept on either side: every new one is appended, none inserted."""
    (tmp_path / "old.yaml").write_text(old)
    (tmp_path / "new.yaml").write_text(new)
    assert main(["--root", str(tmp_path), "compat", "old.yaml", "new.yaml"]) == 1
    assert capsys.readouterr().out.splitlines() == expected


def _without_positions(module: ir.Module) -> ir.Module:
    """The module as IR built in Python would be: no declaration knows where it was written."""
    types = tuple(
        dataclasses.replace(
            t, position=None, fields=tuple(dataclasses.replace(f, position=None) for f in t.fields)
        )
        if isinstance(t, ir.StructDef)
        else dataclasses.replace(t, position=None)
        for t in module.types
    )
    return dataclasses.replace(module, types=types, version_position=None)


def test_ir_without_positions_points_at_the_start_of_the_new_schema(tmp_path: Path) -> None:
    """compare_schemas on IR made in Python (no positions): every change, struct-level or
    field-level, points at line 1 of the new module's source; a note's ``breaking`` is False."""
    old = (
        "schema: transit\nversion: 1\ntypes:\n"
        "  Renamed: {struct: {a: {type: int}}}\n"
        "  Inserted: {struct: {a: {type: int}}}\n"
        "  Swapped: {struct: {a: {type: int}, b: {type: str}}}\n"
        "  Retyped: {struct: {a: {type: int}}}\n"
        "  Shrunk: {struct: {a: {type: int}, b: {type: int}}}\n"
    )
    new = (
        "schema: transit\nversion: 1\ntypes:\n"
        "  Renamed: {struct: {z: {type: int}}}\n"
        "  Inserted: {struct: {x: {type: int}, a: {type: int}, y: {type: int}}}\n"
        "  Swapped: {struct: {b: {type: str}, a: {type: int}}}\n"
        "  Retyped: {struct: {a: {type: str}}}\n"
        "  Shrunk: {struct: {a: {type: int}}}\n"
    )
    (tmp_path / "old.yaml").write_text(old)
    (tmp_path / "new.yaml").write_text(new)
    [before] = compile_schemas([tmp_path / "old.yaml"], tmp_path)
    [after] = compile_schemas([tmp_path / "new.yaml"], tmp_path)
    report = compare_schemas([_without_positions(before)], [_without_positions(after)])
    start = Position("new.yaml", 1, 1)
    assert report.changes == (
        Change(
            start,
            "Renamed",
            "field `a` renamed to `z` (compatible: names do not travel; the Python API and "
            "bound classes see the new name)",
            breaking=False,
        ),
        Change(
            start,
            "Inserted",
            "field `x` inserted at position 0; only appending is compatible",
            breaking=True,
        ),
        Change(
            start,
            "Inserted",
            "field `y` appended at position 2 without a default (older messages lack it)",
            breaking=True,
        ),
        Change(
            start,
            "Swapped",
            "fields `a` and `b` swapped (positions 0 and 1); fields travel by position",
            breaking=True,
        ),
        Change(start, "Retyped", "field `a` type changed from int to str", breaking=True),
        Change(
            start,
            "Shrunk",
            "field `b` removed from position 1; older codecs require it",
            breaking=True,
        ),
    )


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old.yaml").write_text(STOPS.format(s=S, stop=STOP))
    renamed = "      id: {type: str}\n      title: {type: str}"
    (tmp_path / "new.yaml").write_text(STOPS.format(s="      b: {type: str}", stop=renamed))
    (tmp_path / "extra.yaml").write_text("schema: extra\nversion: 1\ntypes: {}\n")
    argv = ["--root", str(tmp_path), "compat", "--format", "json"]
    assert main([*argv, "old.yaml", "new.yaml"]) == 1
    assert json.loads(capsys.readouterr().out) == {
        "errors": [],
        "breaking": [
            {
                "file": "new.yaml",
                "line": 4,
                "column": 3,
                "subject": "S",
                "message": "field `a` removed from position 0; fields travel by position, so "
                "the ones after it would be misread",
            }
        ],
        "notes": [
            {
                "file": "new.yaml",
                "line": 10,
                "column": 7,
                "subject": "Stop",
                "message": "field `name` renamed to `title` (compatible: names do not travel; "
                "the Python API and bound classes see the new name)",
            }
        ],
        "compared": ["new.yaml"],
        "new": [],
        "majors": [],
    }
    (tmp_path / "broken.yaml").write_text("schema: transit\nversion: 1\ntypes: {A: {}}\n")
    assert main([*argv, "old.yaml", "broken.yaml"]) == 1
    assert json.loads(capsys.readouterr().out)["errors"][0]["file"] == "broken.yaml"


def test_the_positions_do_not_change_the_ir(tmp_path: Path) -> None:
    """Positions ride along for compat; equality (and so every check built on it) ignores them."""
    text = STOPS.format(s=S, stop=STOP)
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text(text.replace("types:\n", "types:\n\n\n"))
    [a] = compile_schemas([tmp_path / "a.yaml"], tmp_path)
    [b] = compile_schemas([tmp_path / "b.yaml"], tmp_path)
    assert a.types == b.types
    struct = a.types[0]
    assert isinstance(struct, ir.StructDef) and struct.position is not None
    assert struct.fields[0].position != b.types[0].fields[0].position  # type: ignore[union-attr]
    assert "position" not in repr(struct)
    moved = dataclasses.replace(a, types=b.types)  # equal types, other positions
    assert render_module(moved, [moved], "pkg") == render_module(a, [a], "pkg")


# -- against a git ref ---------------------------------------------------------------------


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A project whose first commit (tagged v1) has schema/transit.yaml and schema/geo.yml."""
    root = tmp_path / "project"
    (root / "schema").mkdir(parents=True)
    (root / "schema" / "transit.yaml").write_text(
        STOPS.format(s=S, stop=STOP).replace("version: 1\n", "version: 1\nimports: [geo.yml]\n")
        + "  Where:\n    struct:\n      at: {type: geo.Point}\n"
    )
    (root / "schema" / "geo.yml").write_text(
        "schema: geo\nversion: 1\ntypes:\n  Point:\n    struct:\n      x: {type: float}\n"
    )
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "v1")
    git(root, "tag", "v1")
    return root


def against(repo: Path, capsys: pytest.CaptureFixture[str], ref: str) -> tuple[int, str, str]:
    code = main(["--root", str(repo), "compat", f"--against={ref}"])
    out, err = capsys.readouterr()
    return code, out, err


def test_against_a_valid_ref(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert against(repo, capsys, "v1") == (0, "ok: 2 schema(s) compatible with v1\n", "")
    transit = repo / "schema" / "transit.yaml"
    transit.write_text(transit.read_text().replace("      a: {type: int}", "      a: {type: str}"))
    assert against(repo, capsys, "HEAD") == (
        1,
        "schema/transit.yaml:7:7: S: field `a` type changed from int to str\n"
        "1 breaking change(s): they need a new major version (the schema's `version`)\n",
        "",
    )


def test_one_file_against_a_ref_brings_its_imports(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    geo = repo / "schema" / "geo.yml"
    geo.write_text(geo.read_text().replace("x: {type: float}", "x: {type: int}"))
    code = main(["--root", str(repo), "compat", "--against", "v1", "schema/transit.yaml"])
    assert (code, capsys.readouterr().out.splitlines()[0]) == (
        1,
        "schema/geo.yml:6:7: Point: field `x` type changed from float to int",
    )
    assert main(["--root", str(repo), "compat", "--against", "v1", "old.yaml", "new.yaml"]) == 2
    assert capsys.readouterr().err == (
        "mmcodec compat: error: give either OLD [NEW] or --against GIT_REF [NEW]\n"
    )


@pytest.mark.parametrize("ref", ["HEDA", "v1.2", "-h", "HEAD:schema"])
def test_an_unknown_ref_is_a_usage_error(
    repo: Path, capsys: pytest.CaptureFixture[str], ref: str
) -> None:
    """A typo must not turn the check green (it used to: every file looked new)."""
    code, out, err = against(repo, capsys, ref)
    assert (code, out) == (2, "")
    assert err.startswith(f"mmcodec compat: error: unknown git ref {ref!r}")


def test_outside_a_git_repository_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "a.yaml").write_text("schema: a\nversion: 1\ntypes: {}\n")
    code, out, err = against(tmp_path, capsys, "HEAD")
    assert (code, out) == (2, "")
    assert err == (
        f"mmcodec compat: error: {tmp_path.resolve()} is not in a git repository "
        "(compat --against needs one)\n"
    )


def test_a_file_absent_at_the_ref_is_new_and_not_counted(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "schema" / "fresh.yaml").write_text("schema: fresh\nversion: 1\ntypes: {}\n")
    assert against(repo, capsys, "v1") == (
        0,
        "new: schema/fresh.yaml (not in v1; nothing to compare)\n"
        "ok: 2 schema(s) compatible with v1, 1 new\n",
        "",
    )


def test_a_schema_removed_since_the_ref_is_breaking(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "schema" / "gone.yaml").write_text("schema: gone\nversion: 1\ntypes: {}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "gone")
    (repo / "schema" / "gone.yaml").unlink()
    code, out, _ = against(repo, capsys, "HEAD")
    assert (code, out.splitlines()[0]) == (
        1,
        "schema/gone.yaml:1:1: schema 'gone': removed (its messages can no longer be read)",
    )


def test_an_old_version_that_does_not_compile_is_shown_as_ref_and_path(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "schema" / "geo.yml").write_text("schema: geo\nversion: 1\ntypes: {P: {}}\n")
    git(repo, "commit", "-q", "-am", "broken")
    (repo / "schema" / "geo.yml").write_text(
        "schema: geo\nversion: 1\ntypes:\n  Point:\n    struct:\n      x: {type: float}\n"
    )
    code, out, err = against(repo, capsys, "HEAD")
    assert (code, out) == (1, "")
    assert [line for line in err.splitlines() if ": error: " in line] == [
        "HEAD:schema/geo.yml:3:12: error: type 'P' needs exactly one of struct, union, mapping, "
        "enum (found none)",
        "HEAD:schema/transit.yaml:15:18: error: unknown type 'geo.Point'",
    ]
    assert "3 | types: {P: {}}" in err  # the old version's own line, from the ref


def test_against_a_git_ref_of_the_project() -> None:
    """The real command on this repository, as `make check` runs it."""
    result = subprocess.run(
        [str(MMCODEC), "compat", "--against", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: ")
