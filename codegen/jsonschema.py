"""The schema language itself, as JSON Schema, so editors can check schema YAML."""

from __future__ import annotations

import json
from typing import Any

BINDING_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
"""An import path, ``package.module.Name``."""

TYPE_EXPRESSION = {
    "type": "string",
    "description": (
        "A type: int, float, bool, str, bytes, tensor, nested_tensors, slice, a type name "
        "(module.Name for imported ones), list[T], tuple[T, ...], tuple[A, B], dict[K, V] "
        "(K is str, int or an enum), optional[T]."
    ),
    "pattern": r"^[A-Za-z_][A-Za-z0-9_.\[\], ]*$",
}


def schema_language() -> dict[str, Any]:
    field = {
        "description": "A field: a type string, or a mapping with the type and its options.",
        "oneOf": [
            {"$ref": "#/$defs/typeExpression"},
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["type"],
                "properties": {
                    "type": {"$ref": "#/$defs/typeExpression"},
                    "default": {
                        "description": (
                            "A literal of the field's type; containers only [] or {}; "
                            "for an enum, a member's name."
                        ),
                    },
                    "doc": {"type": "string"},
                    "ge": {"type": "number"},
                    "gt": {"type": "number"},
                    "le": {"type": "number"},
                    "lt": {"type": "number"},
                    "min_length": {"type": "integer", "minimum": 0},
                    "max_length": {"type": "integer", "minimum": 0},
                    "pattern": {"type": "string"},
                },
            },
        ],
    }
    variant = {
        "type": "object",
        "additionalProperties": False,
        "required": ["tag", "type"],
        "properties": {
            "tag": {
                "description": (
                    "The variant's tag on the wire: unique in the union, all ints or all strings."
                ),
                "oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}],
            },
            "type": {"$ref": "#/$defs/typeExpression"},
            "doc": {"type": "string"},
        },
    }
    member_value = {
        "description": "What travels for the member: all ints or all strings, each once.",
        "oneOf": [
            {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
            {"type": "string", "minLength": 1},
        ],
    }
    enum = {
        "description": "Member name -> its value, or {value, doc}.",
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
        "additionalProperties": {
            "oneOf": [
                member_value,
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["value"],
                    "properties": {"value": member_value, "doc": {"type": "string"}},
                },
            ]
        },
    }
    type_def = {
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "properties": {
            "doc": {"type": "string"},
            "bind": {
                "type": "string",
                "description": (
                    "Import path of an existing class to build and read instead of a generated "
                    "one (for an enum, an Enum class with exactly the schema's members)."
                ),
                "pattern": BINDING_PATTERN,
            },
            "struct": {
                "description": "Fields in wire order; fields with defaults come last.",
                "oneOf": [
                    {"type": "object", "additionalProperties": {"$ref": "#/$defs/field"}},
                    {"type": "null"},
                ],
            },
            "union": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/variant"}},
            "mapping": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "value"],
                "properties": {
                    "key": {"$ref": "#/$defs/typeExpression"},
                    "value": {"$ref": "#/$defs/typeExpression"},
                },
            },
            "enum": enum,
        },
        "oneOf": [
            {"required": ["struct"]},
            {"required": ["union"]},
            {"required": ["mapping"]},
            {"required": ["enum"]},
        ],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "mmcodec.schema.json",
        "title": "mmcodec schema file",
        "type": "object",
        "additionalProperties": False,
        "required": ["schema", "version", "types"],
        "properties": {
            "schema": {
                "type": "string",
                "pattern": "^[a-z][a-z0-9_]*$",
                "description": "The schema's name: generated module name and wire identity.",
            },
            "version": {"type": "integer", "minimum": 0, "description": "Major version."},
            "doc": {"type": "string"},
            "imports": {"type": "array", "items": {"type": "string"}},
            "exports": {
                "type": "array",
                "description": "Existing names the generated module re-exports.",
                "items": {"type": "string", "pattern": BINDING_PATTERN},
            },
            "types": {
                "type": "object",
                "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                "additionalProperties": {"$ref": "#/$defs/typeDef"},
            },
        },
        "$defs": {
            "typeExpression": TYPE_EXPRESSION,
            "field": field,
            "variant": variant,
            "typeDef": type_def,
        },
    }


def schema_language_json() -> str:
    return json.dumps(schema_language(), indent=2, sort_keys=True) + "\n"
