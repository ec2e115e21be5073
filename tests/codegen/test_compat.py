"""`python -m codegen compat`: wire-compatibility of a schema with its previous version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main

ROOT = Path(__file__).resolve().parents[2]
EVOLUTION = ROOT / "tests" / "evolution"

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
    assert code == 1
    assert out.splitlines() == [
        f"{EVOLUTION.relative_to('/') / 'v1.yaml'}: Record.note: field was removed",
        f"{EVOLUTION.relative_to('/') / 'v1.yaml'}: Record.weights: field was removed",
        f"{EVOLUTION.relative_to('/') / 'v1.yaml'}: Batch.source: field was removed",
        "breaking changes need a new major version (the schema's `version`)",
    ]


GIFT = "  Gift:\n    struct:\n      sender: {type: str}\n"


@pytest.mark.parametrize(
    ("extra_fields", "extra_variants", "old_types", "new_types", "expected"),
    [
        ("      note: {type: str}", "", "", "", "Item.note: appended field needs a default"),
        # a new struct as a new variant with a new tag: compatible
        ("", "      - {tag: 3, type: Gift}", "", GIFT, None),
        # an existing struct that becomes a variant gains a tag: its wire form changes
        ("", "      - {tag: 3, type: Gift}", GIFT, GIFT, "Gift: tag changed from None to 3"),
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
        assert expected in out


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
    )
    code, out = run(capsys, str(old), str(new))
    assert code == 1
    shown = str(new.relative_to("/"))
    assert out.splitlines()[:3] == [
        f"{shown}: Item.name: type changed from str to bytes",
        f"{shown}: Item.price: constraints changed from {{'ge': 0}} to {{'ge': 1}} "
        "(old messages may not satisfy them)",
        f"{shown}: Payment: variant with tag 1 was removed",
    ]


def test_a_new_major_version_may_break_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml")
    new = tmp_path / "new.yaml"
    new.write_text(
        old.read_text()
        .replace("version: 1", "version: 2")
        .replace("name: {type: str}", "name: {type: bytes}")
    )
    code, _ = run(capsys, str(old), str(new))
    assert code == 0


def test_against_a_git_ref_of_the_project() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "codegen", "compat", "--against", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if "not a git repository" in result.stderr:
        pytest.skip("no git checkout")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: ")
