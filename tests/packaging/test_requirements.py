"""torch is the user's choice: ``pip install mmcodec`` needs only msgspec and numpy.

torch comes with the ``torch`` extra or is installed first (the build the user wants);
the project's own environment installs the CPU build first and never hands pip a torch
requirement that the pinned build does not already meet.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(
        (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    )["project"]
    return project


def _names(requirements: object) -> list[str]:
    assert isinstance(requirements, list)
    return [re.split(r"[ <>=!~;\[]", r)[0] for r in requirements]


def test_the_runtime_requires_msgspec_and_numpy_only() -> None:
    assert _names(_project()["dependencies"]) == ["msgspec", "numpy"]


def test_torch_comes_only_with_the_torch_extra() -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert extras["torch"] == ["torch>=2.4"]
    with_torch = sorted(name for name, reqs in extras.items() if "torch" in _names(reqs))
    assert with_torch == ["torch"]
    # The compiler's extra (what pre-commit's hook environments install) brings no torch.
    assert _names(extras["codegen"]) == ["jinja2", "pyyaml"]


def test_make_venv_installs_the_pinned_torch_first_and_passes_the_pin_along() -> None:
    # -n: print the commands; -W: as if pyproject.toml had changed, so the recipe runs.
    shown = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "venv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installs = [line for line in shown.splitlines() if " -m pip install " in line]
    torch_first, project = installs[-2:]
    assert torch_first.endswith(" 'torch==2.13.0'"), torch_first
    assert "-e '.[torch,test,dev,bench]'" in project and project.endswith(" 'torch==2.13.0'")
