"""YAML syntax errors in the schema language's own words, each with a hint.

PyYAML says what its parser expected (``expected <block end>, but found '<block mapping
start>'``); a user wants to know what is wrong with the line they wrote (it is indented
to no key above it) and how to fix it. :func:`describe` reads PyYAML's error and the
text around it and says that, pointing at the place to change. A case it does not know
keeps PyYAML's words, under ``YAML syntax error``.
"""

from __future__ import annotations

import re

import yaml

from mmcodec.codegen.diagnostics import Diagnostic, Position

_FLOW_CLOSE = {"flow mapping": "}", "flow sequence": "]"}
_FLOW_OPEN = {"}": "{", "]": "["}


def describe(error: yaml.MarkedYAMLError, text: str, file: str) -> Diagnostic:
    """One diagnostic for a YAML syntax error in ``text`` (the file ``file`` holds)."""
    lines = text.split("\n")
    problem, context = error.problem or "", error.context or ""
    mark = error.problem_mark or error.context_mark
    at = (mark.line, mark.column) if mark else (0, 0)
    opened = error.context_mark
    if isinstance(error, yaml.constructor.ConstructorError):
        return _tag(problem, at, lines, file)
    for explain in (_indentation, _colon, _missing_colon, _character, _string, _flow, _alias):
        found = explain(problem, context, at, opened, lines, file)
        if found is not None:
            return found
    words = f"{context}: {problem}" if context else problem or str(error)
    return Diagnostic(_position(file, lines, *at), f"YAML syntax error: {words}")


_Mark = yaml.Mark | None


def _position(file: str, lines: list[str], line: int, column: int, length: int = 0) -> Position:
    """A 0-based mark as a 1-based position, its span kept within the line."""
    if line < len(lines):
        length = min(length, len(lines[line]) - column)
    return Position(file, line + 1, column + 1, max(length, 0))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _key(line: str) -> str:
    """What a line starts with, to name it: its key, or ``-`` for a list item."""
    stripped = line.strip()
    if stripped.startswith("- ") or stripped == "-":
        return "-"
    return re.split(r":(\s|$)", stripped, maxsplit=1)[0]


def _enclosing(lines: list[str], before: int) -> list[tuple[int, int]]:
    """(indentation, line index) of the lines that hold line ``before``, innermost first:
    walking up, each line indented less than every line met so far."""
    chain: list[tuple[int, int]] = []
    limit = None
    for index in range(before - 1, -1, -1):
        line = lines[index]
        if not _content(line):
            continue
        indent = _indent(line)
        if limit is None or indent < limit:
            chain.append((indent, index))
            limit = indent
            if indent == 0:
                break
    return chain


def _indentation(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """``expected <block end>, but found ...``: a line indented to no key above it."""
    if not (problem.startswith("expected <block end>") and context.startswith("while parsing a")):
        return None
    line_index = at[0]
    if line_index >= len(lines):
        return None
    line = lines[line_index]
    indent = _indent(line)
    if at[1] != indent:  # not a line's first token: `[a, b]]`, say
        found = re.search(r"but found '([\]}])'$", problem)
        if found is None:
            return None
        close = found[1]
        return Diagnostic(
            _position(file, lines, *at, 1),
            f"unmatched '{close}'",
            f"remove it, or open it with '{_FLOW_OPEN[close]}'",
        )
    chain = _enclosing(lines, line_index)
    deeper = [(i, n) for i, n in chain if i > indent]
    shallower = [(i, n) for i, n in chain if i < indent]
    options = []
    if deeper:
        i, n = deeper[-1]
        options.append(f"to column {i + 1} like `{_key(lines[n])}` (line {n + 1})")
    if shallower:
        i, n = shallower[0]
        options.append(f"to column {i + 1} like `{_key(lines[n])}` (line {n + 1})")
    key = _key(line)
    hint = f"indent it {' or '.join(options)}" if options else ""
    return Diagnostic(
        _position(file, lines, line_index, indent, len(key)),
        f"bad indentation: `{key}` (column {indent + 1}) lines up with no key above it",
        hint,
    )


def _colon(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """``mapping values are not allowed here``: a ``: `` in a value, or a key indented
    under a key that already has a value."""
    if problem != "mapping values are not allowed here" or at[0] >= len(lines):
        return None
    line_index, column = at
    line = lines[line_index]
    first = re.search(r":(\s|$)", line)
    if first is not None and first.start() < column:  # `doc: a: b`
        key_end = first.start()
        value = line[first.end() :].strip()
        start = line.index(value, first.end()) if value else column
        quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return Diagnostic(
            _position(file, lines, line_index, start, len(value)),
            "': ' inside an unquoted value (YAML reads it as the start of a mapping)",
            f"quote the value: {line[:key_end].strip()}: {quoted}",
        )
    indent = _indent(line)
    above = next((n for n in range(line_index - 1, -1, -1) if _content(lines[n])), None)
    key = _key(line)
    if above is None or _indent(lines[above]) >= indent:
        return None
    return Diagnostic(
        _position(file, lines, line_index, indent, len(key)),
        f"bad indentation: `{key}` is indented under `{_key(lines[above])}` (line {above + 1}),"
        " which already has a value",
        f"indent it to column {_indent(lines[above]) + 1} to make it a key beside "
        f"`{_key(lines[above])}`",
    )


def _missing_colon(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """``could not find expected ':'``: a line that is neither ``key: value`` nor an item."""
    if problem != "could not find expected ':'" or opened is None or opened.line >= len(lines):
        return None
    line_index, column = opened.line, opened.column
    line = lines[line_index]
    text = line.strip()
    siblings = [lines[n] for n in range(line_index) if _content(lines[n])]
    block = next(
        (n for n in range(line_index - 1, -1, -1) if re.search(r":\s*[|>][-+0-9]*\s*$", lines[n])),
        None,
    )
    if block is not None and all(not _content(lines[n]) for n in range(block + 1, line_index)):
        hint = (
            f"indent the text of the block scalar that `{_key(lines[block])}` starts on line "
            f"{block + 1} more than that key"
        )
    elif siblings and siblings[-1].strip().startswith("-") and _indent(siblings[-1]) == column:
        hint = f"a list item starts with '- ': - {text}"
    else:
        word, _, rest = text.partition(" ")
        hint = f"a mapping entry is 'key: value', e.g. {word}: {rest.strip() or '...'}"
    return Diagnostic(
        _position(file, lines, line_index, column, len(text)),
        "expected 'key: value', found no ':'",
        hint,
    )


def _character(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """``found character ... that cannot start any token``: a tab, or a reserved character."""
    found = re.fullmatch(r"found character '(.+)' that cannot start any token", problem)
    if found is None:
        return None
    char = found[1]
    if char == "\\t":
        return Diagnostic(
            _position(file, lines, *at, 1),
            "tab character: YAML indents with spaces only",
            "replace the tab with spaces",
        )
    line = lines[at[0]] if at[0] < len(lines) else ""
    value = re.split(r"\s+#", line[at[1] :], maxsplit=1)[0].strip()
    return Diagnostic(
        _position(file, lines, *at, len(value)),
        f"{char!r} cannot start an unquoted value in YAML",
        f'quote the value: "{value}"' if value else "quote the value",
    )


def _string(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """A quoted string that is never closed, or holds an unknown escape."""
    if not re.fullmatch(r"while scanning a (double-|single-)?quoted scalar", context):
        return None
    if opened is None:
        return None
    if opened.line < len(lines) and opened.column < len(lines[opened.line]):
        quote = lines[opened.line][opened.column]
    else:
        quote = '"'
    if problem.startswith("found unknown escape character"):
        return Diagnostic(
            _position(file, lines, at[0], max(at[1] - 1, 0), 2),  # the backslash and its letter
            "unknown escape sequence in a double-quoted string",
            r"write \\ for a backslash, or quote the text with single quotes",
        )
    return Diagnostic(
        _position(file, lines, opened.line, opened.column, 1),
        "unterminated string: this quote is never closed",
        f"close it with {quote}",
    )


def _flow(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """``{...}`` or ``[...]`` that is not closed, or holds an unquoted ``[``."""
    kind = context.removeprefix("while parsing a ")
    close = _FLOW_CLOSE.get(kind)
    found = re.fullmatch(r"expected ',' or '[\]}]', but got '(.+)'", problem)
    if close is None or found is None or opened is None:
        return None
    got = found[1]
    if got == "[":  # `{type: list[int]}`: `[` is flow syntax
        expression = _expression(lines, *at)
        return Diagnostic(
            _position(file, lines, at[0], at[1] - len(expression.split("[")[0]), len(expression)),
            f"unquoted '[' inside {_FLOW_OPEN[close]}...{close}",
            f'quote a type expression inside {{...}} or [...]: "{expression}"',
        )
    line = lines[opened.line] if opened.line < len(lines) else ""
    before = "the end of the file" if got == "<stream end>" else f"line {at[0] + 1}"
    hint = f"close it with '{close}'"
    if close not in line[opened.column :]:
        hint = f"add '{close}' at the end of line {opened.line + 1}"
    return Diagnostic(
        _position(file, lines, opened.line, opened.column, 1),
        f"'{_FLOW_OPEN[close]}' is not closed before {before}",
        hint,
    )


def _expression(lines: list[str], line_index: int, column: int) -> str:
    """The type expression around a ``[`` at ``column``: its name and brackets."""
    line = lines[line_index] if line_index < len(lines) else ""
    start = column
    while start > 0 and (line[start - 1].isalnum() or line[start - 1] in "_."):
        start -= 1
    depth, end = 0, column
    while end < len(line):
        depth += {"[": 1, "]": -1}.get(line[end], 0)
        end += 1
        if depth == 0:
            break
    return line[start:end]


def _alias(
    problem: str, context: str, at: tuple[int, int], opened: _Mark, lines: list[str], file: str
) -> Diagnostic | None:
    """Anchors and aliases, and a second document in the file."""
    undefined = re.fullmatch(r"found undefined alias '(.+)'", problem)
    if undefined is not None:
        name = undefined[1]
        return Diagnostic(
            _position(file, lines, *at, len(name) + 1),
            f"alias '*{name}' refers to no anchor '&{name}' before it",
            f'quote the value if the * is text: "*{name}"',
        )
    duplicate = re.fullmatch(r"found duplicate anchor '(.+)'; first occurrence", context)
    if duplicate is not None and opened is not None:
        name = duplicate[1]
        return Diagnostic(
            _position(file, lines, *at, len(name) + 1),
            f"anchor '&{name}' is defined twice (first on line {opened.line + 1})",
            "give each anchor its own name",
        )
    if context == "expected a single document in the stream":
        return Diagnostic(
            _position(file, lines, *at, 3),
            "a second YAML document: a schema file holds one",
            "remove the '---' line, or put the second document in a file of its own",
        )
    return None


_TAG_PREFIX = "tag:yaml.org,2002:"


def _tag(problem: str, at: tuple[int, int], lines: list[str], file: str) -> Diagnostic:
    """An explicit tag (``!!int abc``, ``!!python/object:os.system``) that does not fit its
    value, or that no safe loader knows: a schema needs no tags."""
    line = lines[at[0]] if at[0] < len(lines) else ""
    written = line[at[1] :].split(" ", 1)[0]
    unknown = re.fullmatch(r"could not determine a constructor for the tag '(.+)'", problem)
    kinds = re.fullmatch(r"expected a (\w+) node, but found (\w+)", problem)
    if unknown is not None:
        message = f"unknown tag {unknown[1].replace(_TAG_PREFIX, '!!')!r}"
    elif kinds is not None:
        message = f"{written} asks for a {kinds[1]}, but the value is a {kinds[2]}"
    else:
        message = problem.replace(_TAG_PREFIX, "!!")
    return Diagnostic(
        _position(file, lines, *at, len(written)),
        f"{message}: a schema holds plain YAML values",
        "remove the tag (quote a text that starts with '!')",
    )
