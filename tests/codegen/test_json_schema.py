"""The schema language as JSON Schema (for editors): committed, current and complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmcodec.codegen import validate
from mmcodec.codegen.cli import main
from mmcodec.codegen.jsonschema import schema_language

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "schema" / "mmcodec.schema.json"
VALID_SCHEMAS = [
    ROOT / "schema" / "multimodal.yaml",
    *sorted((ROOT / "tests/schemas").glob("*.yaml")),
]


def test_committed_json_schema_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["json-schema"]) == 0
    printed = capsys.readouterr().out
    assert COMMITTED.read_text(encoding="utf-8") == printed, (
        "schema/mmcodec.schema.json is stale; run: make generate"
    )
    assert json.loads(printed) == schema_language()


def test_json_schema_knows_exactly_the_keys_the_validator_accepts() -> None:
    meta = schema_language()
    defs = meta["$defs"]
    assert sorted(meta["properties"]) == sorted(validate.FILE_KEYS)
    assert sorted(defs["typeDef"]["properties"]) == sorted(validate.TYPE_KEYS)
    field_forms = defs["field"]["oneOf"]
    assert sorted(field_forms[1]["properties"]) == sorted(validate.FIELD_KEYS)
    assert sorted(defs["variant"]["properties"]) == sorted(validate.VARIANT_KEYS)
    mapping = defs["typeDef"]["properties"]["mapping"]
    assert sorted(mapping["properties"]) == sorted(validate.MAPPING_KEYS)
    member = defs["typeDef"]["properties"]["enum"]["additionalProperties"]["oneOf"][1]
    assert sorted(member["properties"]) == sorted(validate.MEMBER_KEYS)
    assert meta["required"] == ["schema", "version", "types"]


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", VALID_SCHEMAS, ids=[p.name for p in VALID_SCHEMAS])
def test_valid_schemas_satisfy_the_json_schema(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(_load(path), schema_language())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("unknown_key.yaml", "Additional properties are not allowed ('tpyes' was unexpected)"),
        ("missing_version.yaml", "'version' is a required property"),
    ],
)
def test_json_schema_rejects_invalid_schemas(name: str, message: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError) as info:
        jsonschema.validate(_load(ROOT / "tests/codegen/invalid" / name), schema_language())
    assert info.value.message == message


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({}, "{} should be non-empty"),
        ({"ON": True}, "True is not valid under any of the given schemas"),
        ({"_x": 1}, "'_x' does not match '^[A-Za-z][A-Za-z0-9_]*$'"),
        ({"X": {"valeu": 1}}, "{'valeu': 1} is not valid under any of the given schemas"),
    ],
)
def test_json_schema_checks_enum_members(members: dict[str, Any], message: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    document = {"schema": "e", "version": 1, "types": {"E": {"enum": members}}}
    with pytest.raises(jsonschema.ValidationError) as info:
        jsonschema.validate(document, schema_language())
    assert info.value.message == message
