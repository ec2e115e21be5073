"""``make bench``'s Rust rows: the Rust runtime decodes and encodes each payload's message
beside Python, with no tensor byte copied by Rust's decode (bench/rust.py)."""

from __future__ import annotations

from bench import report
from bench.runner import Budget
from bench.rust import OPERATIONS, run_rust
from mmcodec.payloads import small_items

TINY = Budget(warmup=1, min_reps=3, max_reps=3, seconds=0.0)


def test_the_rust_rows_time_both_runtimes_on_one_message() -> None:
    (row,) = run_rust({"64 small items": small_items(0)}, TINY, progress=lambda _: None)
    assert row.payload == "64 small items"
    assert row.rust_copied == 0
    for op in OPERATIONS:
        assert row.python[op].n == 3 and row.rust[op].n == 3
        assert row.rust[op].median > 0
    results = report.Results("python -m bench", "now", {}, [], rust=[row])
    table = report.rust_table(results)
    assert table.rows[0][0] == "64 small items" and table.rows[0][-1] == "0"
    assert "Rust and Python runtimes, same message" in report.text(results)
