"""The parts of the project's Markdown that tests check: code blocks, headings, links.

Enough of CommonMark for these pages: fenced code blocks (also indented inside list
items), ATX headings, inline links and images. Anchors follow GitHub's rule, so a link
that resolves here resolves on GitHub.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_FILE_MARK = re.compile(r"^ *<!-- file: (?P<path>\S+) -->$")
_HEADING = re.compile(r"^(?P<level>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(
    r"!?\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"  # [text], one level of [brackets] inside
    r"\((?P<target>[^()\s]*)(?:\s+\"[^\"]*\")?\)"  # (target "title")
)
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"(?P<anchor>[^\"]+)\"")


@dataclass(frozen=True)
class Block:
    """A fenced code block: ``lang`` is its info string's first word, up to a comma
    (``rust,ignore`` is ``rust``: rustdoc's attributes follow it)."""

    page: Path
    line: int
    """Line number of the block's first line of code (1-based)."""
    lang: str
    code: str
    file: str | None
    """The path from a ``<!-- file: PATH -->`` comment just before it: the page's example
    project holds this file (written, not run)."""
    indent: int
    """Columns of indentation removed from every line (a block inside a list item)."""

    @property
    def end(self) -> int:
        """Line number of the closing fence."""
        return self.line + self.code.count("\n")

    def where(self, line: int | None = None) -> str:
        """``page:line`` for messages (the block's first line unless ``line``)."""
        return f"{shown(self.page)}:{line or self.line}"


def shown(page: Path) -> str:
    """A page's path for messages: relative to the repository when inside it."""
    return str(page.relative_to(ROOT) if page.is_relative_to(ROOT) else page)


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        marker = _FILE_MARK.match(lines[index - 1]) if index else None
        body: list[str] = []
        index += 1
        start = index + 1
        while index < len(lines) and lines[index].strip() != fence:
            line = lines[index]
            body.append(line[indent:] if line[:indent].strip() == "" else line)
            index += 1
        code = "".join(line + "\n" for line in body)
        lang = (opening["info"].split() or [""])[0].split(",")[0]
        found.append(Block(page, start, lang, code, marker["path"] if marker else None, indent))
        index += 1  # the closing fence
    return found


def _prose_lines(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening["fence"]
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            yield number, line


def links(page: Path) -> list[Link]:
    found: list[Link] = []
    for number, line in _prose_lines(page):
        text = _CODE_SPAN.sub("", line)
        found.extend(Link(page, number, m["target"]) for m in _LINK.finditer(text))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without Markdown, lower-cased, punctuation
    dropped (letters, digits, marks, ``_``, ``-`` and spaces kept), spaces made ``-``."""
    text = _CODE_SPAN.sub(lambda m: m[2], heading)
    text = _LINK.sub(lambda m: m["text"], text)
    text = re.sub(r"<[^>]+>", "", text).replace("*", "")
    kept = (
        ch
        for ch in text.lower()
        if ch in "-_ " or ch.isalnum() or unicodedata.category(ch).startswith("M")
    )
    return "".join(kept).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor of a page: its headings' (repeats get -1, -2, ...) and explicit ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(page):
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading["text"])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(m["anchor"] for m in _HTML_ANCHOR.finditer(line))
    return frozenset(found)


def pages() -> list[Path]:
    """README.md and docs/*.md: the pages whose examples run."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
