"""The soak's memory verdict: a leak raises the lowest sample, a full receive queue does not."""

from __future__ import annotations

from bench.soak import REPORT_S, WINDOW_S, _floors

WINDOW = int(WINDOW_S / REPORT_S)
MB = 1 << 20


def test_a_queue_full_at_the_last_sample_is_not_growth() -> None:
    # 300 MB steady; every tenth sample holds four 12 MB messages in the queue, the last too.
    samples = [300 * MB + (48 * MB if i % 10 == 9 else 0) for i in range(10 * WINDOW)]
    assert samples[-1] == 348 * MB
    assert _floors(samples, warmup=WINDOW_S) == (300 * MB, 300 * MB)


def test_a_leak_raises_the_floor() -> None:
    # 1 MB more every window: the last window's lowest sample is 8 MB above the first's.
    samples = [300 * MB + (i // WINDOW) * MB for i in range(10 * WINDOW)]
    start, end = _floors(samples, warmup=WINDOW_S)
    assert (start, end) == (301 * MB, 309 * MB)


def test_the_warm_up_is_left_out_and_a_short_run_uses_half_of_what_remains() -> None:
    samples = [900 * MB] * 40 + [300 * MB] * 20 + [310 * MB] * 20  # a 40 s run after warm-up
    assert _floors(samples, warmup=20.0) == (300 * MB, 310 * MB)
