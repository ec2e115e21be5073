"""Every example of README.md and docs/*.md runs as written (see tests/docs/examples.py).

Python blocks run in a fresh interpreter, each on its own; CLI sessions run in a
temporary project and print what the page shows. After a deliberate change to a
command's output: ``MMCODEC_DOCS_UPDATE=1 pytest tests/docs`` rewrites the pages' shown
output, for review.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs.examples import PYTHON, commands, matches, needs_vllm, run_page
from tests.docs.markdown import ROOT, blocks, pages

pytestmark = pytest.mark.timeout(1200)

LANGUAGES = PYTHON | {"console", "sh", "yaml", "text", "json", "toml", "rust"}
"""What a block may be: ``bash``, ``shell`` or no language would hide whether it runs."""


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_examples_of_a_page_run(page: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    update = os.environ.get("MMCODEC_DOCS_UPDATE") == "1"
    outcome = run_page(page, project, update=update)
    assert outcome.failures == [], "\n\n".join(outcome.failures)


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_block_says_what_it_is(page: Path) -> None:
    unlabelled = [b.where() for b in blocks(page) if b.lang not in LANGUAGES]
    assert unlabelled == [], f"label these blocks with one of {sorted(LANGUAGES)}"


def _readme_blocks(lang: str) -> list[str]:
    return [b.code for b in blocks(ROOT / "README.md") if b.lang == lang]


def test_the_readme_shows_the_schema_workflow_end_to_end() -> None:
    """Write a schema, generate, import, encode and decode, check (and the hooks)."""
    readme = ROOT / "README.md"
    schema_files = [b for b in blocks(readme) if b.file and b.file.endswith(".yaml")]
    assert schema_files, "README.md shows no schema file"
    run = [
        c.command.split()[:2] for b in blocks(readme) if b.lang == "console" for c in commands(b)
    ]
    assert ["mmcodec", "generate"] in run and ["mmcodec", "check"] in run, run
    python = [b.code for b in blocks(readme) if b.lang in PYTHON and not needs_vllm(b)]
    assert any(".encode(" in code and ".decode(" in code for code in python)
    assert any("mmcodec-check" in code for code in _readme_blocks("yaml"))  # the hooks


def test_the_readme_links_every_page_of_the_docs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in pages()[1:] if f"](docs/{p.name})" not in text]
    assert missing == []


# -- the runner itself: it must fail where a reader would -------------------------


def _page(tmp_path: Path, text: str) -> tuple[Path, Path]:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    return page, project


def test_the_runner_reports_a_python_block_that_fails(tmp_path: Path) -> None:
    page, project = _page(
        tmp_path, "x\n\n```python\nvalue = 1\n```\n\n```py\nprint(value)  # another block\n```\n"
    )
    [failure] = run_page(page, project).failures
    assert "NameError: name 'value' is not defined" in failure
    assert f'File "{page}", line 8' in failure  # the page's own line


def test_the_runner_treats_warnings_as_errors(tmp_path: Path) -> None:
    page, project = _page(tmp_path, "```python\nimport warnings\nwarnings.warn('x')\n```\n")
    [failure] = run_page(page, project).failures
    assert "UserWarning: x" in failure


def test_the_runner_compares_shown_output_and_writes_files(tmp_path: Path) -> None:
    schema = "schema: a\nversion: 1\ntypes:\n  A: {struct: {x: int}}\n"
    text = (
        f"<!-- file: schema/a.yaml -->\n```yaml\n{schema}```\n\n"
        "```console\n$ mmcodec validate\nok: 2 schema file(s) valid\n$ mmcodec validate\n...\n```\n"
    )
    page, project = _page(tmp_path, text)
    [failure] = run_page(page, project).failures
    assert failure.endswith(
        "ok: 1 schema file(s) valid\n--- the page shows:\nok: 2 schema file(s) valid"
    )
    assert (project / "schema" / "a.yaml").read_text(encoding="utf-8") == schema

    page.write_text(text, encoding="utf-8")
    assert run_page(page, project, update=True).failures == []
    assert "$ mmcodec validate\nok: 1 schema file(s) valid\n$ mmcodec validate\n...\n" in (
        page.read_text(encoding="utf-8")
    )


def test_the_runner_runs_only_mmcodec_and_git_in_console_blocks(tmp_path: Path) -> None:
    page, project = _page(tmp_path, "```console\n$ pip install mmcodec\n```\n")
    [failure] = run_page(page, project).failures
    assert "console blocks run mmcodec and git commands only" in failure


def test_a_command_without_shown_output_must_succeed(tmp_path: Path) -> None:
    page, project = _page(tmp_path, "```sh\npip install nothing\nmmcodec validate\n```\n")
    [failure] = run_page(page, project).failures
    assert "`mmcodec validate` exited 2" in failure


def test_ellipsis_matches_any_lines() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b"])
    assert not matches(["a"], ["a", "b"])
