"""The compiler from the user's side, in a fresh venv where torch was never installed.

``pip install 'mmcodec-*.whl[codegen]'`` installs msgspec, numpy, jinja2 and pyyaml, and
no torch; every command of the compiler works there (validate, generate, check, compat,
json-schema). What needs torch says, in one line, what to install: importing a generated
codec, and ``mmcodec inspect``; so do the transports' extras.

``PIP_CONSTRAINT`` (from ``outside_env``) still pins torch to the CPU build: a regression
that asked for torch would then install that build (and fail the test), not download
PyPI's CUDA build.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import zipfile
from collections.abc import Callable
from email.parser import Parser
from pathlib import Path

import pytest

import mmcodec
from tests.tools.conftest import ROOT, commit_all, git, ok, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SCHEMA = """\
schema: shapes
version: 1
doc: Shapes for a drawing program.

types:
  Stroke:
    doc: One stroke of a pen.
    struct:
      points: {type: tensor, doc: "(n, 2) float32 positions."}
      width: {type: float, doc: Pen width.}
"""
APPENDED = SCHEMA + "      color: {type: str, default: black, doc: Added later.}\n"
TORCH_HINT = (
    "needs torch: pip install 'mmcodec[torch]', or first the torch build you want "
    "(CPU or CUDA: https://pytorch.org/get-started/locally/)"
)


@pytest.fixture(scope="module")
def wheel(
    source_repo: Path, outside_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    build: list[str | Path] = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        dist,
        source_repo,
    ]
    ok(run(build, cwd=dist, env=outside_env))
    [built] = sorted(dist.glob("mmcodec-*.whl"))
    return built


@pytest.fixture(scope="module")
def venv(
    wheel: Path, outside_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A fresh venv with the compiler extra, and no torch."""
    where = tmp_path_factory.mktemp("compiler-only") / "venv"
    ok(run([sys.executable, "-m", "venv", where], cwd=where.parent, env=outside_env))
    python = where / "bin" / "python"
    ok(run([python, "-m", "pip", "install", "-q", f"{wheel}[codegen]"], cwd=where, env=outside_env))
    return where


Command = Callable[..., tuple[int, str, str]]


@pytest.fixture
def mmcodec_in(venv: Path, outside_env: dict[str, str]) -> Callable[[Path], Command]:
    def bind(project: Path) -> Command:
        def command(*args: str | Path) -> tuple[int, str, str]:
            result = run([venv / "bin" / "mmcodec", *args], cwd=project, env=outside_env)
            return result.returncode, result.stdout, result.stderr

        return command

    return bind


def test_the_compiler_extra_installs_no_torch(venv: Path, outside_env: dict[str, str]) -> None:
    python = venv / "bin" / "python"
    pip_list: list[str | Path] = [python, "-m", "pip", "list", "--format", "json"]
    listed = json.loads(ok(run(pip_list, cwd=venv, env=outside_env)))
    installed = {row["name"].lower() for row in listed}
    assert {"mmcodec", "msgspec", "numpy", "jinja2", "pyyaml"} <= installed
    assert "torch" not in installed, installed
    find = "import importlib.util; print(importlib.util.find_spec('torch'))"
    assert ok(run([python, "-c", find], cwd=venv, env=outside_env)) == "None\n"


def test_help_and_version_start_without_torch(
    venv: Path, outside_env: dict[str, str], record_property: Callable[[str, object], None]
) -> None:
    script = venv / "bin" / "mmcodec"
    assert ok(run([script, "--version"], cwd=venv, env=outside_env)) == (
        f"mmcodec {mmcodec.__version__}\n"
    )
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        shown = ok(run([script, "--help"], cwd=venv, env=outside_env))
        seconds.append(time.perf_counter() - started)
    assert shown.startswith("usage: mmcodec ")
    # A figure for the record (pytest -rA, or the junit XML), never a pass/fail criterion.
    record_property("mmcodec --help, median of 5 (s)", round(statistics.median(seconds), 3))
    print(f"mmcodec --help without torch: median {statistics.median(seconds):.3f} s of 5")


def test_every_compiler_command_works_without_torch(
    tmp_path: Path,
    mmcodec_in: Callable[[Path], Command],
    outside_env: dict[str, str],
) -> None:
    project = tmp_path / "drawing"
    (project / "schema").mkdir(parents=True)
    (project / "schema" / "shapes.yaml").write_text(SCHEMA, encoding="utf-8")
    mmcodec = mmcodec_in(project)
    out = ("--out", "drawing/codec", "--package", "drawing.codec")

    assert mmcodec("validate") == (0, "ok: 1 schema file(s) valid\n", "")
    code, wrote, _ = mmcodec("generate", *out)
    assert (code, wrote.splitlines()) == (
        0,
        [
            "wrote drawing/codec/__init__.py",
            "wrote drawing/codec/py.typed",
            "wrote drawing/codec/shapes.py",
        ],
    )
    assert mmcodec("check", *out) == (0, "ok: drawing/codec is up to date\n", "")

    git(["init", "-q", "-b", "main"], project, outside_env)
    commit_all(project, outside_env, "shapes v1")
    (project / "schema" / "shapes.yaml").write_text(APPENDED, encoding="utf-8")
    assert mmcodec("compat", "--against", "HEAD") == (
        0,
        "ok: 1 schema(s) compatible with HEAD\n",
        "",
    )
    code, stale, _ = mmcodec("check", *out)
    assert (code, stale.splitlines()[0]) == (1, "stale: drawing/codec/shapes.py")

    code, printed, _ = mmcodec("json-schema")
    assert code == 0
    assert json.loads(printed) == json.loads(
        (ROOT / "schema" / "mmcodec.schema.json").read_text(encoding="utf-8")
    )


def _last_line(result: tuple[int, str, str]) -> str:
    """The error line of a failed ``python -c``, after checking the traceback is not chained."""
    code, _, err = result
    assert code == 1, err
    assert "During handling of the above exception" not in err, err
    return err.splitlines()[-1]


def test_what_needs_an_extra_says_which_in_one_line(
    tmp_path: Path,
    venv: Path,
    mmcodec_in: Callable[[Path], Command],
    outside_env: dict[str, str],
) -> None:
    project = tmp_path / "drawing"
    (project / "schema").mkdir(parents=True)
    (project / "schema" / "shapes.yaml").write_text(SCHEMA, encoding="utf-8")
    mmcodec = mmcodec_in(project)
    assert mmcodec("generate", "--out", "shapes_codec")[0] == 0

    def python(statement: str) -> tuple[int, str, str]:
        result = run([venv / "bin" / "python", "-c", statement], cwd=project, env=outside_env)
        return result.returncode, result.stdout, result.stderr

    assert _last_line(python("from shapes_codec import shapes")) == (
        f"ModuleNotFoundError: shapes_codec {TORCH_HINT}"
    )
    assert _last_line(python("from mmcodec.generated import multimodal")) == (
        f"ModuleNotFoundError: mmcodec.generated {TORCH_HINT}"
    )
    assert _last_line(python("from mmcodec.transport import zmq")) == (
        "ModuleNotFoundError: mmcodec.transport.zmq needs zmq: pip install 'mmcodec[zmq]'"
    )
    assert _last_line(python("import mmcodec.integrations.ray")) == (
        "ModuleNotFoundError: mmcodec.integrations.ray needs ray: pip install 'mmcodec[ray]'"
    )
    (project / "message.mmc").write_bytes(b"")
    code, out, err = mmcodec("inspect", "message.mmc")  # by position: no torch needed
    assert (code, out) == (1, "") and "frame table" in err, err
    assert mmcodec("inspect", "--module", "shapes_codec.shapes", "message.mmc") == (
        2,
        "",
        "mmcodec inspect needs torch: pip install 'mmcodec[torch]'\n",
    )


def test_the_wheel_s_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    assert metadata["Version"] == mmcodec.__version__
    assert wheel.name.startswith(f"mmcodec-{mmcodec.__version__}-")
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert sorted(urls) == ["Changelog", "Documentation", "Homepage", "Issues", "Source"]
    assert metadata["License-Expression"] == "Apache-2.0"
    requires = metadata.get_all("Requires-Dist") or []
    assert 'torch>=2.4; extra == "torch"' in requires
    assert [r for r in requires if "extra ==" not in r] == ["msgspec<0.24,>=0.19", "numpy>=1.26"]
