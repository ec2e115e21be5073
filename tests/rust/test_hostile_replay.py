"""The Python hostile corpus replayed against the Rust decoder.

The security suite's hand-written hostile messages (``tests/security/test_malformed.py``,
``test_bounded_work.py``), its hostile column lists and their fuzz
(``test_column_lists.py``), those of ``tests/rust/test_hostile_columns.py``, and a run of
its structure-aware fuzzer (``test_fuzz.py``, ``MMCODEC_FUZZ_EXAMPLES`` cases) are
recorded as they decode in Python
(``tests/rust/record_decodes.py``): bytes, type, limits and outcome. The Rust decoder,
given each with the same limits, must reject what Python rejects and accept what Python
accepts; where both reject, it names the same value (the path), and for most cases says
the same thing.

Where the two may differ, by design (docs/rust.md, "Differences"):

* an int above int64's range inside a value: Python's ints reach uint64, a Rust ``i64``
  field does not (a ``u64`` field does);
* msgpack nested more than ``max_nesting`` (512) deep in the header: Python's bound is its
  recursion limit, about 1,000 (both reject deeper nesting);
* the wording of an error that msgspec words (a type mismatch found while matching the
  body), and which of two errors in one message is reported first.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.rust.cargo import ROOT, run

SOURCES = [
    "tests/security/test_malformed.py",
    "tests/security/test_bounded_work.py",
    "tests/security/test_fuzz.py",
    "tests/security/test_column_lists.py",
    "tests/rust/test_hostile_columns.py",
]
RECORDING = ["-p", "tests.rust.record_decodes"]
FUZZ_EXAMPLES = 3000
"""Fuzzer cases recorded (a share of them per fuzz test); each is replayed."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Any]]:
    """(Python's outcome, Rust's result) per recorded case."""
    folder = tmp_path_factory.mktemp("hostile")
    env = {
        **os.environ,
        "MMCODEC_RECORD_DIR": str(folder),
        "MMCODEC_FUZZ_EXAMPLES": str(FUZZ_EXAMPLES),
    }
    recorder = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *RECORDING, *SOURCES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert recorder.returncode == 0, recorder.stdout[-3000:]
    python = [json.loads(line) for line in (folder / "outcomes.jsonl").read_text().splitlines()]
    rust = {}
    for line in run("replay", folder / "manifest.txt").splitlines():
        result = json.loads(line)
        rust[result["case"]] = result["result"]
    return [(p, rust[p["case"]]) for p in python]


def _differs_by_design(python: dict[str, Any], rust: dict[str, Any]) -> bool:
    """An acceptance the two sides may disagree on (see the module's docstring)."""
    message = rust.get("error", {}).get("message", "")
    return bool(python["ok"]) and (
        message == f"Expected `int` <= {2**63 - 1}" or message == "message nested too deeply"
    )


def test_enough_cases_are_replayed(replayed: list[Any]) -> None:
    rejected = sum(1 for python, _ in replayed if not python["ok"])
    assert len(replayed) > 1500
    assert rejected > 1000


def test_rust_rejects_what_python_rejects_and_accepts_the_rest(replayed: list[Any]) -> None:
    wrong = [
        (python, rust)
        for python, rust in replayed
        if python["ok"] != ("error" not in rust) and not _differs_by_design(python, rust)
    ]
    assert not wrong, wrong[:5]


def test_rust_names_the_same_bad_value(replayed: list[Any]) -> None:
    both = [(p, r["error"]) for p, r in replayed if not p["ok"] and "error" in r]
    same_path = [p for p, r in both if p["path"] == r["path"]]
    same_message = [p for p, r in both if (p["path"], p["message"]) == (r["path"], r["message"])]
    kinds = collections.Counter(
        (p["message"][:40], r["message"][:40]) for p, r in both if p["path"] != r["path"]
    )
    print(
        f"{len(both)} rejected: same path {len(same_path)}, same path and message "
        f"{len(same_message)}; differing paths: {kinds.most_common(15)}"
    )
    assert len(same_path) >= 0.9 * len(both), kinds.most_common(15)
    assert len(same_message) >= 0.75 * len(both)
