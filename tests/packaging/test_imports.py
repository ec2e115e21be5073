"""What each entry point imports, in a fresh interpreter: the compiler and the CLI never
torch (but ``inspect``); a missing extra is one line naming the ``pip install`` that
fixes it, not a bare ``No module named ...``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "schema: points\nversion: 1\ntypes:\n  Point:\n    struct:\n      xy: tensor\n"

RUN_CLI = """
import contextlib, io, json, sys
from mmcodec.codegen.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "numpy", "zmq", "ray"})
print(json.dumps([code, heavy]))
"""


def _python(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    for version in ("old", "schema"):
        (root / version).mkdir()
        (root / version / "points.yaml").write_text(SCHEMA, encoding="utf-8")
    # The output `check` compares with, whichever case runs first (the order is random).
    generated = _python(RUN_CLI, "generate", "--out", "points_codec", cwd=root)
    assert json.loads(generated.stdout)[0] == 0, generated.stderr
    return root


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["validate"],
        ["generate", "--out", "points_codec"],
        ["check", "--out", "points_codec"],
        ["compat", "old", "schema"],
        ["json-schema"],
        ["generate", "--help"],
    ],
    ids=" ".join,
)
def test_no_command_of_the_compiler_imports_torch(argv: list[str], project: Path) -> None:
    result = _python(RUN_CLI, *argv, cwd=project)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [0, []]


def test_inspect_with_a_module_imports_torch(project: Path) -> None:
    """The one command that imports a codec (and so torch); it also shows that the check
    above sees torch when it is there."""
    from mmcodec.generated import multimodal as mm
    from mmcodec.payloads import llava

    (project / "llava.mmc").write_bytes(mm.encode_bytes(llava(0)))
    module = ("--module", "mmcodec.generated.multimodal")
    result = _python(RUN_CLI, "inspect", "llava.mmc", *module, cwd=project)
    assert json.loads(result.stdout) == [0, ["numpy", "torch"]]


BLOCKED = """
import sys, traceback
for name in sys.argv[2:]:
    sys.modules[name] = None  # as if not installed: importing it raises ModuleNotFoundError
try:
    exec(sys.argv[1])
except ImportError as e:
    print(type(e).__name__, e.name, str(e), sep="|")
    print(len(traceback.format_exception_only(e)), e.__suppress_context__ or e.__context__ is None)
"""


@pytest.mark.parametrize(
    ("statement", "blocked", "message"),
    [
        (
            "from mmcodec.generated import multimodal",
            "torch",
            "mmcodec.generated needs torch: pip install 'mmcodec[torch]', or first the torch "
            "build you want (CPU or CUDA: https://pytorch.org/get-started/locally/)",
        ),
        (
            "import tests.golden.common",
            "torch",
            "tests.golden needs torch: pip install 'mmcodec[torch]', or first the torch "
            "build you want (CPU or CUDA: https://pytorch.org/get-started/locally/)",
        ),
        (
            "from mmcodec.transport import zmq",
            "zmq",
            "mmcodec.transport.zmq needs zmq: pip install 'mmcodec[zmq]'",
        ),
        (
            "import mmcodec.integrations.ray",
            "ray",
            "mmcodec.integrations.ray needs ray: pip install 'mmcodec[ray]'",
        ),
    ],
    ids=["torch-shipped-codec", "torch-user-codec", "zmq", "ray"],
)
def test_a_missing_extra_is_one_line_naming_the_install(
    statement: str, blocked: str, message: str
) -> None:
    result = _python(BLOCKED, statement, blocked)
    assert result.stdout.splitlines() == [f"ModuleNotFoundError|{blocked}|{message}", "1 True"]


def test_a_missing_module_no_extra_provides_is_left_as_python_says_it() -> None:
    from mmcodec._extras import missing_extra

    error = ModuleNotFoundError("No module named 'zmq_helpers'", name="zmq_helpers")
    assert missing_extra(error, "mmcodec.transport.zmq") is error


@pytest.mark.parametrize(
    ("argv", "blocked", "line"),
    [
        (  # by position inspect needs no torch; --module imports a generated codec
            ["inspect", "--module", "mmcodec.generated.multimodal", "x.mmc"],
            "torch",
            "mmcodec inspect needs torch: pip install 'mmcodec[torch]'",
        ),
        (["validate"], "yaml", "mmcodec validate needs yaml: pip install 'mmcodec[codegen]'"),
        (["check"], "jinja2", "mmcodec check needs jinja2: pip install 'mmcodec[codegen]'"),
    ],
)
def test_the_cli_says_which_extra_a_command_needs(
    argv: list[str], blocked: str, line: str, project: Path
) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "from mmcodec.codegen.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = _python(code, *argv, cwd=project)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", line + "\n")
