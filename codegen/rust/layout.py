"""Line layout for generated Rust: the breaks ``rustfmt`` (default settings) would choose.

The renderer writes every line whose length depends on schema names through one of the
shapes below, each laid out as rustfmt lays it out: on one line when it fits in 100
columns (and, for a call with several arguments, when they fit in 60: rustfmt's
``fn_call_width``), else broken the way rustfmt breaks that shape. Every other line of a
generated module has a fixed length. ``tests/rust/test_rust_layout.py`` runs rustfmt over
generated modules whose names are long enough to make every shape break.

The test makes every type, field and tag name of the test schemas up to 41 characters
longer (names of about 50 characters). Past that, where two long names share a line,
rustfmt's choices are not all followed; the code is still valid Rust.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmcodec.codegen.rust.source import RustCode, code

WIDTH = 100
"""rustfmt's ``max_width``."""
CALL_ARGS_WIDTH = 60
"""rustfmt's ``fn_call_width``: several arguments wider than this go one per line."""
STRUCT_LITERAL_WIDTH = 18
"""rustfmt's ``struct_lit_width``: a struct literal's fields wider than this go one per line."""


def _fits(*rows: str) -> bool:
    return all(len(row) <= WIDTH for row in rows)


def _rows(*rows: RustCode) -> RustCode:
    """Lines of code, each already made by :func:`code`."""
    return RustCode("\n".join(rows))


def field(indent: int, head: RustCode, ty: RustCode, tail: str = ",") -> RustCode:
    """``head ty,`` as a struct field (``pub name: Type,``): the type moves to the next
    line when the field does not fit, or a tuple type opens there, one item per line."""
    pad = " " * indent
    one = code(pad, head, " ", ty, tail)
    if _fits(one):
        return one
    items = _tuple_items(ty)
    if items is None:
        return _rows(code(pad, head), code(pad, "    ", ty, tail))
    rows = [code(pad, head, " (")]
    rows += [code(pad, "    ", item, ",") for item in items]
    rows.append(code(pad, ")", tail))
    return _rows(*rows)


def _tuple_items(ty: RustCode) -> list[RustCode] | None:
    """The item types of a tuple type ``(A, B<C, D>)``, or None for another type."""
    if not (ty.startswith("(") and ty.endswith(")")):
        return None
    items: list[RustCode] = []
    depth, start = 0, 1
    for i, char in enumerate(ty[1:-1], start=1):
        if char in "(<[":
            depth += 1
        elif char in ")>]":
            depth -= 1
        if depth < 0:
            return None  # "(A, B) | (C)" is no one tuple
        if char == "," and depth == 0:
            items.append(code(ty[start:i].strip()))
            start = i + 1
    last = ty[start:-1].strip()
    if last:
        items.append(code(last))
    return items if depth == 0 and len(items) > 1 else None


def tuple_variant(indent: int, name: RustCode, ty: RustCode) -> RustCode:
    """An enum variant holding one value: ``Name(Type),``."""
    pad = " " * indent
    one = code(pad, name, "(", ty, "),")
    if _fits(one):
        return one
    return _rows(code(pad, name, "("), code(pad, "    ", ty, ","), code(pad, "),"))


def impl_header(generics: RustCode, trait: RustCode, ty: RustCode) -> RustCode:
    """``impl<...> Trait for Type {``, at the start of a line."""
    one = code("impl", generics, " ", trait, " for ", ty, " {")
    if _fits(one):
        return one
    return _rows(code("impl", generics, " ", trait), code("    for ", ty), code("{"))


def match_arm(indent: int, pattern: RustCode, body: RustCode) -> RustCode:
    """``pattern => body,``: a body that does not fit goes into a block."""
    pad = " " * indent
    one = code(pad, pattern, " => ", body, ",")
    if _fits(one):
        return one
    return _rows(code(pad, pattern, " => {"), code(pad, "    ", body), code(pad, "}"))


def match_arm_call(
    indent: int, pattern: RustCode, receiver: str, method: RustCode, args: Sequence[RustCode]
) -> RustCode:
    """``pattern => receiver.method(args),``: arguments that are several and wider than
    ``fn_call_width`` go one per line after the call's start; a call that does not fit
    otherwise goes into a block."""
    pad = " " * indent
    joined = code(*[code(", " if i else "", a) for i, a in enumerate(args)])
    call = code(receiver, ".", method, "(", joined, ")")
    wide = len(args) > 1 and len(joined) > CALL_ARGS_WIDTH
    if not wide:
        return match_arm(indent, pattern, call)
    rows = [code(pad, pattern, " => ", receiver, ".", method, "(")]
    rows += [code(pad, "    ", arg, ",") for arg in args]
    rows.append(code(pad, "),"))
    return _rows(*rows)


def const_item(indent: int, head: RustCode, value: RustCode) -> RustCode:
    """``const NAME: Type = value;``: the value moves to the next line when that makes it
    fit (a value too long for any line stays where it is)."""
    pad = " " * indent
    one = code(pad, head, " = ", value, ";")
    rows = (code(pad, head, " ="), code(pad, "    ", value, ";"))
    if _fits(one) or not _fits(*rows):
        return one
    return _rows(*rows)


ARRAY_WIDTH = 60
"""rustfmt's ``array_width``: an array literal's items wider than this go one per line."""


def array_const(indent: int, head: RustCode, items: Sequence[RustCode]) -> RustCode:
    """``const NAME: Type = &[a, b];``: one item, or items no wider than ``array_width``
    together, as :func:`const_item` lays a value out; else one item per line."""
    joined = code(*[code(", " if i else "", item) for i, item in enumerate(items)])
    if len(items) < 2 or len(joined) <= ARRAY_WIDTH:
        return const_item(indent, head, code("&[", joined, "]"))
    pad = " " * indent
    rows = [code(pad, head, " = &[")]
    rows += [code(pad, "    ", item, ",") for item in items]
    rows.append(code(pad, "];"))
    return _rows(*rows)


def method_call(
    indent: int, receiver: str, method: RustCode, args: Sequence[RustCode], tail: str
) -> RustCode:
    """``receiver.method(args)tail``, a statement; arguments go one per line when the call
    does not fit, or when several are wider than ``fn_call_width`` together."""
    pad = " " * indent
    joined = code(*[code(", " if i else "", a) for i, a in enumerate(args)])
    one = code(pad, receiver, ".", method, "(", joined, ")", tail)
    if _fits(one) and (len(args) < 2 or len(joined) <= CALL_ARGS_WIDTH):
        return one
    rows = [code(pad, receiver, ".", method, "(")]
    rows += [code(pad, "    ", arg, ",") for arg in args]
    rows.append(code(pad, ")", tail))
    return _rows(*rows)


def let_call(
    indent: int, binding: str, receiver: str, method: RustCode, args: Sequence[RustCode], tail: str
) -> RustCode:
    """``let binding = receiver.method(args)tail``: a call that does not fit moves to the
    next line when it fits there, else its arguments go one per line (as they do when
    several are wider than ``fn_call_width``)."""
    pad = " " * indent
    joined = code(*[code(", " if i else "", a) for i, a in enumerate(args)])
    narrow = len(args) < 2 or len(joined) <= CALL_ARGS_WIDTH
    call = code(receiver, ".", method, "(", joined, ")", tail)
    one = code(pad, "let ", binding, " = ", call)
    if _fits(one) and narrow:
        return one
    below = code(pad, "    ", call)
    if _fits(below) and narrow:
        return _rows(code(pad, "let ", binding, " ="), below)
    return method_call(indent, f"let {binding} = {receiver}", method, args, tail)


FIELD_VALUE_WIDTH = 98
"""The longest ``name: receiver.call()?,`` line rustfmt keeps whole (measured: it keeps
room for the comma and the ``?`` when it measures the chain)."""


def field_value(
    indent: int, name: RustCode, receiver: str, method: RustCode, args: Sequence[RustCode]
) -> RustCode:
    """``name: receiver.method(args)?,`` in a struct literal. A field that does not fit
    breaks before the method, as rustfmt breaks a chain; when the method's line would not
    fit either (or its arguments are wide), the arguments go one per line; a lone wide
    ``Some(value)`` overflows instead: ``receiver.method(Some(`` / value / ``))?,``."""
    pad = " " * indent
    joined = code(*[code(", " if i else "", a) for i, a in enumerate(args)])
    some = len(args) == 1 and args[0].startswith("Some(") and args[0].endswith(")")
    narrow = (len(args) < 2 and not some) or len(joined) <= CALL_ARGS_WIDTH
    one = code(pad, name, ": ", receiver, ".", method, "(", joined, ")?,")
    if len(one) <= FIELD_VALUE_WIDTH and narrow:
        return one
    chained = code(pad, "    .", method, "(", joined, ")?,")
    if _fits(chained) and narrow:
        return _rows(code(pad, name, ": ", receiver), chained)
    if some:
        inner = code(args[0][len("Some(") : -1])
        opened = code(pad, name, ": ", receiver, ".", method, "(Some(")
        return _rows(opened, code(pad, "    ", inner, ","), code(pad, "))?,"))
    rows = [code(pad, name, ": ", receiver, ".", method, "(")]
    rows += [code(pad, "    ", arg, ",") for arg in args]
    rows.append(code(pad, ")?,"))
    return _rows(*rows)


def field_values(
    indent: int,
    head: RustCode,
    fields: Sequence[tuple[RustCode, RustCode, Sequence[RustCode]]],
    tail: str,
    receiver: str,
) -> RustCode:
    """A struct literal whose values are calls ``receiver.method(args)?``, each laid out
    by :func:`field_value` when the literal goes one field per line."""
    pad = " " * indent
    if not fields:
        return code(pad, head, " {}", tail)
    values = [
        (
            n,
            code(
                receiver,
                ".",
                m,
                "(",
                *[code(", " if i else "", a) for i, a in enumerate(args)],
                ")?",
            ),
        )
        for n, m, args in fields
    ]
    body = code(*[code(", " if i else "", n, ": ", v) for i, (n, v) in enumerate(values)])
    one = code(pad, head, " { ", body, " }", tail)
    if len(body) <= STRUCT_LITERAL_WIDTH and _fits(one):
        return one
    rows = [code(pad, head, " {")]
    rows += [field_value(indent + 4, n, receiver, m, args) for n, m, args in fields]
    rows.append(code(pad, "}", tail))
    return _rows(*rows)


def struct_literal(
    indent: int, head: RustCode, fields: Sequence[tuple[RustCode, RustCode]], tail: str
) -> RustCode:
    """``head { a: x, b: y }tail`` (``head`` like ``Ok(Self``, ``tail`` like ``)``):
    on one line when the fields are narrow (``struct_lit_width``), else one per line."""
    pad = " " * indent
    if not fields:
        return code(pad, head, " {}", tail)
    body = code(*[code(", " if i else "", n, ": ", v) for i, (n, v) in enumerate(fields)])
    one = code(pad, head, " { ", body, " }", tail)
    if len(body) <= STRUCT_LITERAL_WIDTH and _fits(one):
        return one
    rows = [code(pad, head, " {")]
    rows += [code(pad, "    ", n, ": ", v, ",") for n, v in fields]
    rows.append(code(pad, "}", tail))
    return _rows(*rows)


SUPERTRAITS_WIDTH = 93
"""The longest ``pub trait Name: A + B {}`` line rustfmt keeps whole (measured)."""


def supertraits(head: RustCode, bounds: Sequence[RustCode]) -> RustCode:
    """``pub trait Name: A + B {}``, the bounds on their own line(s) when too long."""
    joined = code(*[code(" + " if i else "", b) for i, b in enumerate(bounds)])
    one = code(head, ": ", joined, " {}")
    if len(one) <= SUPERTRAITS_WIDTH:
        return one
    line = code("    ", joined)
    if _fits(line):
        return _rows(code(head, ":"), line, code("{"), code("}"))
    rows = [code(head, ":")]
    rows += [code("    ", "+ " if i else "", b) for i, b in enumerate(bounds)]
    rows += [code("{"), code("}")]
    return _rows(*rows)
