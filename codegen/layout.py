"""Line layout for generated code: the line breaks ``ruff format`` would choose.

The templates write every statement on one line. A statement longer than the line
limit is laid out here, the way ruff (line-length 100) lays out the shapes the
generator emits, so that the output needs no formatter and ``ruff format --check``
leaves it unchanged:

* a call, subscript, ``def`` or ``class`` header splits its own brackets: the
  arguments move to their own line, and if they still do not fit, one per line
  with a trailing comma (none after a single argument);
* an operator chain (``a and b``, ``A | B``, ``x if c else y``) is wrapped in
  parentheses and, if it still does not fit, broken before each operator; a chain
  of two operands that ends in a call splits that call instead (in a ``return``),
  or is parenthesized only when that makes it fit on one line (in an assignment);
* a string that does not fit is parenthesized (in an assignment).

The document model is the usual one for pretty printers (Wadler, Prettier, ruff's
own): text, line breaks that are spaces or nothing when their group fits, groups,
indentation. A group is printed flat when it fits in what is left of the line, up to
the next possible break after it.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH = 100
"""The project's line length (ruff's ``line-length``)."""
INDENT = 4


# -- documents -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Line:
    """A possible break: nothing (``soft``) or one space when its group is flat."""

    soft: bool = False


@dataclass(frozen=True, slots=True)
class Group:
    """Printed flat when it fits, else with every ``Line`` directly inside it broken."""

    parts: tuple[Doc, ...]
    broken: bool = False
    """Broken even when it would fit."""


@dataclass(frozen=True, slots=True)
class Indent:
    parts: tuple[Doc, ...]


@dataclass(frozen=True, slots=True)
class IfBreak:
    """Text printed only when the enclosing group is broken (a trailing comma)."""

    text: str


Doc = Text | Line | Group | Indent | IfBreak | tuple["Doc", ...]

_FLAT, _BREAK = False, True
_Command = tuple[int, bool, Doc]  # indentation, broken?, document


def render(doc: Doc, column: int, width: int = WIDTH) -> str:
    """Print ``doc`` starting at ``column`` (which is also its indentation)."""
    out: list[str] = []
    position = column
    stack: list[_Command] = [(column, _BREAK, doc)]
    while stack:
        indent, broken, d = stack.pop()
        if isinstance(d, Text):
            out.append(d.text)
            position += len(d.text)
        elif isinstance(d, tuple):
            stack.extend((indent, broken, part) for part in reversed(d))
        elif isinstance(d, Indent):
            stack.append((indent + INDENT, broken, d.parts))
        elif isinstance(d, Group):
            flat = not broken or (
                not d.broken and _fits((indent, _FLAT, d.parts), stack, width - position)
            )
            stack.append((indent, not flat, d.parts))
        elif isinstance(d, Line):
            if broken:
                out.append("\n" + " " * indent)
                position = indent
            elif not d.soft:
                out.append(" ")
                position += 1
        elif broken:  # IfBreak
            out.append(d.text)
            position += len(d.text)
    return "".join(out)


def _fits(command: _Command, rest: list[_Command], remaining: int) -> bool:
    """Whether ``command`` fits flat, with what follows it up to the next line break."""
    pending = [command]
    next_rest = len(rest)
    while remaining >= 0:
        if not pending:
            if next_rest == 0:
                return True
            next_rest -= 1
            pending.append(rest[next_rest])
            continue
        indent, broken, d = pending.pop()
        if isinstance(d, Text):
            remaining -= len(d.text)
        elif isinstance(d, tuple):
            pending.extend((indent, broken, part) for part in reversed(d))
        elif isinstance(d, (Indent, Group)):
            pending.append((indent, broken, d.parts))
        elif isinstance(d, Line):
            if broken:
                return True
            remaining -= 0 if d.soft else 1
        elif broken:  # IfBreak
            remaining -= len(d.text)
    return False


def brackets(open_: str, items: Sequence[Doc], close: str) -> Doc:
    """``(a, b)``: flat; else the items on their own line; else one per line, with a comma."""
    if not items:
        return Text(open_ + close)
    joined: list[Doc] = []
    for i, item in enumerate(items):
        if i:
            joined += [Text(","), Line()]
        joined.append(item)
    if len(items) > 1:
        joined.append(IfBreak(","))
    return Group(
        (Text(open_), Indent((Line(soft=True), Group(tuple(joined)))), Line(soft=True), Text(close))
    )


def parenthesize_if_breaks(doc: Doc) -> Doc:
    """``(`` and ``)`` around ``doc`` on lines of their own, only when it does not fit."""
    return Group((IfBreak("("), Indent((Line(soft=True), doc)), Line(soft=True), IfBreak(")")))


# -- expressions -----------------------------------------------------------------

_OPERATORS: dict[type[ast.AST], str] = {
    ast.And: "and",
    ast.Or: "or",
    ast.BitOr: "|",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}


class _Expressions:
    """Documents for the expressions of one statement, its source text at hand."""

    def __init__(self, source: str) -> None:
        self.source = source

    def text(self, node: ast.AST) -> Text:
        segment = ast.get_source_segment(self.source, node)
        assert segment is not None, ast.dump(node)
        return Text(segment)

    def doc(self, node: ast.expr) -> Doc:
        if isinstance(node, ast.Call):
            arguments = [self.doc(a) for a in node.args]
            arguments += [(Text(f"{k.arg}="), self.doc(k.value)) for k in node.keywords]
            return (self.text(node.func), brackets("(", arguments, ")"))
        if isinstance(node, ast.Subscript) and not self._parenthesized(node.slice):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return (self.text(node.value), brackets("[", [self.doc(i) for i in items], "]"))
        if self.bracketed(node):
            assert isinstance(node, (ast.List, ast.Tuple))
            open_, close = ("[", "]") if isinstance(node, ast.List) else ("(", ")")
            elements = [self.doc(item) for item in node.elts]
            if isinstance(node, ast.Tuple) and len(elements) == 1:  # its comma is not magic
                return (Text("("), elements[0], Text(",)"))
            return brackets(open_, elements, close)
        operands = self.chain(node)
        if operands is not None:
            return Group(operands)
        return self.text(node)

    def chain(self, node: ast.expr) -> tuple[Doc, ...] | None:
        """An operator chain broken before each operator, or None for other expressions."""
        if isinstance(node, ast.IfExp):
            body, test, orelse = self.doc(node.body), self.doc(node.test), self.doc(node.orelse)
            return (body, Line(), Text("if "), test, Line(), Text("else "), orelse)
        split = _operands(node)
        if split is None:
            return None
        operands, operators = split
        parts: list[Doc] = [self.doc(operands[0])]
        for operator, operand in zip(operators, operands[1:], strict=True):
            parts += [Line(), Text(f"{operator} "), self.doc(operand)]
        return tuple(parts)

    def bracketed(self, node: ast.expr) -> bool:
        """A list display, or a tuple in parentheses: split at its brackets as a call is."""
        return isinstance(node, ast.List) or (
            isinstance(node, ast.Tuple) and self._parenthesized(node)
        )

    def _parenthesized(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Tuple) and self.text(node).text.startswith("(")

    def value(self, node: ast.expr) -> Doc:
        """A statement's expression: a chain gets parentheses when it does not fit,
        unless ruff splits its last call instead (see :func:`_omits_parentheses`)."""
        chain = self.chain(node)
        if chain is None:
            return self.doc(node)
        split = _operands(node)
        if split is None or not _omits_parentheses(split[0]):
            return parenthesize_if_breaks(Group(chain))
        # No parentheses: only brackets may break, so operands that are chains stay flat.
        operands, operators = split
        parts = [self._bracketed_or_flat(operands[0])]
        for operator, operand in zip(operators, operands[1:], strict=True):
            parts += [Text(f" {operator} "), self._bracketed_or_flat(operand)]
        return tuple(parts)

    def omits_parentheses(self, node: ast.expr) -> bool:
        split = _operands(node)
        return split is not None and _omits_parentheses(split[0])

    def _bracketed_or_flat(self, node: ast.expr) -> Doc:
        return self.doc(node) if isinstance(node, (ast.Call, ast.Subscript)) else self.text(node)


def _operands(node: ast.expr) -> tuple[list[ast.expr], list[str]] | None:
    """The operands and operators of a chain (``and``/``or``, ``|``, comparisons)."""
    if isinstance(node, ast.BoolOp):
        return list(node.values), [_OPERATORS[type(node.op)]] * (len(node.values) - 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        nested = isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.BitOr)
        left = _operands(node.left) if nested else None
        operands, operators = left if left is not None else ([node.left], [])
        return [*operands, node.right], [*operators, "|"]
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators], [_OPERATORS[type(op)] for op in node.ops]
    return None


def _omits_parentheses(operands: list[ast.expr]) -> bool:
    """Two operands, the last a call or subscript: ruff splits that one's brackets
    rather than adding parentheses (``a and f(`` / ``x`` / ``)``)."""
    return len(operands) == 2 and isinstance(operands[-1], (ast.Call, ast.Subscript))


# -- statements ------------------------------------------------------------------


def statement(line: str, width: int = WIDTH, *, item: bool = False) -> str:
    """One statement, as the template wrote it on one line, laid out within ``width``;
    with ``item``, one item of a bracketed list that the template broke one per line
    (``f(x),`` or ``name=value,``).

    A line that fits, or a shape this module does not know, is returned unchanged.
    """
    if len(line) <= width:
        return line
    code = line.lstrip(" ")
    column = len(line) - len(code)
    try:
        laid_out = (_item if item else _statement)(code, column, width)
    except SyntaxError:
        return line
    return line if laid_out is None else " " * column + laid_out


def _item(code: str, column: int, width: int) -> str | None:
    comma = code.endswith(",")
    e = _Expressions(f"_({code.removesuffix(',')})")
    call = ast.parse(e.source, mode="eval").body
    assert isinstance(call, ast.Call)
    if len(call.args) + len(call.keywords) != 1:
        return None
    if call.keywords:
        keyword = call.keywords[0]
        doc: Doc = (Text(f"{keyword.arg}="), e.doc(keyword.value))
    else:
        doc = e.doc(call.args[0])
    return render((doc, Text("," if comma else "")), column, width)


def _statement(code: str, column: int, width: int) -> str | None:
    keyword = code.split(" ", 1)[0]
    if keyword in ("if", "elif") and code.endswith(":"):
        test = code[len(keyword) + 1 : -1]
        e = _Expressions(test)
        condition = ast.parse(test, mode="eval").body
        return render((Text(keyword + " "), e.value(condition), Text(":")), column, width)
    if keyword in ("def", "class") and code.endswith(":"):
        return _header(code, column, width)
    e = _Expressions(code)
    tree = ast.parse(code).body
    if len(tree) != 1:
        return None
    node = tree[0]
    if isinstance(node, ast.Return) and node.value is not None:
        return render((Text("return "), e.value(node.value)), column, width)
    if isinstance(node, ast.Raise) and node.exc is not None:
        cause: Doc = () if node.cause is None else (Text(" from "), e.text(node.cause))
        return render((Text("raise "), e.value(node.exc), cause), column, width)
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return _assignment(e, (e.text(node.targets[0]), Text(" = ")), node.value, column, width)
    if isinstance(node, ast.AnnAssign):
        target = (e.text(node.target), Text(": "), e.value(node.annotation))
        if node.value is None:
            if isinstance(node.annotation, (ast.Name, ast.Attribute)):  # unsplittable
                head = code[: code.index(": ") + 2]
                return _assignment(e, Text(head), node.annotation, column, width)
            return render(target, column, width)
        if isinstance(node.value, ast.Constant) and not isinstance(node.value.value, str):
            # ruff would rather put the value in parentheses than split the annotation
            head = code[: code.index(" = ") + 3]
            if column + len(head) + 1 <= width:
                return _parenthesized(head, e.text(node.value), column, width)
        return _assignment(e, (*target, Text(" = ")), node.value, column, width)
    if isinstance(node, ast.Expr):
        value = node.value
        return render(e.value(value), column, width)
    return None


def _assignment(e: _Expressions, target: Doc, value: ast.expr, column: int, width: int) -> str:
    """``x = value``, chosen as ruff's "best fit" does: a name, a string, or a chain ruff
    would split at its last call, is put in parentheses when that makes it fit on one
    line; else a chain is split at that call if its first line fits, or else broken
    inside parentheses."""
    head = render(target, column, width)
    if isinstance(value, (ast.Call, ast.Subscript)) or e.bracketed(value):
        laid_out = render((target, e.value(value)), column, width)
        if column + len(laid_out.split("\n", 1)[0]) <= width:
            return laid_out
        return _parenthesized(head, e.value(value), column, width)  # its head is too long
    bare = isinstance(value, (ast.Name, ast.Attribute)) or (
        isinstance(value, ast.Constant) and isinstance(value.value, str)
    )
    if not bare and (e.chain(value) is None or not e.omits_parentheses(value)):
        return render((target, e.value(value)), column, width)
    flat = e.text(value).text
    if column + INDENT + len(flat) <= width:
        return _parenthesized(head, Text(flat), column, width)
    laid_out = render((target, e.value(value)), column, width)
    chain = e.chain(value)
    if chain is None or column + len(laid_out.split("\n", 1)[0]) <= width:
        return laid_out
    return render((target, parenthesize_if_breaks(Group(chain))), column, width)


def _parenthesized(head: str, value: Doc, column: int, width: int) -> str:
    """``head(`` and ``)`` around ``value`` laid out on the lines between them."""
    inner = " " * (column + INDENT) + render(value, column + INDENT, width)
    return f"{head}(\n{inner}\n{' ' * column})"


def _header(code: str, column: int, width: int) -> str | None:
    """``def f(a: A, b: B) -> R:`` or ``class C(Base, k=v):``, split at its brackets."""
    e = _Expressions(code + "\n    pass")
    node = ast.parse(e.source).body[0]
    if isinstance(node, ast.FunctionDef):
        a = node.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults:
            return None
        params = brackets(
            "(",
            [
                e.text(p) if p.annotation is None else (Text(f"{p.arg}: "), e.doc(p.annotation))
                for p in a.args
            ],
            ")",
        )
        name = Text(f"def {node.name}")
        if node.returns is None:
            return render((name, params, Text(":")), column, width)
        laid_out = render(
            (name, params, Text(" -> "), e.text(node.returns), Text(":")), column, width
        )
        if all(len(line) <= width for line in laid_out.split("\n")[1:]):
            return laid_out
        # ruff splits the parameters first, and the return annotation only when that
        # is not enough.
        assert isinstance(params, Group)
        params = Group(params.parts, broken=True)
        return render((name, params, Text(" -> "), e.value(node.returns), Text(":")), column, width)
    if isinstance(node, ast.ClassDef):
        bases = [e.doc(b) for b in node.bases]
        bases += [(Text(f"{k.arg}="), e.doc(k.value)) for k in node.keywords]
        return render(
            (Text(f"class {node.name}"), brackets("(", bases, ")"), Text(":")), column, width
        )
    return None


def long_lines(source: str, width: int = WIDTH) -> str:
    """``source`` with every statement longer than ``width`` laid out by :func:`statement`.

    Lines inside multi-line strings (docstrings) and lines with a comment stay as written.
    """
    keep: set[int] = set()
    depth = 0
    started: set[int] = set()
    inside: set[int] = set()  # lines that start inside brackets: items of a list
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        row = token.start[0]
        if row not in started:
            started.add(row)
            if depth:
                inside.add(row)
        if token.type == tokenize.COMMENT:
            keep.add(row)
        elif token.type == tokenize.STRING and row != token.end[0]:
            keep.update(range(row, token.end[0] + 1))
        elif token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
    lines = source.split("\n")
    return "\n".join(
        line if number in keep else statement(line, width, item=number in inside)
        for number, line in enumerate(lines, start=1)
    )
