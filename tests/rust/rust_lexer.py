"""A lexer for the Rust the compiler writes: enough of Rust's lexical grammar to tell
comments, string, byte string and character literals from code.

Used by the escaping tests: schema text must end up inside one literal or comment
token. It follows the reference's rules for what it recognises (nested block comments,
escapes, raw strings, lifetimes vs characters) and raises on anything it does not know,
so that a surprise is a test failure rather than a silent pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WHITESPACE = re.compile(r"[ \t\n]+")
_IDENT = re.compile(r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(
    r"[0-9][0-9_]*(?:\.[0-9][0-9_]*)?(?:[eE][+-]?[0-9_]+)?(?:[iuf](?:8|16|32|64|128|size))?"
)
_LIFETIME = re.compile(r"'[A-Za-z_][A-Za-z0-9_]*(?!')")
_CHAR = re.compile(r"'(?:[^'\\\n\r\t]|\\(?:[nrt0\\'\"]|x[0-7][0-9a-fA-F]|u\{[0-9a-fA-F]{1,6}\}))'")
_STRING_BODY = re.compile(
    r'(?:[^"\\\r]|\\(?:[nrt0\\\'"]|x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|\n))*'
)
_PUNCT = (
    ">>=",
    "<<=",
    "...",
    "..=",
    "::",
    "->",
    "=>",
    "==",
    "!=",
    "<=",
    ">=",
    "&&",
    "||",
    "+=",
    "-=",
    "*=",
    "/=",
    "%=",
    "^=",
    "&=",
    "|=",
    "<<",
    ">>",
    "..",
    *"+-*/%^!&|=<>@.,;:#$?~{}[]()",
)


@dataclass(frozen=True)
class Token:
    kind: str  # comment, string, byte_string, char, ident, lifetime, number, punct
    text: str


def tokens(source: str) -> list[Token]:
    """The tokens of ``source``, whitespace dropped."""
    out: list[Token] = []
    at = 0
    while at < len(source):
        if m := _WHITESPACE.match(source, at):
            at = m.end()
            continue
        rest = source[at:]
        if rest.startswith("//"):
            end = source.find("\n", at)
            end = len(source) if end < 0 else end
            out.append(Token("comment", source[at:end]))
            at = end
            continue
        if rest.startswith("/*"):
            depth, position = 0, at
            while True:
                if source.startswith("/*", position):
                    depth, position = depth + 1, position + 2
                elif source.startswith("*/", position):
                    depth, position = depth - 1, position + 2
                    if depth == 0:
                        break
                elif position >= len(source):
                    raise ValueError("unterminated block comment")
                else:
                    position += 1
            out.append(Token("comment", source[at:position]))
            at = position
            continue
        raw = re.match(r'b?r(#*)"', rest)
        if raw:
            close = '"' + raw.group(1)
            end = source.find(close, at + raw.end())
            if end < 0:
                raise ValueError("unterminated raw string")
            kind = "byte_string" if rest.startswith("b") else "string"
            out.append(Token(kind, source[at : end + len(close)]))
            at = end + len(close)
            continue
        if rest.startswith('"') or rest.startswith('b"'):
            start = at + (2 if rest.startswith("b") else 1)
            body = _STRING_BODY.match(source, start)
            end = body.end() if body else start
            if end >= len(source) or source[end] != '"':
                raise ValueError(f"bad string literal at {at}: {source[at : at + 40]!r}")
            kind = "byte_string" if rest.startswith("b") else "string"
            out.append(Token(kind, source[at : end + 1]))
            at = end + 1
            continue
        if rest.startswith("'"):
            if m := _CHAR.match(source, at):
                out.append(Token("char", m.group()))
            elif m := _LIFETIME.match(source, at):
                out.append(Token("lifetime", m.group()))
            else:
                raise ValueError(f"bad quote at {at}: {source[at : at + 20]!r}")
            at = m.end()
            continue
        if m := _IDENT.match(source, at):
            out.append(Token("ident", m.group()))
            at = m.end()
            continue
        if m := _NUMBER.match(source, at):
            out.append(Token("number", m.group()))
            at = m.end()
            continue
        for punct in _PUNCT:
            if rest.startswith(punct):
                out.append(Token("punct", punct))
                at += len(punct)
                break
        else:
            raise ValueError(f"unexpected {source[at]!r} at {at}")
    return out
