"""Parse the type expressions schemas write in strings: ``list[optional[Foo]]``.

Grammar::

    type  := NAME [ "[" type { "," type } [ "," "..." ] "]" ]
    NAME  := identifier { "." identifier }

The parser knows no type names; :mod:`codegen.validate` resolves them. Every node
keeps its character offset so errors point at the right column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)|(?P<punct>\.\.\.|[\[\],]))"
)


@dataclass(frozen=True, slots=True)
class RawType:
    name: str
    args: tuple[RawType, ...]
    variadic: bool
    """True for ``tuple[T, ...]``."""
    offset: int


class TypeSyntaxError(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


MAX_DEPTH = 32
"""How deeply type expressions may nest (``list[list[...]]``); real ones nest 3 or 4."""


def parse_type(text: str) -> RawType:
    tokens = _tokenize(text)
    parsed, index = _parse(tokens, 0, text, 1)
    if index != len(tokens):
        raise TypeSyntaxError(f"unexpected {tokens[index][0]!r}", tokens[index][1])
    return parsed


def _tokenize(text: str) -> list[tuple[str, int]]:
    tokens = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            offset = position + len(text[position:]) - len(text[position:].lstrip())
            raise TypeSyntaxError(f"unexpected character {text[offset]!r}", offset)
        group = "name" if match["name"] else "punct"
        tokens.append((match[group], match.start(group)))
        position = match.end()
    return tokens


def _parse(tokens: list[tuple[str, int]], index: int, text: str, depth: int) -> tuple[RawType, int]:
    if index >= len(tokens):
        raise TypeSyntaxError("expected a type name", len(text))
    name, offset = tokens[index]
    if depth > MAX_DEPTH:
        raise TypeSyntaxError(f"type nested deeper than {MAX_DEPTH} levels", offset)
    if not (name[0].isalpha() or name[0] == "_"):
        raise TypeSyntaxError(f"expected a type name, found {name!r}", offset)
    index += 1
    if index >= len(tokens) or tokens[index][0] != "[":
        return RawType(name, (), False, offset), index
    index += 1
    args: list[RawType] = []
    variadic = False
    while True:
        if index < len(tokens) and tokens[index][0] == "...":
            if not args:
                raise TypeSyntaxError("'...' must follow a type", tokens[index][1])
            variadic = True
            index += 1
        else:
            arg, index = _parse(tokens, index, text, depth + 1)
            args.append(arg)
        if index >= len(tokens):
            raise TypeSyntaxError("missing ']'", len(text))
        token, token_offset = tokens[index]
        index += 1
        if token == "]":
            break
        if token != "," or variadic:
            raise TypeSyntaxError(f"expected ',' or ']', found {token!r}", token_offset)
    return RawType(name, tuple(args), variadic, offset), index
