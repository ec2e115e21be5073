"""Golden files: the committed generated code equals what the compiler produces now.

``generated/`` is compiled from ``schema/`` and ``tests/golden/`` from ``tests/schemas/``
(every ``*.yaml`` there, so a schema added later is covered without touching this
file). Output is compared byte for byte; a mismatch names the command that fixes it
and shows the start of a unified diff.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

import pytest

from mmcodec.codegen.output import Plan, generate_command, plan_output
from mmcodec.codegen.validate import compile_schemas

ROOT = Path(__file__).resolve().parents[2]
FIX = "run: make generate"
MAX_DIFF_LINES = 40

# (schema directory, output directory, package of the output), relative to ROOT, as the
# Makefile generates them (the headers name that command).
TREES = [
    ("schema", "generated", "mmcodec.generated"),
    ("tests/schemas", "tests/golden", "tests.golden"),
]
SCHEMA_FILES = [
    (schemas, out, package, path.name)
    for schemas, out, package in TREES
    for path in sorted((ROOT / schemas).glob("*.yaml"))
]


@functools.cache
def _plan(schemas: str, out: str, package: str) -> tuple[Plan, dict[str, str]]:
    """The files the compiler would write, and which output file each schema file makes."""
    modules = compile_schemas(sorted((ROOT / schemas).glob("*.yaml")), ROOT)
    plan = plan_output(modules, package, generate_command(schemas, out, package))
    return plan, {Path(m.source).name: f"{m.python_name}.py" for m in modules}


def _diff(expected: str, actual: str, name: str) -> str:
    lines = list(
        difflib.unified_diff(
            actual.splitlines(keepends=True),
            expected.splitlines(keepends=True),
            fromfile=f"{name} (committed)",
            tofile=f"{name} (generated now)",
        )
    )
    shown = "".join(lines[:MAX_DIFF_LINES])
    if len(lines) > MAX_DIFF_LINES:
        shown += f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)\n"
    return shown


def golden_mismatch(expected: str, path: Path, name: str) -> str | None:
    """None when ``path`` holds exactly ``expected``; otherwise the failure message."""
    if not path.is_file():
        return f"{name} is missing; {FIX}"
    actual = path.read_text(encoding="utf-8")
    if actual == expected:
        return None
    return f"{name} is stale; {FIX}\n{_diff(expected, actual, name)}"


@pytest.mark.parametrize(
    ("schemas", "out", "package", "schema_file"),
    SCHEMA_FILES,
    ids=[f"{s}/{name}" for s, _, _, name in SCHEMA_FILES],
)
def test_generated_module_matches_its_schema(
    schemas: str, out: str, package: str, schema_file: str
) -> None:
    plan, outputs = _plan(schemas, out, package)
    name = outputs[schema_file]
    problem = golden_mismatch(plan.files[name], ROOT / out / name, f"{out}/{name}")
    assert problem is None, problem


@pytest.mark.parametrize(("schemas", "out", "package"), TREES, ids=[t[1] for t in TREES])
def test_output_directory_holds_exactly_the_generated_files(
    schemas: str, out: str, package: str
) -> None:
    plan, _ = _plan(schemas, out, package)
    present = sorted(
        p.relative_to(ROOT / out).as_posix()
        for p in (ROOT / out).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert present == sorted(plan.files), f"{out}/ has other files than the compiler makes; {FIX}"
    for name in ("__init__.py", "py.typed"):
        problem = golden_mismatch(plan.files[name], ROOT / out / name, f"{out}/{name}")
        assert problem is None, problem


def test_every_test_schema_is_compiled() -> None:
    _, outputs = _plan("tests/schemas", "tests/golden", "tests.golden")
    assert sorted(outputs) == sorted(p.name for p in (ROOT / "tests/schemas").glob("*.yaml"))


# -- the failure message itself ------------------------------------------------------


def test_mismatch_message_names_the_fix_and_shows_a_diff(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("a = 1\nb = 2\n", encoding="utf-8")
    message = golden_mismatch("a = 1\nb = 3\n", path, "generated/m.py")
    assert message == (
        "generated/m.py is stale; run: make generate\n"
        "--- generated/m.py (committed)\n"
        "+++ generated/m.py (generated now)\n"
        "@@ -1,2 +1,2 @@\n"
        " a = 1\n"
        "-b = 2\n"
        "+b = 3\n"
    )
    assert golden_mismatch("a = 1\nb = 2\n", path, "generated/m.py") is None
    assert golden_mismatch("", tmp_path / "gone.py", "generated/gone.py") == (
        "generated/gone.py is missing; run: make generate"
    )


def test_mismatch_diff_is_kept_short(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("".join(f"x{i} = {i}\n" for i in range(100)), encoding="utf-8")
    message = golden_mismatch("".join(f"y{i} = {i}\n" for i in range(100)), path, "m.py")
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == "m.py is stale; run: make generate"
    assert len(lines) == 1 + MAX_DIFF_LINES + 1
    assert lines[-1] == f"... ({203 - MAX_DIFF_LINES} more diff lines)"
