"""Schema text into Python source: the one path every string takes into generated code.

A schema is untrusted input: its file name and every string in it (docs, names,
bindings, tags, defaults, patterns) may have been written to break out of where the
template puts it. So text never reaches a template as text. The renderer turns values
into :class:`Code` with :func:`literal` (a string, bytes or number, as ``repr`` would
write it), :func:`docstring` (a triple-quoted literal), :func:`comment` (one comment
line) and :func:`code` (fragments joined); the template environment's ``finalize``
(:func:`finalize`) refuses anything else but ints and *fragments*: plain strings of
identifier characters, digits, spaces and ``.,[]()|=+-``, which can open no string,
comment or statement. Each literal is checked to evaluate back to its value.

Validation rejects bad names long before this; here a mistake anywhere upstream becomes
an :class:`UnsafeText` error at render time, never code in a generated module.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable

from markupsafe import Markup

__all__ = ["Code", "UnsafeText", "code", "comment", "docstring", "finalize", "lines", "literal"]

_FRAGMENT = re.compile(r"[A-Za-z0-9_.,\[\]()|=+\- ]*")


class UnsafeText(Exception):
    """Text that is neither Code nor a plain fragment reached a template (a compiler bug)."""


class Code(Markup):
    """Python source the renderer built from values; templates emit only this, ints and
    fragments. Made by the functions of this module, not by calling ``Code`` directly.

    A ``Markup`` because the environment autoescapes: a macro's output (the template's
    own text, each value in it already checked) is Markup too, and anything else that
    slipped past ``finalize`` would be mangled rather than run.
    """

    __slots__ = ()


def is_fragment(text: str) -> bool:
    """Whether ``text`` can be pasted into source as it is (see the module's docstring)."""
    return _FRAGMENT.fullmatch(text) is not None


def code(*parts: str | int) -> Code:
    """Parts joined into one piece of source; each is Code, an int or a fragment."""
    for part in parts:
        _check(part)
    return Code("".join(str(part) for part in parts))


def lines(rows: Iterable[str]) -> Code:
    """Rows of source, each Code or a fragment, one per line."""
    return Code("\n".join(code(row) for row in rows))


def finalize(value: object) -> object:
    """The Jinja environment's ``finalize``: what a ``{{ ... }}`` may print."""
    return _check(value)


def _check(value: object) -> object:
    if isinstance(value, Markup) or type(value) is int:  # Code, or a macro's output
        return value
    if type(value) is str and is_fragment(value):
        return value
    raise UnsafeText(f"refusing to paste {value!r} into generated code")


# -- literals ----------------------------------------------------------------------


def literal(value: object) -> Code:
    """``value`` (None, bool, int, float, str, bytes, an empty list, tuple or dict) as a
    Python literal.

    Strings and bytes are quoted as ruff normalizes them: double quotes, unless the text
    holds more double quotes than single ones. Non-finite floats, which have no literal,
    are ``float("inf")``, ``float("-inf")``, ``float("nan")``.
    """
    if value is None or isinstance(value, (bool, int)):
        return Code(repr(value))
    if isinstance(value, (list, tuple, dict)) and not value:
        return _checked(repr(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return Code(f'float("{value}")')
        return _checked(repr(value), value)
    if isinstance(value, str):
        chars, prefix = list(value), ""
    elif isinstance(value, bytes):
        chars, prefix = [chr(b) for b in value], "b"
    else:
        raise UnsafeText(f"no literal for a {type(value).__name__}")
    quote = "'" if chars.count('"') > chars.count("'") else '"'
    body = "".join(_escape(c, quote, bytes_=bool(prefix)) for c in chars)
    return _checked(f"{prefix}{quote}{body}{quote}", value)


def _escape(char: str, quote: str, bytes_: bool) -> str:
    if char == "\\" or char == quote:
        return "\\" + char
    if char in "'\"":
        return char
    return repr(char.encode("latin-1"))[2:-1] if bytes_ else repr(char)[1:-1]


def docstring(text: str) -> Code:
    """``text`` as a triple-quoted string literal (``\"\"\"...\"\"\"``).

    Line breaks stay line breaks; every other character that is not printable (a NUL, a
    carriage return, a tab, U+2028) is written as its escape, and so are backslashes,
    a run of three double quotes and a double quote at the end.
    """
    out: list[str] = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == '"' and (index == len(text) - 1 or text.startswith('""', index + 1)):
            out.append('\\"')  # never three in a row, never one before the closing quotes
        elif char == "\n" or char.isprintable():
            out.append(char)
        else:
            out.append(repr(char)[1:-1])
    return _checked(f'"""{"".join(out)}"""', text)


def comment(text: str) -> Code:
    """``text`` as the rest of one comment line: characters that are not printable (line
    breaks included) are written as their escapes, and so are backslashes."""
    body = "".join("\\\\" if c == "\\" else c if c.isprintable() else repr(c)[1:-1] for c in text)
    if not body.isprintable():  # pragma: no cover - every character was made printable
        raise UnsafeText(f"comment text {text!r} is not one printable line")
    return Code(body)


def _checked(source: str, value: object) -> Code:
    """``source``, after proving that it evaluates to ``value`` and nothing else."""
    try:
        back = ast.literal_eval(source)
    except (SyntaxError, ValueError) as e:  # pragma: no cover - a bug in the escaping
        raise UnsafeText(f"{source!r} is not a literal: {e}") from None
    if type(back) is not type(value) or back != value:  # pragma: no cover - likewise
        raise UnsafeText(f"{source!r} does not evaluate to {value!r}")
    return Code(source)
