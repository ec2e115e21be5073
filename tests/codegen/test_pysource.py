"""The one path from schema text to Python source (``mmcodec.codegen.pysource``)."""

from __future__ import annotations

import ast

import jinja2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmcodec.codegen import pysource
from mmcodec.codegen.pysource import Code, UnsafeText, code, comment, docstring, literal
from mmcodec.codegen.render import environment


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        ("plain", '"plain"'),
        ("it's", '"it\'s"'),
        ('say "hi"', "'say \"hi\"'"),  # more double quotes than single: single quotes
        ('it\'s "quoted"', "'it\\'s \"quoted\"'"),
        ('a"b', "'a\"b'"),
        ("a\"b'c", '"a\\"b\'c"'),  # a tie: double quotes, escaped
        ("back\\slash\n\x00é", '"back\\\\slash\\n\\x00é"'),
        (b"hi", 'b"hi"'),
        (b"\x00\xff\"'", 'b"\\x00\\xff\\"\'"'),
        (0.5, "0.5"),
        (float("inf"), 'float("inf")'),
        (float("-inf"), 'float("-inf")'),
        (3, "3"),
        (2**70, str(2**70)),
        (None, "None"),
        (True, "True"),
        ((), "()"),
        ([], "[]"),
        ({}, "{}"),
    ],
)
def test_literal_quotes_like_ruff_and_round_trips(value: object, spelled: str) -> None:
    assert literal(value) == spelled
    assert isinstance(literal(value), Code)
    assert eval(spelled) == value


_FINITE = st.floats(allow_nan=False, allow_infinity=False)


@given(st.one_of(st.text(), st.binary(), _FINITE, st.integers()))
def test_every_literal_evaluates_to_its_value(value: object) -> None:
    assert ast.literal_eval(literal(value)) == value


@given(st.text())
def test_every_docstring_evaluates_to_its_text_and_is_one_token(text: str) -> None:
    source = docstring(text)
    assert ast.literal_eval(source) == text
    assert isinstance(ast.parse(source).body[0], ast.Expr)


@given(st.text())
def test_a_comment_is_one_printable_line(text: str) -> None:
    assert comment(text).isprintable()
    tokens = list(__import__("tokenize").generate_tokens(iter([f"# {comment(text)}\n"]).__next__))
    assert tokens[0].type == __import__("tokenize").COMMENT
    assert tokens[0].string == f"# {comment(text)}"


def test_a_literal_refuses_values_it_cannot_write() -> None:
    with pytest.raises(UnsafeText, match=r"no literal for a list"):
        literal([1])


@pytest.mark.parametrize(
    "text",
    ['"', "'", "#", "\n", "\\", ";", ":", "{", "x = 1\nimport os", "Foo\n"],
)
def test_templates_refuse_text_that_is_not_code(text: str) -> None:
    """Text reaching a template without going through a literal is a compiler bug."""
    template = environment().from_string("x = {{ value }}")
    with pytest.raises(UnsafeText, match="refusing to paste"):
        template.render(value=text)
    with pytest.raises(UnsafeText, match="refusing to paste"):
        code("f(", text, ")")


def test_templates_print_code_ints_and_fragments() -> None:
    template = environment().from_string("x = {{ a }}({{ b }}, {{ c }}) {{ d | literal }}")
    rendered = template.render(a="list[Foo.Bar] | None", b=3, c=literal("q'\""), d="#")
    assert rendered == 'x = list[Foo.Bar] | None(3, "q\'\\"") "#"'


def test_macro_output_is_printed_as_written() -> None:
    env = environment()
    template = env.from_string("{% macro m(v) %}y = {{ v | literal }}{% endmacro %}{{ m('a\"b') }}")
    assert template.render() == "y = 'a\"b'"


def test_fragments_are_what_can_open_no_string_comment_or_statement() -> None:
    assert pysource.is_fragment("_b.expect_uint(v_x, ctx) | None")
    assert pysource.is_fragment("tuple[int, ...]")
    for char in "\"'#\\\n\r;:{}@`$":
        assert not pysource.is_fragment(f"a{char}b"), char
    assert isinstance(environment(), jinja2.Environment)
