"""The compiler's output is a pure function of the schema files and the options.

It must not depend on PYTHONHASHSEED (set and dict iteration), on the order the
schema files are given in, or on where the project is: the headers name the command
that regenerates the output with paths relative to the project root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Schema directory -> (output directory, package), as the Makefile generates them.
SCHEMA_DIRS = {
    "tests/schemas": ("tests/golden", "tests.golden"),
    "schema": ("generated", "mmcodec.generated"),
}

# Compiles each schema directory with the files in reverse order; prints the plans.
_REVERSED_ORDER = """
import json, sys
from pathlib import Path
from mmcodec.codegen.output import generate_command, plan_output
from mmcodec.codegen.validate import compile_schemas
root, dirs = Path(sys.argv[1]), json.loads(sys.argv[2])
plans = {}
for schemas, (out, package) in dirs.items():
    files = sorted((root / schemas).glob("*.yaml"), reverse=True)
    command = generate_command(schemas, out, package)
    plan = plan_output(compile_schemas(files, root), package, command)
    plans[schemas] = plan.files
print(json.dumps(plans))
"""


def _run(args: list[str], seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _generate(project: Path, seed: str) -> dict[str, dict[str, str]]:
    """``python -m mmcodec.codegen generate`` of every schema directory, in a copy of the
    project's schemas at ``project`` (given as absolute paths); the files."""
    trees = {}
    for schemas, (out, package) in SCHEMA_DIRS.items():
        shutil.copytree(ROOT / schemas, project / schemas)
        target = project / out
        command = ["-m", "mmcodec.codegen", "--root", str(project), "generate"]
        command += ["--schemas", str(project / schemas), "--out", str(target)]
        _run([*command, "--package", package], seed)
        trees[schemas] = {
            p.name: p.read_text(encoding="utf-8") for p in sorted(target.iterdir()) if p.is_file()
        }
    return trees


def test_output_is_independent_of_hash_seed_file_order_and_output_location(
    tmp_path: Path,
) -> None:
    first = _generate(tmp_path / "a", seed="0")
    second = _generate(tmp_path / "b", seed="1")
    assert first == second
    reordered = json.loads(
        _run(["-c", _REVERSED_ORDER, str(ROOT), json.dumps(SCHEMA_DIRS)], seed="4242")
    )
    assert reordered == first
    # Sanity: the runs really produced the modules (not, say, three empty directories).
    assert sorted(first["schema"]) == [
        "__init__.py",
        "multimodal.py",
        "multimodal_vllm.py",
        "py.typed",
    ]
    assert {"common.py", "features.py"} <= set(first["tests/schemas"])
    # And the output written elsewhere equals the committed output byte for byte.
    for schemas, out in (("schema", "generated"), ("tests/schemas", "tests/golden")):
        for name, text in first[schemas].items():
            assert (ROOT / out / name).read_text(encoding="utf-8") == text, f"{out}/{name}"
