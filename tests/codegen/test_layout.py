"""``codegen/layout.py``: long statements laid out as ``ruff format`` lays them out.

The examples pin the shapes the templates emit; the last test checks a few thousand
generated statements against ruff itself (the project's pinned version, from the
dev extra): ruff must leave the layout unchanged.
"""

from __future__ import annotations

import ast
import random
import subprocess
import textwrap
from collections.abc import Callable

import pytest

from mmcodec.codegen.layout import (
    Group,
    Line,
    Text,
    brackets,
    long_lines,
    parenthesize_if_breaks,
    render,
    statement,
)


def _lines(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


# -- the document printer --------------------------------------------------------


def test_group_prints_flat_when_it_fits_and_broken_when_not() -> None:
    doc = Group((Text("a"), Line(), Text("b")))
    assert render(doc, 0, width=3) == "a b"
    assert render(doc, 0, width=2) == "a\nb"


def test_brackets_hug_then_explode_with_a_trailing_comma() -> None:
    call = (Text("fff"), brackets("(", [Text("xxxx"), Text("yyyy")], ")"))
    assert render(call, 0, width=15) == "fff(xxxx, yyyy)"
    assert render(call, 0, width=14) == "fff(\n    xxxx, yyyy\n)"
    assert render(call, 0, width=13) == "fff(\n    xxxx,\n    yyyy,\n)"
    single = (Text("f"), brackets("(", [Text("xxxxxxxxxx")], ")"))
    assert render(single, 0, width=8) == "f(\n    xxxxxxxxxx\n)"  # no comma after one item
    assert render((Text("f"), brackets("(", [], ")")), 0) == "f()"


def test_parentheses_appear_only_when_broken() -> None:
    doc = (Text("xyz = "), parenthesize_if_breaks(Group((Text("a"), Line(), Text("| b")))))
    assert render(doc, 0, width=11) == "xyz = a | b"
    assert render(doc, 0, width=10) == "xyz = (\n    a | b\n)"
    assert render(doc, 0, width=8) == "xyz = (\n    a\n    | b\n)"


# -- statements, in the shapes the templates emit ----------------------------------


def test_a_line_that_fits_is_unchanged() -> None:
    line = "    return _b.values_equal(self.x, other.x)"
    assert statement(line) == line


def test_signature_hugs_its_parameters() -> None:
    line = (
        "def _MultiModalFieldElem_to_wire(obj: MultiModalFieldElem, ctx: _EncodeContext)"
        " -> _MultiModalFieldElemWire | _wire.NonNegative:"
    )
    assert statement(line) == _lines(
        """
        def _MultiModalFieldElem_to_wire(
            obj: MultiModalFieldElem, ctx: _EncodeContext
        ) -> _MultiModalFieldElemWire | _wire.NonNegative:
        """
    )


def test_class_header_splits_its_bases() -> None:
    line = (
        "class _Event_slice_2d_ofWire(msgspec.Struct, array_like=True, gc=False, frozen=True,"
        ' tag="slice-of"):'
    )
    assert statement(line) == _lines(
        """
        class _Event_slice_2d_ofWire(
            msgspec.Struct, array_like=True, gc=False, frozen=True, tag="slice-of"
        ):
        """
    )


def test_equality_of_two_fields_splits_the_last_call() -> None:
    line = (
        "        return _b.values_equal(self.center, other.center)"
        " and _b.values_equal(self.radius, other.radius)"
    )
    assert statement(line) == _lines(
        """
        return _b.values_equal(self.center, other.center) and _b.values_equal(
            self.radius, other.radius
        )
        """
    ).replace("\n", "\n        ").join(["        ", ""])


def test_equality_of_more_fields_is_one_comparison_per_line() -> None:
    fields = ["offset", "length", "is_embed"]
    line = "        return " + " and ".join(f"_b.values_equal(self.{f}, other.{f})" for f in fields)
    assert statement(line).splitlines() == [
        "        return (",
        "            _b.values_equal(self.offset, other.offset)",
        "            and _b.values_equal(self.length, other.length)",
        "            and _b.values_equal(self.is_embed, other.is_embed)",
        "        )",
    ]


def test_union_alias_is_parenthesized_then_one_variant_per_line() -> None:
    short = (
        "_EventWire: TypeAlias = _ClickWire | _KeyWire | _Event_tickWire | _Event_slice_2d_ofWire"
    )
    assert statement(short + " | _wire.StrTagRef").splitlines() == [
        "_EventWire: TypeAlias = (",
        "    _ClickWire | _KeyWire | _Event_tickWire | _Event_slice_2d_ofWire | _wire.StrTagRef",
        ")",
    ]
    many = "_ValueWire: TypeAlias = " + " | ".join(f"_Value_{i}Wire" for i in range(10))
    assert statement(many).splitlines() == [
        "_ValueWire: TypeAlias = (",
        "    _Value_0Wire",
        *(f"    | _Value_{i}Wire" for i in range(1, 10)),
        ")",
    ]


def test_conditional_expression_is_parenthesized() -> None:
    line = (
        "        v_maybe_list = None if obj.maybe_list is None"
        " else _list_optional_int_to_wire(obj.maybe_list, ctx)"
    )
    assert statement(line).splitlines() == [
        "        v_maybe_list = (",
        "            None if obj.maybe_list is None"
        " else _list_optional_int_to_wire(obj.maybe_list, ctx)",
        "        )",
    ]


def test_call_with_a_long_head_is_parenthesized_in_an_assignment() -> None:
    name = "a" * 40
    line = f"        v_{name} = _common._{'B' * 40}_from_wire(obj.{name}, ctx)"
    assert statement(line).splitlines() == [
        f"        v_{name} = (",
        f"            _common._{'B' * 40}_from_wire(",
        f"                obj.{name}, ctx",
        "            )",
        "        )",
    ]


def test_raise_keeps_its_cause_after_the_call() -> None:
    line = (
        '        raise EncodeError(f"expected a MultiModalFieldElem, got {type(obj).__name__}'
        ' ({e})") from None'
    )
    assert statement(line).splitlines() == [
        "        raise EncodeError(",
        '            f"expected a MultiModalFieldElem, got {type(obj).__name__} ({e})"',
        "        ) from None",
    ]


def test_list_item_keeps_its_comma() -> None:
    names = ("SharedField", "_SharedFieldWire", "_SharedField_to_wire", "_SharedField_from_wire")
    line = '        _codec.NamedType("SharedField", ' + ", ".join(names) + "),"
    assert statement(line, item=True).splitlines() == [
        "        _codec.NamedType(",
        '            "SharedField",',
        *(f"            {n}," for n in names),
        "        ),",
    ]


def test_unknown_shapes_and_comments_and_docstrings_are_left_alone() -> None:
    long = "x" * 120
    assert statement(f"    for i in {long}:") == f"    for i in {long}:"
    source = f'"""{long}\n{long}"""\nx = f({long}, {long})  # keep\n'
    assert long_lines(source) == source


# -- against ruff itself ---------------------------------------------------------


def _name(rng: random.Random, lo: int = 1, hi: int = 45) -> str:
    return rng.choice("ABCDEFGH") + "".join(
        rng.choice("abcdefgh_") for _ in range(rng.randint(lo, hi) - 1)
    )


def _shapes(rng: random.Random) -> list[Callable[[], str]]:
    """Statements as the templates write them, with names of random length."""

    def n() -> str:
        return _name(rng)

    def f() -> str:
        return n().lower()

    def annotation() -> str:
        return rng.choice(
            [
                n(),
                f"_{n()}Wire | _wire.NonNegative",
                f"dict[str, list[{n()} | None]]",
                f"list[{n()}]",
            ]
        )

    def operand() -> str:
        return rng.choice([n(), n(), f"list[{n()}]", f"dict[str, {n()}]"])

    def conv() -> str:
        return rng.choice([f"_{n()}_to_wire", "_b.expect_int", f"_common._{n()}_from_wire"])

    def fields() -> list[str]:
        return [f() for _ in range(rng.randint(1, 5))]

    def variants() -> str:
        return ", ".join(n() for _ in range(rng.randint(1, 4)))

    def ors() -> str:
        return " or ".join(f"type(wire) is _{n()}Wire" for _ in range(rng.randint(1, 4)))

    def names() -> str:
        chosen = [f'"{f()}"' for _ in range(rng.randint(1, 6))]
        return f"({chosen[0]},)" if len(chosen) == 1 else f"({', '.join(chosen)})"

    def values() -> str:
        return ", ".join(f"v_{f()}" for _ in range(rng.randint(1, 6)))

    x = f()
    return [
        lambda: f"_{n()}_FIELDS = _columns.fields_reader({names()})",
        lambda: f"_{n()}_columns_new = _columns.builder({n()}, {names()}, _{n()}_assign)",
        lambda: f"    out = _columns.build(_{n()}_new, {n()}, [{values()}], present)",
        lambda: f"    return _{n()}FieldsWire({values()})",
        lambda: (
            "        return "
            + " and ".join(f"_b.values_equal(self.{a}, other.{a})" for a in fields())
        ),
        lambda: f"def _{n()}_to_wire(obj: {n()}, ctx: _EncodeContext) -> {annotation()}:",
        lambda: f"def _{n()}_from_wire(value: {annotation()}, ctx: _DecodeContext) -> {n()}:",
        lambda: f"def _{n()}_etc(value: tuple[{annotation()}, ...], ctx: _DecodeContext) -> {n()}:",
        lambda: f'class _{n()}Wire(msgspec.Struct, array_like=True, frozen=True, tag="{f()}"):',
        lambda: f"class {n()}(dict[{operand()}, {operand()}]):",
        lambda: f"{n()}: TypeAlias = " + " | ".join(operand() for _ in range(rng.randint(2, 6))),
        lambda: f'{n()}: TypeAlias = "' + " | ".join(operand() for _ in range(3)) + '"',
        lambda: f"        v_{x} = None if obj.{x} is None else {conv()}(obj.{x}, ctx)",
        lambda: f"        v_{x} = _b.constrained({conv()}(obj.{x}, ctx), ge=0, lt=150)",
        lambda: f"        v_{x} = {conv()}(obj.{x}, ctx)",
        lambda: (
            f'        raise EncodeError(f"expected a {n()}, got {{type(obj).__name__}}") from None'
        ),
        lambda: f'        raise EncodeError(f"expected one of {variants()}, got {{type(obj)}}")',
        lambda: f"    return None if value is None else {conv()}(value, ctx)",
        lambda: f"            out.append({conv()}(item, ctx))",
        lambda: f"            out[wire_key] = {conv()}(item, ctx)",
        lambda: f"        if {ors()}:",
        lambda: f"        elif {ors()}:",
        lambda: f"        elif isinstance(obj, _common.{n()}):",
        lambda: f"        wire = _{n()}Wire({conv()}(obj, ctx))",
        lambda: f"        return {n()}({conv()}(wire, ctx))",
        lambda: f"    {f()}: Annotated[list[{n()}], msgspec.Meta(min_length=1)]",
        lambda: f"    {f()}: dict[str, list[{n()}]] = {{}}",
        lambda: f"    {f()}: {annotation()} = None",
        lambda: f"    out: dict[{annotation()}, {annotation()}] = {{}}",
        lambda: f'        raise ctx.bad_back_reference(values, wire.index, "{n()}")',
        lambda: f'    seen = ctx.shared["{f()}.{n()}"]',
        lambda: f"        raise _b.construct_failure({n()}, e) from e",
        lambda: f'        _codec.NamedType("{x}", {x}, _{x}Wire, _{x}_to_wire, _{x}_from_wire),',
        lambda: f"        {x}=_b.constrained({conv()}(obj.{x}, ctx), ge=0, lt=150),",
    ]


_NESTING = {
    0: "",
    4: "def f():\n",
    8: "def f():\n    if x:\n",
    12: "def f():\n    if x:\n        if y:\n",
}


def _in_context(line: str) -> str:
    """``line`` laid out, inside what makes it valid Python at its indentation."""
    column = len(line) - len(line.lstrip())
    code = line.lstrip()
    if code.endswith(","):  # an item of the list the template writes one per line
        return f"_CODEC = f(\n    g(\n{statement(line, item=True)}\n    ),\n)"
    laid_out = statement(line)
    if code.startswith(("def ", "class ", "if ", "elif ")):
        if code.startswith("elif "):
            laid_out = f"{' ' * column}if x:\n{' ' * (column + 4)}pass\n{laid_out}"
        laid_out += f"\n{' ' * (column + 4)}pass"
    return _NESTING[column] + laid_out


def test_ruff_format_leaves_the_layout_unchanged() -> None:
    from ruff.__main__ import find_ruff_bin  # type: ignore[import-untyped]  # the dev extra

    rng = random.Random(20261201)
    lines: list[str] = []
    while len(lines) < 2000:
        shapes = _shapes(rng)
        line = rng.choice(shapes)()
        if len(line) > 100:
            lines.append(line)
    source = "\n\n\n".join(_in_context(line) for line in lines) + "\n"
    command = [find_ruff_bin(), "format", "--isolated", "--line-length", "100", "-"]
    result = subprocess.run(command, input=source, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    if result.stdout != source:
        import difflib

        diff = difflib.unified_diff(source.splitlines(), result.stdout.splitlines(), lineterm="")
        pytest.fail("ruff lays these out otherwise:\n" + "\n".join(list(diff)[:60]))


def test_a_chain_without_parentheses_breaks_only_inside_brackets() -> None:
    """In ``a or f(...)`` split at ``f``, an operand that is itself a chain stays whole."""
    long = "x" * 40
    line = f"        return type(wire) is _{long}Wire or check(obj.{long}, ctx)"
    laid_out = statement(line)
    assert laid_out.splitlines() == [
        f"        return type(wire) is _{long}Wire or check(",
        f"            obj.{long}, ctx",
        "        )",
    ]
    ast.parse(textwrap.dedent(laid_out))
