"""A schema cannot put code into a generated module: its file name and every string in it
reach the module only as literals, docstrings and comments (issue 21, item 1).

The property: text between two marker characters, placed in every slot a schema has
for text, appears in the generated module only inside one string or comment token that
holds all of it, and every string token holding it evaluates to exactly that text. Text
that broke out of its literal would leave a marker outside (or split across) tokens.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from mmcodec.codegen import pysource
from mmcodec.codegen.cli import main
from mmcodec.codegen.output import plan_output
from mmcodec.codegen.validate import compile_schemas

OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: characters no template or name uses
REPRODUCER_NAME = "x\n'''\n#.yaml"
REPRODUCER_DOC = "''';__import__('pathlib').Path('PWNED').touch()#"


def _schema(text: str) -> dict[str, object]:
    """A schema with ``text`` in every slot that takes text: docs of the schema, of a
    struct, a field and a union, a str default, a pattern, a str union tag."""
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
            "U": {
                "doc": text,
                "union": [{"tag": text, "type": "A"}, {"tag": text + "!", "type": "B"}],
            },
        },
    }


def _generate(tmp: Path, file_name: str, text: str) -> str:
    schema_dir = tmp / "schema"
    schema_dir.mkdir()
    path = schema_dir / file_name
    path.write_text(yaml.safe_dump(_schema(text)), encoding="utf-8")
    modules = compile_schemas([path], tmp)
    return plan_output(modules, "out").files["hostile.py"]


def _tokens_holding(source: str, marker: str) -> list[tokenize.TokenInfo]:
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    return [t for t in tokens if marker in t.string]


def _assert_confined(source: str, text: str, file_name: str) -> None:
    """``text`` (from the schema) and ``file_name`` stay in their tokens."""
    compile(source, "hostile.py", "exec")
    holding = _tokens_holding(source, OPEN)
    assert holding, "the text should appear in the module"
    for token in holding:
        if token.type == tokenize.COMMENT:  # the header's source line, only
            assert token.string == f"# source: schema/{pysource.comment(file_name)}", token
            continue
        assert token.type == tokenize.STRING, token
        value = eval(token.string, {"__builtins__": {}})  # a literal, proven by compile()
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        allowed = {text, text + "!", re.escape(text)}  # docs, defaults, tags, the pattern
        assert value in allowed or value.startswith(f"{text}\n\n"), (token.string, text)


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]),
    max_size=24,
).map(lambda core: f"{OPEN}{core}{CLOSE}")
_FILE_NAME = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"),
    max_size=20,
).map(lambda core: f"{OPEN}{core}{CLOSE}.yaml")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, file_name=_FILE_NAME)
@example(text=f"{OPEN}{REPRODUCER_DOC}{CLOSE}", file_name=f"{OPEN}{REPRODUCER_NAME}{CLOSE}")
@example(text=f'{OPEN}"""; import os #\n\r\x00\u2028\\{CLOSE}', file_name=f"{OPEN}\r\n{CLOSE}.yaml")
@example(text=f'{OPEN}x"{CLOSE}', file_name=f"{OPEN}-*- coding: utf-7 -*-{CLOSE}.yaml")
def test_schema_text_stays_inside_literals_and_comments(text: str, file_name: str) -> None:
    assume(len(file_name.encode("utf-8")) < 250)
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        try:
            source = _generate(Path(scratch), file_name, text)
        except OSError:
            assume(False)  # a name this file system refuses
            raise
    _assert_confined(source, text, file_name)
    header = source.split("\n")[:2]
    assert all(OPEN not in line for line in header), "lines 1-2 can declare an encoding"


def test_the_reproducer_generates_a_module_that_imports_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """The exploit of issue 21: the file name opens a string that a union's doc closes."""
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / REPRODUCER_NAME).write_text(
        yaml.safe_dump(
            {
                "schema": "evil",
                "version": 1,
                "types": {
                    "A": {"struct": {"x": "int"}},
                    "B": {"struct": {"y": "int"}},
                    "U": {
                        "doc": REPRODUCER_DOC,
                        "union": [{"tag": 0, "type": "A"}, {"tag": 1, "type": "B"}],
                    },
                },
            }
        ),
        encoding="utf-8",
    )
    assert main(["--root", str(tmp_path), "generate", "--schemas", "schema", "--out", "out"]) == 0
    assert main(["--root", str(tmp_path), "check", "--schemas", "schema", "--out", "out"]) == 0
    probe = "import out.evil as m; print(repr(m.__doc__.split(chr(10))[0])); print(m.U)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "PWNED").exists()
    source = (tmp_path / "out" / "evil.py").read_text(encoding="utf-8")
    assert "# source: schema/x\\n'''\\n#.yaml\n" in source
    assert f"{pysource.docstring(REPRODUCER_DOC)}" in source


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain",
        'ends in a quote"',
        '"""',
        'a""',
        "back\\slash",
        "nul\x00",
        "tab\tcr\r",
        "\u2028",
    ],
)
def test_docstrings_evaluate_to_their_text(text: str) -> None:
    assert eval(pysource.docstring(text)) == text
