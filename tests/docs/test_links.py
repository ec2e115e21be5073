"""Every link within the repository resolves: files, folders and anchors (GitHub's rule).

Checked: every Markdown file of the project, and mentions of ``docs/*.md`` or
``README.md`` (with an anchor or not) in its other text files (the hooks' comments,
docstrings), so that no pointer survives the section it points at.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.docs.markdown import ROOT, anchors, links

PENDING: frozenset[str] = frozenset()
"""Pages being written on other branches: links to them are let through while they are
missing. The lead empties this after merging them."""

_MENTION = re.compile(r"(?<![\w/.-])(?P<path>(?:docs/[\w.-]+|README)\.md)(?:#(?P<anchor>[\w-]+))?")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
_LINE_ANCHOR = re.compile(r"^L(?P<first>\d+)(?:-L(?P<last>\d+))?$")


def _project_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [
        ROOT / name for name in sorted(set(listed.split("\0")) - {""}) if (ROOT / name).is_file()
    ]


def _markdown() -> list[Path]:
    return [p for p in _project_files() if p.suffix == ".md"]


def _problem(page: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``page``) does not resolve, or None."""
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.is_relative_to(ROOT):
        return "points outside the repository"
    relative = resolved.relative_to(ROOT).as_posix()
    if not resolved.exists():
        return None if relative in PENDING else f"{relative} does not exist"
    if not anchor:
        return None
    if resolved.suffix == ".md":
        return None if anchor in anchors(resolved) else f"{relative} has no anchor #{anchor}"
    lines = _LINE_ANCHOR.match(anchor)
    if lines and resolved.is_file():
        count = len(resolved.read_text(encoding="utf-8").splitlines())
        last = int(lines["last"] or lines["first"])
        return None if 1 <= int(lines["first"]) <= last <= count else f"{relative} has no #{anchor}"
    return f"#{anchor} is not an anchor of {relative}"


@pytest.mark.parametrize("page", _markdown(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_of_a_page_resolves(page: Path) -> None:
    broken = []
    for link in links(page):
        if _EXTERNAL.match(link.target):
            continue
        problem = _problem(page, link.target)
        if problem:
            broken.append(f"{page.relative_to(ROOT)}:{link.line}: ({link.target}) {problem}")
    assert broken == [], "\n".join(broken)


def test_mentions_of_pages_in_other_files_resolve() -> None:
    broken = []
    for path in _project_files():
        if path.suffix in {".md", ".png", ".json"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for mention in _MENTION.finditer(line):
                target = mention["path"] + (f"#{mention['anchor']}" if mention["anchor"] else "")
                problem = _problem(ROOT / "x", target)
                if problem:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: ({target}) {problem}")
    assert broken == [], "\n".join(broken)


def test_pending_pages_are_still_pending() -> None:
    written = sorted(page for page in PENDING if (ROOT / page).exists())
    assert written == [], f"{written} exist now: remove them from PENDING in {__file__}"


def test_the_anchor_rule_is_github_s() -> None:
    from tests.docs.markdown import slug

    assert slug("Ray (`mmcodec.integrations.ray`, opt-in)") == "ray-mmcodecintegrationsray-opt-in"
    assert slug("Looking at a message: `mmcodec inspect`") == "looking-at-a-message-mmcodec-inspect"
    assert slug("Encode → decode: *zero* copy") == "encode--decode-zero-copy"
    assert slug("`from_hf_inputs` and [links](x.md)") == "from_hf_inputs-and-links"
