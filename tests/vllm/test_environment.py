"""This project inside vLLM's environment: it changes nothing there, and imports vLLM lazily."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_installing_the_wheel_would_change_no_other_package(tmp_path: Path) -> None:
    # Build this project's wheel, then ask pip what installing it here would do, with no
    # index: anything it would add or upgrade besides mmcodec fails the resolution or
    # shows in the report.
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("mmcodec-*.whl")
    report = tmp_path / "report.json"
    result = subprocess.run(
        [*pip, "install", "--dry-run", "--no-index", "--report", str(report), str(wheel)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    installs = json.loads(report.read_text())["install"]
    assert [entry["metadata"]["name"] for entry in installs] == ["mmcodec"]


def test_only_the_vllm_binding_imports_vllm() -> None:
    shipped = "import sys, mmcodec.generated.multimodal; print('vllm' in sys.modules)"
    assert _python(shipped) == "False"
    bound = "import sys, mmcodec.generated.multimodal_vllm; print('vllm' in sys.modules)"
    assert _python(bound) == "True"
    integrations = "import sys, mmcodec.integrations; print('vllm' in sys.modules)"
    assert _python(integrations) == "False"
    plugin = "import sys, mmcodec.integrations.vllm; print('vllm' in sys.modules)"
    assert _python(plugin) == "True"
