"""mmcodec from the user's side: the wheel, installed into fresh venvs outside this repo.

Each test has a venv of its own, so they hold in any order:

1. ``pip install mmcodec-*.whl``: the runtime alone. The shipped codec imports and
   round-trips with jinja2 and pyyaml unimportable, and ``mmcodec inspect`` works.
   (torch itself requires jinja2, so jinja2 is installed there; the check blocks it.)
2. ``pip install 'mmcodec-*.whl[codegen]'``: the compiler, and no formatter. A project
   in a temporary directory writes a schema, generates a package from it, imports it,
   round-trips a value; ``mmcodec check`` is clean, then stale after an edit.

torch comes from ``pip install torch==2.13.0`` (the CPU build here), pinned by
``PIP_CONSTRAINT`` for every later install too. It is installed once, into a venv of its
own that each test's venv sees through a ``.pth`` file (as if installed there first, the
way the README says to install torch): unpacking torch is most of a venv's cost.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.tools.conftest import TORCH_PIN, ok, run

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
EDITED = SCHEMA + "      color: {type: str, default: black, doc: Added later.}\n"


@pytest.fixture(scope="module")
def wheel(
    source_repo: Path, outside_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The wheel, built from a snapshot of the working tree the way a release would be."""
    dist = tmp_path_factory.mktemp("dist")
    ok(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source_repo],
           cwd=dist, env=outside_env))  # fmt: skip
    [built] = sorted(dist.glob("mmcodec-*.whl"))
    return built


@pytest.fixture(scope="module")
def torch_site(outside_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site-packages of a venv holding torch (and its requirements) and nothing else."""
    where = tmp_path_factory.mktemp("torch") / "venv"
    ok(run([sys.executable, "-m", "venv", where], cwd=where.parent, env=outside_env))
    python = where / "bin" / "python"
    ok(run([python, "-m", "pip", "install", "-q", TORCH_PIN], cwd=where.parent, env=outside_env))
    [site] = (where / "lib").glob("python3.*/site-packages")
    return site


@pytest.fixture
def venv(wheel: Path, torch_site: Path, outside_env: dict[str, str], tmp_path: Path) -> Path:
    """A fresh venv with torch and the wheel (no extras) installed: this test's alone."""
    where = tmp_path / "venv"
    ok(run([sys.executable, "-m", "venv", where], cwd=tmp_path, env=outside_env))
    [site] = (where / "lib").glob("python3.*/site-packages")
    (site / "torch-site.pth").write_text(f"{torch_site}\n", encoding="utf-8")
    python = where / "bin" / "python"
    ok(run([python, "-m", "pip", "install", "-q", wheel], cwd=tmp_path, env=outside_env))
    # Torch is seen, and only the wheel's own requirements came into this venv.
    assert ok(run([python, "-m", "pip", "show", "torch"], cwd=tmp_path, env=outside_env))
    mine = {path.name.split("-")[0].lower() for path in site.glob("*.dist-info")}
    assert mine - {"pip", "setuptools"} == {"mmcodec", "msgspec", "numpy"}, mine
    return where


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_one_package_with_its_templates_and_no_tests_or_benchmarks(
    wheel: Path,
) -> None:
    names = _names(wheel)
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert {n.split("/")[0] for n in names} == {"mmcodec", dist_info}
    for expected in (
        "mmcodec/py.typed",
        "mmcodec/payloads.py",
        "mmcodec/runtime/inspect.py",
        "mmcodec/codegen/cli.py",
        "mmcodec/codegen/templates/module.py.j2",
        "mmcodec/generated/multimodal.py",
        "mmcodec/generated/py.typed",
        f"{dist_info}/entry_points.txt",
    ):
        assert expected in names, expected
    assert not [n for n in names if "/tests/" in n or "/bench/" in n or "__pycache__" in n]

    with zipfile.ZipFile(wheel) as archive:
        metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    requires = metadata.get_all("Requires-Dist") or []
    runtime = sorted(re.split(r"[ <>=!~;\[]", r)[0] for r in requires if "extra ==" not in r)
    assert runtime == ["msgspec", "numpy"]  # torch is the user's choice (the torch extra)
    assert "mmcodec = mmcodec.codegen.cli:main" in entry_points


ROUND_TRIP = """
import sys
sys.modules["jinja2"] = None  # torch requires jinja2; the runtime must not need it
sys.modules["yaml"] = None
import torch
import mmcodec
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing

assert mmcodec.__file__.startswith(sys.prefix), mmcodec.__file__  # the wheel, not the repo
batch = {
    "pixel_values": torch.randn(30, 8).to(torch.bfloat16),
    "grid": torch.tensor([[1, 3, 4], [1, 3, 6]]),
}
config = {
    "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([12, 18])),
    "grid": mm.MultiModalFieldConfig.batched("image"),
}
items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
received = mm.decode(mm.encode(items), mm.MultiModalKwargsItems)
assert received == items
assert torch.equal(received.get_data()["pixel_values"], batch["pixel_values"])
framing.save_frames(mm.encode(items), sys.argv[1])
print("round trip ok")
"""


def test_runtime_only_round_trips_and_inspects_without_the_compiler_s_dependencies(
    venv: Path, outside_env: dict[str, str], tmp_path: Path
) -> None:
    python, mmcodec = venv / "bin" / "python", venv / "bin" / "mmcodec"
    shown = run([python, "-m", "pip", "show", "pyyaml"], cwd=tmp_path, env=outside_env)
    assert shown.returncode == 1  # not installed at all
    capture = tmp_path / "items.mmc"
    assert ok(run([python, "-c", ROUND_TRIP, capture], cwd=tmp_path, env=outside_env)) == (
        "round trip ok\n"
    )

    described = ok(
        run(
            [mmcodec, "inspect", capture, "--module", "mmcodec.generated.multimodal",
             "--format", "json"],
            cwd=tmp_path,
            env=outside_env,
        )
    )  # fmt: skip
    tree = json.loads(described)
    assert tree["envelope"]["root"] == "MultiModalKwargsItems"
    assert [t["shape"] for t in tree["tensors"]] == [[12, 8], [18, 8], [3], [3]]  # run order

    # The compiler's commands say what to install instead of a traceback.
    refused = run([mmcodec, "generate"], cwd=tmp_path, env=outside_env)
    assert refused.returncode == 2
    assert refused.stderr == "mmcodec generate needs yaml: pip install 'mmcodec[codegen]'\n"


USE = """
import torch
from drawing.codec import shapes

stroke = shapes.Stroke(points=torch.tensor([[0.0, 1.0], [2.0, 3.0]]), width=1.5)
back = shapes.decode_bytes(shapes.encode_bytes(stroke), shapes.Stroke)
assert back == stroke and back.points.dtype == torch.float32
print("user codec ok")
"""


def test_a_user_project_generates_imports_round_trips_and_checks(
    venv: Path, wheel: Path, outside_env: dict[str, str], tmp_path: Path
) -> None:
    python, mmcodec = venv / "bin" / "python", venv / "bin" / "mmcodec"
    ok(
        run(
            [python, "-m", "pip", "install", "-q", f"{wheel}[codegen]"],
            cwd=tmp_path,
            env=outside_env,
        )
    )
    # No formatter: the output must not depend on one.
    assert not (venv / "bin" / "ruff").exists()
    assert run([python, "-c", "import ruff"], cwd=tmp_path, env=outside_env).returncode == 1

    project = tmp_path / "drawing-app"
    (project / "schema").mkdir(parents=True)
    (project / "schema" / "shapes.yaml").write_text(SCHEMA, encoding="utf-8")
    (project / "drawing").mkdir()
    (project / "drawing" / "__init__.py").write_text("", encoding="utf-8")
    paths = ["--schemas", "schema", "--out", "drawing/codec", "--package", "drawing.codec"]

    ok(run([mmcodec, "generate", *paths], cwd=project, env=outside_env))
    assert (project / "drawing" / "codec" / "shapes.py").is_file()
    assert ok(run([python, "-c", USE], cwd=project, env=outside_env)) == "user codec ok\n"
    assert "up to date" in ok(run([mmcodec, "check", *paths], cwd=project, env=outside_env))

    (project / "schema" / "shapes.yaml").write_text(EDITED, encoding="utf-8")
    stale = run([mmcodec, "check", *paths], cwd=project, env=outside_env)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "drawing/codec/shapes.py" in stale.stdout
