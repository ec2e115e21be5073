"""The compiler's Rust backend (``mmcodec generate --lang rust``).

* Golden files: ``rust/multimodal/src/generated`` (from ``schema/``) and
  ``tests/golden_rust`` (from ``tests/schemas/``) are what the compiler writes now;
  output is deterministic.
* Formatting: rustfmt finds nothing to change, also when every name is long enough to
  make each line shape break (the renderer lays lines out itself, with no formatter).
* Escaping: schema text reaches Rust only through ``codegen/rust/source.py``: literals
  that hold exactly the text, comments that stay one line; a hypothesis property puts
  text in every slot a schema has and checks, with a Rust lexer, that none of it leaves
  its literal or comment.
* Names Rust cannot spell, or that would shadow what generated code uses, are renamed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from mmcodec.codegen.cli import main
from mmcodec.codegen.output import generate_command
from mmcodec.codegen.rust import source
from mmcodec.codegen.rust.output import plan_rust_output
from mmcodec.codegen.rust.render import DEFAULT_COMMAND, environment
from mmcodec.codegen.rust.source import UnsafeText, byte_string, comment, doc, ident, string
from mmcodec.codegen.validate import compile_schemas
from tests.rust.rust_lexer import tokens

ROOT = Path(__file__).resolve().parents[2]
TREES = [("schema", "rust/multimodal/src/generated"), ("tests/schemas", "tests/golden_rust")]


def _plan(schemas: Path, root: Path = ROOT, command: str = DEFAULT_COMMAND) -> dict[str, str]:
    modules = compile_schemas(sorted(schemas.glob("*.yaml")), root)
    return plan_rust_output(modules, command).files


# -- golden files and determinism ------------------------------------------------------


@pytest.mark.parametrize(("schemas", "out"), TREES)
def test_the_committed_rust_is_what_the_compiler_writes(schemas: str, out: str) -> None:
    plan = _plan(ROOT / schemas, command=generate_command(schemas, out, "", lang="rust"))
    present = {p.name for p in (ROOT / out).iterdir()}
    assert present == set(plan), f"{out} holds other files; run: make generate"
    for name, content in plan.items():
        assert (ROOT / out / name).read_text() == content, (
            f"{out}/{name} is stale; run: make generate"
        )


def test_rust_output_depends_only_on_the_schemas(tmp_path: Path) -> None:
    """Not on PYTHONHASHSEED, the order the files are given in, or where the tree is."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from mmcodec.codegen.rust.output import plan_rust_output\n"
        "from mmcodec.codegen.validate import compile_schemas\n"
        "root = Path(sys.argv[1])\n"
        "files = sorted((root / 'tests/schemas').glob('*.yaml'), reverse=True)\n"
        "print(json.dumps(plan_rust_output(compile_schemas(files, root)).files))\n"
    )
    shutil.copytree(ROOT / "tests/schemas", tmp_path / "tests/schemas")
    outputs = []
    for seed, root in (("1", ROOT), ("2", tmp_path)):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", script, str(root)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1] == _plan(ROOT / "tests/schemas")


def test_a_bindings_file_adds_no_rust_module() -> None:
    """schema/multimodal.vllm.yaml binds the same wire to vLLM's Python classes."""
    assert sorted(_plan(ROOT / "schema")) == ["mod.rs", "multimodal.rs"]


# -- formatting ---------------------------------------------------------------------------


def _lengthen(
    schema: dict[str, Any], suffix: str, types: set[str], members: set[str]
) -> dict[str, Any]:
    """The schema with ``suffix`` appended to every type, field, tag and enum member name
    (and to the members that defaults name)."""
    pattern = re.compile(r"\b(" + "|".join(sorted(types, key=len, reverse=True)) + r")\b")

    def retype(spec: Any) -> Any:
        if isinstance(spec, str):
            return pattern.sub(lambda m: m[1] + suffix, spec)
        if isinstance(spec, dict) and "type" in spec:
            default = spec.get("default")
            if isinstance(default, str) and default in members:
                spec = {**spec, "default": default + suffix.upper()}
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
            definition["union"] = [
                {
                    **v,
                    "type": retype(v["type"]),
                    "tag": v["tag"] + suffix if isinstance(v["tag"], str) else v["tag"],
                }
                for v in definition["union"]
            ]
        if "mapping" in definition:
            definition["mapping"] = {k: retype(v) for k, v in definition["mapping"].items()}
        if "enum" in definition:
            definition["enum"] = {m + suffix.upper(): v for m, v in definition["enum"].items()}
        renamed[name + suffix] = definition
    return {**schema, "types": renamed}


def write_long_named(folder: Path, length: int) -> Path:
    """tests/schemas' common, features and enums schemas with every name ``length`` longer."""
    suffix = "_" + "Long" * (length // 4)
    loaded = {
        n: yaml.safe_load((ROOT / "tests/schemas" / n).read_text())
        for n in ("common.yaml", "features.yaml", "enums.yaml")
    }
    types = {t for schema in loaded.values() for t in schema["types"]}
    members = {
        m for schema in loaded.values() for t in schema["types"].values() for m in t.get("enum", ())
    }
    schemas = folder / "schemas"
    schemas.mkdir(parents=True)
    for name, schema in loaded.items():
        text = yaml.safe_dump(_lengthen(schema, suffix, types, members), sort_keys=False)
        (schemas / name).write_text(text)
    return schemas


def rustfmt_check(files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rustfmt", "--edition", "2021", "--check", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("length", [0, 8, 16, 24, 32, 40])
def test_rustfmt_finds_nothing_to_change_with_long_names(tmp_path: Path, length: int) -> None:
    schemas = write_long_named(tmp_path, length)
    files = _plan(schemas, tmp_path)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    module = files["features.rs"]
    if length >= 24:  # long enough that some lines break
        assert re.search(r": s\n +\.field", module) or "\n    for " in module
        assert "const MEMBERS: &'static [Self] = &[\n" in files["enums.rs"]
    result = rustfmt_check([tmp_path / name for name in files])
    assert result.returncode == 0, result.stdout[:4000] + result.stderr


# -- escaping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain",
        'say "hi"',
        "back\\slash",
        "nul\x00",
        "tab\tcr\r\nlf",
        "\u2028\u202e",
        "é✓",
        "*/",
    ],
)
def test_string_literals_hold_exactly_their_text(text: str) -> None:
    literal = string(text)
    assert source.parse_string(literal) == text
    assert "\n" not in literal and "\r" not in literal and "\u202e" not in literal


@given(st.text())
def test_every_string_literal_parses_back(text: str) -> None:
    literal = string(text)
    assert source.parse_string(literal) == text
    (token,) = tokens(literal)
    assert token.kind == "string"


@given(st.binary())
def test_every_byte_string_parses_back(data: bytes) -> None:
    literal = byte_string(data)
    assert source.parse_byte_string(literal) == data
    (token,) = tokens(literal)
    assert token.kind == "byte_string"


@given(st.text())
def test_comments_and_docs_stay_comments(text: str) -> None:
    assert [t.kind for t in tokens("// " + comment(text))] == ["comment"]
    rows = doc(text, indent=4).split("\n")
    assert len(rows) == text.count("\n") + 1
    assert all(t.kind == "comment" for t in tokens(doc(text)))
    assert all(row.startswith("    ///") for row in rows)


def test_identifiers_are_raw_for_keywords_and_refused_otherwise() -> None:
    assert ident("type") == "r#type"
    assert ident("match") == "r#match"
    assert ident("value") == "value"
    for bad in ("self", "Self", "crate", "x y", "x\n", "1x", "é"):
        with pytest.raises(UnsafeText):
            ident(bad)


def test_the_templates_print_nothing_but_code() -> None:
    template = environment().from_string("{{ value }}")
    assert template.render(value=string('a"b')) == '"a\\"b"'
    assert template.render(value="plain_fragment") == "plain_fragment"
    for raw in ('"; }', "x // y", "a\nb", "Vec<u8>"):
        with pytest.raises(UnsafeText):
            template.render(value=raw)
    with pytest.raises(UnsafeText):
        source.code('"')
    with pytest.raises(UnsafeText):  # an undefined value is no code either
        template.render()


OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: characters no template or name uses


def _hostile_schema(text: str) -> dict[str, Any]:
    """``text`` in every slot that takes text: docs of the schema, of a struct, a field,
    a union, an enum and a member, a str default, a bytes default, a pattern, str union
    tags, str enum values."""
    return {
        "schema": "hostile",
        "version": 1,
        "doc": text,
        "types": {
            "A": {
                "doc": text,
                "struct": {
                    "name": {
                        "type": "str",
                        "default": text,
                        "pattern": re.escape(text),
                        "doc": text,
                    },
                    "raw": {"type": "bytes", "default": text.encode("utf-8")},
                },
            },
            "B": {"struct": {"x": "int"}},
            "E": {"doc": text, "enum": {"A": {"value": text, "doc": text}, "B": text + "!"}},
            "N": {"doc": text, "enum": {"A": {"value": 1, "doc": text}}},
            "U": {
                "doc": text,
                "union": [{"tag": text, "type": "A"}, {"tag": text + "!", "type": "B"}],
            },
        },
    }


def generate_hostile(folder: Path, file_name: str, text: str) -> str:
    schemas = folder / "schema"
    schemas.mkdir()
    (schemas / file_name).write_text(yaml.safe_dump(_hostile_schema(text)), encoding="utf-8")
    return _plan(schemas, folder)["hostile.rs"]


def assert_confined(module: str, text: str) -> None:
    """Every token that holds a marker is a literal of exactly the text (or the pattern,
    or the tag with its "!") or a comment; no code token holds one."""
    allowed = {text, text + "!", re.escape(text)}
    seen = False
    for token in tokens(module):
        if OPEN not in token.text and CLOSE not in token.text:
            continue
        seen = True
        if token.kind == "comment":
            continue
        if token.kind == "string":
            assert source.parse_string(token.text) in allowed, token
        elif token.kind == "byte_string":
            assert source.parse_byte_string(token.text) == text.encode("utf-8"), token
        else:
            raise AssertionError(f"schema text outside a literal or comment: {token}")
    assert seen, "the text should appear in the module"


_TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=24).map(
    lambda core: f"{OPEN}{core}{CLOSE}"
)
_FILE_NAME = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"),
    max_size=20,
).map(lambda core: f"{OPEN}{core}{CLOSE}.yaml")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, file_name=_FILE_NAME)
@example(text=f'{OPEN}"; }} fn evil() {{ }} //{CLOSE}', file_name=f"{OPEN}\n*/{CLOSE}.yaml")
@example(text=f"{OPEN}*/ /* \r\n\u2028\u202e\\{CLOSE}", file_name=f"{OPEN}\r\n{CLOSE}.yaml")
@example(text=f'{OPEN}r#"x"#{CLOSE}', file_name=f"{OPEN}'a{CLOSE}.yaml")
def test_schema_text_stays_inside_literals_and_comments(text: str, file_name: str) -> None:
    assume(len(file_name.encode("utf-8")) < 250)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            module = generate_hostile(Path(scratch), file_name, text)
        except OSError:
            assume(False)  # a name this file system refuses
            raise
    assert_confined(module, text)
    source_line = next(line for line in module.splitlines() if line.startswith("// source: "))
    assert source_line == f"// source: schema/{comment(file_name)}"


# -- names -----------------------------------------------------------------------------------

AWKWARD = {
    "schema": "awkward",
    "version": 1,
    "types": {
        "Option": {"struct": {"type": "int", "self": "str", "self_": "bool", "fn": "float"}},
        "Tensor": {"struct": {"match": "tensor", "data": "optional[Option]"}},
        "Self": {"union": [{"tag": 0, "type": "Option"}, {"tag": 1, "type": "Tensor"}]},
        "u8": {"mapping": {"key": "str", "value": "Self"}},
        "Segment": {
            "enum": {"IMAGE": "i", "Image": "j", "SELF": "s", "HTTPServer": "h", "rgb8": "r"}
        },
        "Uses": {"struct": {"kind": {"type": "Segment", "default": "Image"}}},
    },
}


def test_names_rust_cannot_spell_or_that_shadow_are_renamed(tmp_path: Path) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "awkward.yaml").write_text(yaml.safe_dump(AWKWARD, sort_keys=False))
    module = _plan(tmp_path / "schema", tmp_path)["awkward.rs"]
    for declaration in (
        "pub struct Option_ {",
        "pub r#type: i64,",
        "pub self__: String,",
        "pub self_: bool,",
        "pub r#fn: f64,",
        "pub struct Tensor_<'a> {",
        "pub r#match: Tensor<'a>,",
        "pub data: Option<Option_>,",
        "pub enum Self_<'a> {",
        "pub struct u8_<'a>(pub IndexMap<String, Arc<Self_<'a>>>);",
        'const NAME: &\'static str = "Option";',  # the wire keeps the schema's names
        '0 => "type",',
        # Enum members in UpperCamelCase; two that would meet, or Self, take their position.
        'pub enum Segment_ {\n    /// `"i"`.\n    Image0,\n    /// `"j"`.\n    Image1,\n'
        '    /// `"s"`.\n    Self2,\n    /// `"h"`.\n    HttpServer,\n    /// `"r"`.\n    Rgb8,\n}',
        'Self::Image1 => "j",',
        "kind: Segment_::Image1,",  # the default names the member
    ):
        assert declaration in module, declaration


# -- the command line ----------------------------------------------------------------------


def test_rust_output_needs_its_own_folder_and_no_package(tmp_path: Path) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "awkward.yaml").write_text(yaml.safe_dump(AWKWARD, sort_keys=False))
    base = ["--root", str(tmp_path), "generate", "--lang", "rust", "--schemas", "schema"]
    assert main(base) == 2  # --out is required
    assert main([*base, "--out", "src/gen", "--package", "x"]) == 2
    assert main([*base, "--out", "src/gen"]) == 0
    assert sorted(p.name for p in (tmp_path / "src/gen").iterdir()) == ["awkward.rs", "mod.rs"]
    check = ["--root", str(tmp_path), "check", "--lang", "rust", "--schemas", "schema"]
    assert main([*check, "--out", "src/gen"]) == 0
    (tmp_path / "src/gen/awkward.rs").write_text("// @generated by mmcodec, edited\n")
    (tmp_path / "src/gen/notes.rs").write_text("// mine\n")
    assert main([*check, "--out", "src/gen"]) == 1


def test_check_names_the_command_that_fixes_rust_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "awkward.yaml").write_text(yaml.safe_dump(AWKWARD, sort_keys=False))
    args = ["--root", str(tmp_path), "check", "--lang", "rust", "--schemas", "schema"]
    assert main([*args, "--out", "gen"]) == 1
    out = capsys.readouterr().out
    assert "missing: " in out and "gen/mod.rs" in out
    assert "--lang rust --schemas schema --out gen" in out
