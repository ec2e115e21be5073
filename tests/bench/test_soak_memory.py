"""The soak's memory verdict: a leak raises the lowest sample; a full receive queue, or memory
that malloc keeps after a free, does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


# A fresh interpreter with glibc's default malloc settings: 12 MB freed (a received ZMQ
# message) raises the dynamic mmap threshold, so 4 MB blocks then come from the heap; every
# other one is freed, and the live ones between keep glibc from giving those back.
_HEAP_PATTERN = """
import ctypes, json, sys
from bench.soak import _memory, _resident

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def touched(size):
    block = libc.malloc(size)
    libc.memset(block, 1, size)
    return block

libc.free(touched(12 << 20))
baseline = sum(_memory())
blocks = [touched(4 << 20) for _ in range(20)]
allocated = sum(_memory())
for block in blocks[::2]:
    libc.free(block)
kept = sum(_resident())
measured = sum(_memory())
found = {"baseline": baseline, "allocated": allocated, "kept": kept, "measured": measured}
json.dump(found, sys.stdout)
"""


def test_memory_that_malloc_keeps_after_free_is_not_counted_and_live_memory_is() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLIBC_TUNABLES", "MALLOC_"))}
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _HEAP_PATTERN],
        env=dict(env, PYTHONPATH=root),
        capture_output=True,
        check=True,
        timeout=120,
    )
    found = json.loads(done.stdout)
    assert found["allocated"] - found["baseline"] >= 78 * MB  # 20 x 4 MB, touched
    assert found["kept"] - found["allocated"] >= -2 * MB  # the 40 MB freed: still resident
    assert found["allocated"] - found["measured"] >= 38 * MB  # not counted after the trim
    assert found["measured"] - found["baseline"] >= 38 * MB  # the 40 MB still live: counted
