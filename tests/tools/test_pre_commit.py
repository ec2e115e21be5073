"""The hooks in .pre-commit-hooks.yaml, run by pre-commit itself in a user's repository.

A temporary git repository holds a schema and its generated code, as a project using
mmcodec would. pre-commit installs the hooks from a snapshot of this repository (its
working tree, so uncommitted work is tested too) into a hook environment of its own,
pip-installing mmcodec's compiler there: no torch, and no pin needed to keep it out.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.tools.conftest import commit_all, git, ok, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SCHEMA = """\
schema: shapes
version: 1
doc: Shapes for a drawing program.

types:
  Point:
    doc: A point in the plane.
    struct:
      x: {type: float, doc: Column.}
      y: {type: float, doc: Row.}
"""
WITH_FIELD = SCHEMA + "      label: {type: str, default: '', doc: Added later (with a default).}\n"
"""Appends a field with a default: compatible within the major version."""
BREAKING = SCHEMA.replace("      y: {type: float, doc: Row.}\n", "")
"""Drops a field: a wire-breaking change."""


def _mmcodec(args: list[str], project: Path, env: dict[str, str]) -> str:
    """The compiler of the test environment, run in the user's project."""
    return ok(run([sys.executable, "-m", "mmcodec.codegen", *args], cwd=project, env=env))


@pytest.fixture
def project(tmp_path: Path, outside_env: dict[str, str]) -> Path:
    """A user's repository: schema/shapes.yaml and generated/ (the hooks' defaults)."""
    repo = tmp_path / "drawing"
    (repo / "schema").mkdir(parents=True)
    (repo / "schema" / "shapes.yaml").write_text(SCHEMA, encoding="utf-8")
    git(["init", "-q", "-b", "main"], repo, outside_env)
    _mmcodec(["generate"], repo, outside_env)
    commit_all(repo, outside_env, "shapes schema and its codec")
    return repo


def _pre_commit(args: list[str], project: Path, env: dict[str, str]) -> tuple[int, str]:
    result = run([sys.executable, "-m", "pre_commit", *args], cwd=project, env=env, timeout=900)
    return result.returncode, result.stdout + result.stderr


def test_try_repo_fails_on_a_stale_generated_file(
    project: Path, source_repo: Path, outside_env: dict[str, str]
) -> None:
    (project / "schema" / "shapes.yaml").write_text(WITH_FIELD, encoding="utf-8")
    git(["add", "-A"], project, outside_env)

    code, output = _pre_commit(
        ["try-repo", str(source_repo), "mmcodec-check", "--all-files"], project, outside_env
    )

    assert code == 1, output
    assert "mmcodec schemas valid, generated code up to date" in output
    assert "Failed" in output
    assert "generated/shapes.py" in output, output


def test_hooks_from_a_config_pass_after_generate_and_catch_a_breaking_change(
    project: Path, source_repo: Path, outside_env: dict[str, str], tmp_path: Path
) -> None:
    # What a user adds: both hooks, pinned to a commit of this repository.
    rev = git(["rev-parse", "HEAD"], source_repo, outside_env).strip()
    (project / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {source_repo}\n"
        f"    rev: {rev}\n"
        "    hooks:\n"
        "      - id: mmcodec-check\n"
        "      - id: mmcodec-compat\n"
        "        args: [--against, HEAD]\n",
        encoding="utf-8",
    )
    home = tmp_path / "pre-commit-home"
    # No PIP_CONSTRAINT: the hooks need no pinning trick, as in a user's repository.
    env = {**outside_env, "PRE_COMMIT_HOME": str(home)}
    del env["PIP_CONSTRAINT"]

    # A compatible change, generated: both hooks pass.
    (project / "schema" / "shapes.yaml").write_text(WITH_FIELD, encoding="utf-8")
    _mmcodec(["generate"], project, env)
    git(["add", "-A"], project, env)
    code, output = _pre_commit(["run", "--all-files"], project, env)
    assert code == 0, output
    assert output.count("Passed") == 2, output
    # The hook environment holds the compiler's dependencies, and no torch.
    [site] = home.glob("repo*/py_env-*/lib/python*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"mmcodec", "msgspec", "numpy", "jinja2", "pyyaml"} <= installed, installed
    assert "torch" not in installed and not (site / "torch").exists(), installed

    # A breaking change, generated too: the check passes, compat fails naming the break.
    commit_all(project, env, "label")
    (project / "schema" / "shapes.yaml").write_text(BREAKING, encoding="utf-8")
    _mmcodec(["generate"], project, env)
    git(["add", "-A"], project, env)
    code, output = _pre_commit(["run", "--all-files"], project, env)
    assert code == 1, output
    assert "mmcodec schemas wire-compatible with a git ref" in output
    assert "Point" in output and "y" in output, output
    assert "breaking change(s): they need a new major version" in output, output
