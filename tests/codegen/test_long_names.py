"""Generated code stays formatted and clean when a schema's names are long.

The test schemas use short names, so most of their statements fit on one line. Here
every type and field of ``features.yaml`` and ``common.yaml`` gets a long suffix, at a
few lengths around where lines start to break, up to names of some 60 characters;
ruff, with the project's settings, must find nothing to reformat or fix in what the
compiler writes. (Past that, where a name no longer fits in a line even on its own,
ruff's choices are not all followed; the code is still valid and clean.)
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmcodec.codegen.output import plan_output, write
from mmcodec.codegen.validate import compile_schemas

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ("common.yaml", "features.yaml")


def _lengthen(schema: dict[str, Any], suffix: str, types: set[str]) -> dict[str, Any]:
    """The schema with ``suffix`` appended to every type name and field name."""
    pattern = re.compile(r"\b(" + "|".join(sorted(types, key=len, reverse=True)) + r")\b")

    def retype(spec: Any) -> Any:
        if isinstance(spec, str):
            return pattern.sub(lambda m: m[1] + suffix, spec)
        if isinstance(spec, dict) and "type" in spec:
            return {**spec, "type": retype(spec["type"])}
        return spec

    renamed: dict[str, Any] = {}
    for name, definition in schema["types"].items():
        definition = dict(definition)
        if definition.get("struct"):
            definition["struct"] = {
                f"{field}_{suffix.lower()}": retype(spec)
                for field, spec in definition["struct"].items()
            }
        if "union" in definition:
            definition["union"] = [{**v, "type": retype(v["type"])} for v in definition["union"]]
        if "mapping" in definition:
            definition["mapping"] = {k: retype(v) for k, v in definition["mapping"].items()}
        renamed[name + suffix] = definition
    return {**schema, "types": renamed}


@pytest.mark.parametrize("length", [8, 16, 20, 24, 28, 32, 40, 48])
def test_ruff_finds_nothing_to_change_with_long_names(tmp_path: Path, length: int) -> None:
    from ruff.__main__ import find_ruff_bin  # type: ignore[import-untyped]  # the dev extra

    suffix = "_" + "Long" * (length // 4)
    loaded = {n: yaml.safe_load((ROOT / "tests/schemas" / n).read_text()) for n in SCHEMAS}
    types = {t for schema in loaded.values() for t in schema["types"]}
    (tmp_path / "schemas").mkdir()
    for name, schema in loaded.items():
        text = yaml.safe_dump(_lengthen(schema, suffix, types), sort_keys=False)
        (tmp_path / "schemas" / name).write_text(text)
    modules = compile_schemas(sorted((tmp_path / "schemas").glob("*.yaml")), tmp_path)
    out = tmp_path / "pkg" / "codecs"
    write(plan_output(modules, "pkg.codecs"), out)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")  # the project's ruff rules
    longest = max(len(line) for line in (out / "features.py").read_text().splitlines())
    assert longest > 100  # the names are long enough to make lines break

    ruff = find_ruff_bin()
    settings = ["--config", "lint.isort.known-first-party = ['mmcodec', 'pkg']"]
    # As for generated/: a long message string cannot be split.
    settings += ["--config", "lint.extend-per-file-ignores = {'pkg/*' = ['E501']}"]
    for command in (["format", "--check", "--diff"], ["check", "--no-fix", *settings]):
        result = subprocess.run(
            [ruff, *command, "pkg"], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
