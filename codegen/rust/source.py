"""Schema text into Rust source: the one path every string takes into generated Rust.

The Rust counterpart of :mod:`mmcodec.codegen.pysource`. A schema is untrusted input:
its file name and every string in it (docs, names, tags, defaults, patterns) may have
been written to break out of where the template puts it. So text never reaches a
template as text. The renderer turns values into :class:`RustCode` with :func:`string`
and :func:`byte_string` (literals, each parsed back to prove it holds exactly the value),
:func:`ident` (an identifier, raw ``r#type`` for a keyword), :func:`doc` (``///`` lines)
and :func:`comment` (the rest of one ``//`` line), and joins pieces with :func:`code`,
which takes only RustCode, ints and *syntax*: the renderer's own fragments of types and
expressions, made of identifier characters and punctuation that can open no string,
character literal or comment (no quote, no ``/``, no ``#``, ``'`` only in a lifetime).
The template environment's ``finalize`` (:func:`finalize`) prints only RustCode, ints
and plain fragments that autoescaping leaves alone.

Characters that are not printable (line breaks, NUL, a carriage return, bidirectional
controls that rustc rejects in literals and comments) are written as escapes, so a
comment cannot end early and a literal holds exactly its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from markupsafe import Markup

from mmcodec.codegen.pysource import UnsafeText, is_fragment

__all__ = [
    "RustCode",
    "UnsafeText",
    "allow",
    "byte_string",
    "code",
    "comment",
    "doc",
    "finalize",
    "ident",
    "lines",
    "string",
]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYNTAX = re.compile(r"(?:[A-Za-z0-9_.,()\[\]<>{}=+\-&:;!?*| ]|'(?:a|_|static)(?![A-Za-z0-9_]))*")

KEYWORDS = frozenset(
    [
        "as",
        "break",
        "const",
        "continue",
        "crate",
        "else",
        "enum",
        "extern",
        "false",
        "fn",
        "for",
        "if",
        "impl",
        "in",
        "let",
        "loop",
        "match",
        "mod",
        "move",
        "mut",
        "pub",
        "ref",
        "return",
        "self",
        "Self",
        "static",
        "struct",
        "super",
        "trait",
        "true",
        "type",
        "unsafe",
        "use",
        "where",
        "while",
        "async",
        "await",
        "dyn",
        "abstract",
        "become",
        "box",
        "do",
        "final",
        "macro",
        "override",
        "priv",
        "typeof",
        "unsized",
        "virtual",
        "yield",
        "try",
        "gen",
    ]
)
"""Rust's strict and reserved keywords (2021 edition, and ``gen`` of 2024)."""

UNRAWABLE = frozenset({"self", "Self", "super", "crate", "_"})
"""Keywords a raw identifier cannot spell: the renderer renames them (see names.py)."""


class RustCode(Markup):
    """Rust source the renderer built from values; templates emit only this, ints and
    fragments. Made by the functions of this module, not by calling ``RustCode``."""

    __slots__ = ()


def code(*parts: str | int) -> RustCode:
    """Parts joined into one piece of source; each is RustCode, an int or syntax."""
    for part in parts:
        if isinstance(part, Markup) or type(part) is int:
            continue
        if type(part) is str and _SYNTAX.fullmatch(part):
            continue
        raise UnsafeText(f"refusing to paste {part!r} into generated Rust")
    return RustCode("".join(str(part) for part in parts))


def lines(rows: Iterable[str]) -> RustCode:
    """Rows of source, each RustCode or syntax, one per line."""
    return RustCode("\n".join(code(row) for row in rows))


def finalize(value: object) -> object:
    """The Jinja environment's ``finalize``: what a ``{{ ... }}`` may print."""
    if isinstance(value, Markup) or type(value) is int:
        return value
    if type(value) is str and is_fragment(value):
        return value  # no <, >, & or quotes: autoescaping leaves it as it is
    raise UnsafeText(f"refusing to paste {value!r} into generated Rust")


_LINT = re.compile(r"[a-z_]+")


def allow(lints: Iterable[str]) -> RustCode:
    """``#[allow(lint, ...)]`` for rustc lints named by the renderer (not by schemas)."""
    names = list(lints)
    if not names or not all(_LINT.fullmatch(n) for n in names):
        raise UnsafeText(f"{names!r} are not lint names")
    return RustCode(f"#[allow({', '.join(names)})]")


def ident(name: str) -> RustCode:
    """``name`` as a Rust identifier: as it is, or raw (``r#type``) for a keyword."""
    if not _IDENT.fullmatch(name) or name in UNRAWABLE:
        raise UnsafeText(f"{name!r} is not an identifier Rust can spell")
    return RustCode(f"r#{name}" if name in KEYWORDS else name)


# -- literals ----------------------------------------------------------------------


def _escape(char: str) -> str:
    """One character of a string literal's body."""
    if char in '\\"':
        return "\\" + char
    simple = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}
    if char in simple:
        return simple[char]
    if char.isprintable():
        return char
    return f"\\u{{{ord(char):x}}}"


def string(text: str) -> RustCode:
    """``text`` as a Rust string literal (``"..."``), proven to hold exactly ``text``."""
    source = '"' + "".join(_escape(c) for c in text) + '"'
    if parse_string(source) != text:  # pragma: no cover - a bug in the escaping
        raise UnsafeText(f"{source!r} does not spell {text!r}")
    return RustCode(source)


def byte_string(data: bytes) -> RustCode:
    """``data`` as a Rust byte string literal (``b"..."``), proven to hold exactly it."""
    body = []
    for byte in data:
        char = chr(byte)
        if char in '\\"':
            body.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            body.append(char)
        else:
            body.append(f"\\x{byte:02x}")
    source = 'b"' + "".join(body) + '"'
    if parse_byte_string(source) != data:  # pragma: no cover - a bug in the escaping
        raise UnsafeText(f"{source!r} does not spell {data!r}")
    return RustCode(source)


_STRING_ESCAPE = re.compile(r'\\(?:([nrt0\\"\'])|x([0-7][0-9a-fA-F])|u\{([0-9a-fA-F]{1,6})\})')
_BYTE_ESCAPE = re.compile(r'\\(?:([nrt0\\"\'])|x([0-9a-fA-F]{2}))')
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


def parse_string(source: str) -> str:
    """The value of a Rust string literal as rustc reads it (the subset this module
    writes: no raw strings, no line continuations). Raises ValueError for anything else.
    """
    if len(source) < 2 or source[0] != '"' or source[-1] != '"':
        raise ValueError(f"not a string literal: {source!r}")
    body = source[1:-1]
    out, position = [], 0
    while position < len(body):
        char = body[position]
        if char == '"' or char == "\r":
            raise ValueError(f"unescaped {char!r} inside {source!r}")
        if char != "\\":
            out.append(char)
            position += 1
            continue
        match = _STRING_ESCAPE.match(body, position)
        if match is None:
            raise ValueError(f"bad escape in {source!r}")
        simple, byte, unicode = match.groups()
        out.append(_SIMPLE[simple] if simple else chr(int(byte or unicode, 16)))
        position = match.end()
    return "".join(out)


def parse_byte_string(source: str) -> bytes:
    """The value of a Rust byte string literal (``b"..."``, ASCII only)."""
    if not source.startswith('b"') or len(source) < 3 or source[-1] != '"':
        raise ValueError(f"not a byte string literal: {source!r}")
    body = source[2:-1]
    out, position = bytearray(), 0
    while position < len(body):
        char = body[position]
        if char == '"' or char == "\r" or not char.isascii():
            raise ValueError(f"{char!r} cannot stand inside {source!r}")
        if char != "\\":
            out.append(ord(char))
            position += 1
            continue
        match = _BYTE_ESCAPE.match(body, position)
        if match is None:
            raise ValueError(f"bad escape in {source!r}")
        simple, byte = match.groups()
        out.append(ord(_SIMPLE[simple]) if simple else int(byte, 16))
        position = match.end()
    return bytes(out)


# -- comments ----------------------------------------------------------------------


def _comment_text(text: str) -> str:
    """One line of comment: backslashes doubled, unprintable characters escaped,
    trailing spaces dropped (rustfmt drops them)."""
    out = "".join(
        "\\\\" if c == "\\" else c if c.isprintable() else f"\\u{{{ord(c):x}}}" for c in text
    )
    out = out.rstrip(" ")
    if not out.isprintable():  # pragma: no cover - every character was made printable
        raise UnsafeText(f"comment text {text!r} is not one printable line")
    return out


def comment(text: str) -> RustCode:
    """``text`` as the rest of one ``//`` comment line (line breaks escaped)."""
    return RustCode(_comment_text(text))


def doc(text: str, indent: int = 0, marker: str = "///") -> RustCode:
    """``text`` as doc comment lines (``///``, or ``//!`` for a module), one per line of
    the text, each at ``indent`` spaces."""
    if marker not in ("///", "//!"):
        raise UnsafeText(f"{marker!r} is not a doc comment marker")
    pad = " " * indent
    rows = []
    for line in text.split("\n"):
        body = _comment_text(line)
        rows.append(f"{pad}{marker} {body}" if body else f"{pad}{marker}")
    return RustCode("\n".join(rows))
