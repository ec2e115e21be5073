"""Check schema files and lower them to the IR, reporting every error at once.

Each check appends a :class:`~mmcodec.codegen.diagnostics.Diagnostic` with file:line:col
and goes on, so one run shows every problem. Only when no diagnostic was produced is the
IR returned. One module per job:

* :mod:`.compile` runs the stage: read every file and what it imports, lower each, then
  the checks that need the whole schema;
* :mod:`.files` reads a file's top level (name, version, imports, exports, declarations);
* :mod:`.names` holds the language's key tables and naming rules;
* :mod:`.types` resolves type expressions; :mod:`.structs`, :mod:`.unions`,
  :mod:`.mappings` and :mod:`.enums` lower one kind of declaration each;
* :mod:`.checks` holds the whole-schema checks (tags, recursion, Python identities);
* :mod:`.context` the diagnostics being collected and the helpers every check shares.
"""

from mmcodec.codegen.validate.compile import compile_schemas
from mmcodec.codegen.validate.names import (
    FIELD_KEYS,
    FILE_KEYS,
    MAPPING_KEYS,
    MEMBER_KEYS,
    RESERVED_SCHEMA_NAMES,
    RESERVED_TYPE_NAMES,
    TYPE_KEYS,
    VARIANT_KEYS,
)
from mmcodec.codegen.validate.types import render_type

__all__ = [
    "FIELD_KEYS",
    "FILE_KEYS",
    "MAPPING_KEYS",
    "MEMBER_KEYS",
    "RESERVED_SCHEMA_NAMES",
    "RESERVED_TYPE_NAMES",
    "TYPE_KEYS",
    "VARIANT_KEYS",
    "compile_schemas",
    "render_type",
]
