"""vLLM 0.33.0's own test files, run from its source distribution with the mmcodec plugin active.

The files are not in vLLM's wheel and are not ours to commit: the set-up downloads the
0.33.0 sdist with pip (``pip download vllm==0.33.0 --no-deps --no-binary :all:
--no-build-isolation --no-clean`` with ``TMPDIR`` set leaves the unpacked tree behind; the
build step fails, which does not matter) into ``.venv-vllm/vllm-0.33.0-src``, once, and
runs there:

- ``tests/v1/test_serial_utils.py`` (the request path's codec),
- ``tests/distributed/test_shm_storage.py`` (the shared-memory storage and its serde),
- the ``shm`` cases of ``tests/multimodal/test_cache.py`` (vLLM's shared-memory cache),
- ``tests/entrypoints/scale_out/token_in_token_out/test_mm_serde.py`` (scale-out strings),

with ``-p mmcodec_vllm_upstream`` (``tests/vllm/upstream/``): vLLM's ``load_general_plugins``
installs mmcodec before pytest imports a test module. ``--noconftest``: vLLM's conftest
files import what a GPU test run needs (model runners, HF downloads), none of which these
files use. The shm cases build ``ModelConfig(model="llava-hf/llava-onevision-qwen2-0.5b-ov-hf")``
only for its multimodal cache settings; offline, and with no torchvision for the CPU
torch, the set-up gives that name a stub config in a private HF cache (``HF_HUB_OFFLINE``):
a tiny PaliGemma, a multimodal architecture whose vLLM module imports here.

Deselected, by name, only tests that pin vLLM's own wire (:data:`WIRE_PINS`, each with its
reason); the run must pass every other selected test, and exactly as many as counted.
The shared-memory files run twice: in the plugin's default mode (readers view the
segment) and with ``MMCODEC_VLLM_SHM=copy``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
PLUGIN_DIR: Final = Path(__file__).resolve().parent / "upstream"
VERSION: Final = "0.33.0"
SOURCE: Final = Path(
    os.environ.get("MMCODEC_VLLM_SOURCE", ROOT / ".venv-vllm" / f"vllm-{VERSION}-src")
)
"""Where the unpacked sdist lives (``MMCODEC_VLLM_SOURCE`` points elsewhere)."""

SERIAL: Final = "tests/v1/test_serial_utils.py"
STORAGE: Final = "tests/distributed/test_shm_storage.py"
CACHE: Final = "tests/multimodal/test_cache.py"
MM_SERDE: Final = "tests/entrypoints/scale_out/token_in_token_out/test_mm_serde.py"

WIRE_PINS: Final = {
    f"{SERIAL}::test_multimodal_kwargs": (
        "asserts vLLM's own wire for a message of items: `len(encoded) == 8` frames and "
        "14300 <= total bytes <= 14340. Routed, the items travel as one mmcodec message "
        "after vLLM's frames (6 frames here). Its behavioural checks (three modalities, "
        "one image item with keys i0, i1 in order, get_data() equal) are made, strictly, by "
        "tests/vllm/test_request_path.py::test_vllms_multimodal_kwargs_scenario_routed."
    ),
}
"""Tests deselected by name, and why: each pins vLLM's own wire, nothing else."""

PASSED: Final = {SERIAL: 11, STORAGE: 14, CACHE: 7, MM_SERDE: 23}
"""How many tests of each file must pass (all of them, less the wire pins)."""

STUB_MODEL: Final = "llava-hf/llava-onevision-qwen2-0.5b-ov-hf"
STUB_CONFIG: Final = {
    "architectures": ["PaliGemmaForConditionalGeneration"],
    "model_type": "paligemma",
    "text_config": {
        "model_type": "gemma",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "vocab_size": 257216,
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 224,
        "patch_size": 14,
        "projection_dim": 64,
    },
    "projection_dim": 64,
    "image_token_index": 257152,
    "torch_dtype": "bfloat16",
}


def _download(target: Path) -> None:
    """Unpack vLLM's sdist into ``target`` with pip (the build that follows fails)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", f"vllm=={VERSION}"),
                *("--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--no-clean"),
                *("-d", str(Path(scratch) / "dist"), "--quiet"),
            ],
            env={**os.environ, "TMPDIR": scratch, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            capture_output=True,
            check=False,  # preparing the metadata fails (vLLM builds CUDA kernels)
        )
        trees = [p.parent for p in Path(scratch).glob("pip-download-*/*/PKG-INFO")]
        versions = [t for t in trees if f"\nVersion: {VERSION}\n" in (t / "PKG-INFO").read_text()]
        assert len(versions) == 1, f"pip left no unpacked vllm {VERSION} sdist in {scratch}"
        shutil.move(str(versions[0]), target)


@pytest.fixture(scope="module")
def source() -> Path:
    if not (SOURCE / SERIAL).is_file():
        _download(SOURCE)
    return SOURCE


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf")
    repo = home / "hub" / f"models--{STUB_MODEL.replace('/', '--')}"
    revision = "0" * 40
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots" / revision / "config.json").write_text(json.dumps(STUB_CONFIG))
    return home


def _run(source: Path, hf_home: Path, report: Path, files: list[str], **env: str) -> str:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "VLLM_PLUGINS", "MMCODEC_VLLM_SHM"))
    }
    environment.update(
        PYTHONPATH=str(PLUGIN_DIR),
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_LOGGING_LEVEL="WARNING",
        **env,
    )
    deselect = [arg for test in WIRE_PINS for arg in ("--deselect", test)]
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-rA", "--noconftest", "-p", "no:cacheprovider"),
        *("-p", "mmcodec_vllm_upstream", f"--junitxml={report}", *deselect),
        *("-k", "not test_cache.py or shm"),  # test_cache.py: its shm cases only
        *files,
    ]
    result = subprocess.run(
        command, cwd=source, env=environment, capture_output=True, text=True, timeout=900
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    return output


def _passed_by_file(report: Path) -> dict[str, int]:
    passed: dict[str, int] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        if any(child.tag in {"failure", "error", "skipped"} for child in case):
            continue
        path = case.get("classname", "").split(".")
        for file in PASSED:
            module = list(Path(file).with_suffix("").parts)
            if path[: len(module)] == module:
                passed[file] = passed.get(file, 0) + 1
    return passed


def test_vllms_own_tests_pass_with_the_plugin(source: Path, hf_home: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    output = _run(source, hf_home, report, list(PASSED))
    assert "mmcodec installed by vLLM's load_general_plugins (shared-memory cache: view)" in output
    assert _passed_by_file(report) == PASSED


def test_vllms_shm_tests_pass_in_copy_mode(source: Path, hf_home: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    files = [STORAGE, CACHE]
    output = _run(source, hf_home, report, files, MMCODEC_VLLM_SHM="copy")
    assert "mmcodec installed by vLLM's load_general_plugins (shared-memory cache: copy)" in output
    assert _passed_by_file(report) == {file: PASSED[file] for file in files}
