"""The vLLM examples of README.md and docs/*.md run as written, in vLLM's environment.

``make test`` runs every other example (tests/docs); a Python block that imports vLLM
(or ``mmcodec.generated.multimodal_vllm``, or the vLLM plugin) runs here instead, with
the same runner: a fresh interpreter, each block on its own, warnings as errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.examples import PYTHON, needs_vllm, run_page
from tests.docs.markdown import ROOT, blocks, pages

VLLM_PAGES = [p for p in pages() if any(b.lang in PYTHON and needs_vllm(b) for b in blocks(p))]


def test_the_readme_has_a_vllm_example() -> None:
    assert ROOT / "README.md" in VLLM_PAGES


@pytest.mark.parametrize("page", VLLM_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_vllm_examples_of_a_page_run(page: Path, tmp_path: Path) -> None:
    outcome = run_page(page, tmp_path, vllm=True)
    assert outcome.failures == [], "\n\n".join(outcome.failures)


def test_the_readme_s_vllm_section_starts_with_installing_and_the_switch() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using mmcodec inside vLLM\n", 1)[1].split("\n## ", 1)[0]
    assert section.lstrip().startswith("```sh\npip install mmcodec")
    assert "`VLLM_PLUGINS`" in section and "(docs/vllm.md)" in section
