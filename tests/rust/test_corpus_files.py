"""``rust/corpus``, the messages the Rust mutation test starts from, is what Python
encodes today (a change of the wire or of the samples must reach it)."""

from __future__ import annotations

from tests.rust.corpus import CORPUS_DIR, corpus_files


def test_the_committed_corpus_is_what_python_encodes() -> None:
    expected = corpus_files()
    present = {p.name: p.read_bytes() for p in CORPUS_DIR.iterdir()}
    stale = sorted(name for name in expected if present.get(name) != expected[name])
    extra = sorted(set(present) - set(expected))
    assert not stale and not extra, (
        f"rust/corpus is stale ({stale}) or holds extra files ({extra}); "
        "run: make generate (or .venv/bin/python -m tests.rust.corpus)"
    )
