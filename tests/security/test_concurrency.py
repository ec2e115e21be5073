"""Threads sharing the module-level codec: no shared mutable state, so no crossed wires."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from mmcodec.generated import multimodal as mm
from tests.security.samples import same, tensor_of

THREADS = 8
ITERATIONS = 200


def _request(worker: int, iteration: int) -> mm.MultiModalKwargsItems:
    """A message whose every tensor and field depends on (worker, iteration)."""
    seed = worker * 100_003 + iteration
    g = torch.Generator().manual_seed(seed)
    rows = 1 + seed % 5
    batch = {
        "pixel_values": torch.randn(rows + 2, 24 + worker, generator=g),  # frames for some
        "grid": torch.tensor([[worker, iteration, rows]] * 2),
        "mask": torch.rand(2, 8 + iteration % 7, generator=g) > 0.5,
        "token": torch.tensor(seed),
    }
    config = {
        "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes(
            "image", torch.tensor([1, rows + 1])
        ),
        "grid": mm.MultiModalFieldConfig.batched("image"),
        "mask": mm.MultiModalFieldConfig.batched("image", keep_on_cpu=worker % 2 == 0),
        "token": mm.MultiModalFieldConfig.shared("image", 2),
    }
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    items[f"worker{worker}"] = [None] * (iteration % 3)
    return items


def _work(worker: int, start: threading.Barrier) -> list[str]:
    start.wait()  # all threads hammer the codec at once
    problems = []
    for iteration in range(ITERATIONS):
        original = _request(worker, iteration)
        if iteration % 2:
            decoded = mm.decode_bytes(mm.encode_bytes(original), mm.MultiModalKwargsItems)
        else:
            decoded = mm.decode(mm.encode(original), mm.MultiModalKwargsItems)
        if not same(decoded, original) or decoded != original:
            problems.append(f"worker {worker} iteration {iteration}")
        grid = tensor_of(decoded, 0, "grid")
        if not isinstance(grid, torch.Tensor) or grid.tolist() != [
            worker,
            iteration,
            1 + (worker * 100_003 + iteration) % 5,
        ]:
            problems.append(f"worker {worker} iteration {iteration}: grid {grid!r}")
    return problems


def test_threads_encoding_and_decoding_through_the_shared_codec() -> None:
    start = threading.Barrier(THREADS)
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(_work, range(THREADS), [start] * THREADS))
    assert [p for problems in results for p in problems] == []
    assert len(results) == THREADS


def test_threads_decoding_hostile_and_valid_messages_together() -> None:
    # Errors are per call too: a thread rejecting bad input never disturbs another's decode.
    good = [bytes(f) for f in mm.encode(_request(0, 0))]
    bad = [good[0][:-3], *good[1:]]
    start = threading.Barrier(4)

    def work(index: int) -> int:
        start.wait()
        ok = 0
        for _ in range(150):
            if index % 2:
                try:
                    mm.decode(bad, mm.MultiModalKwargsItems)
                except mm.DecodeError as e:
                    ok += e.message == expected
            else:
                ok += mm.decode(good, mm.MultiModalKwargsItems) == _request(0, 0)
        return ok

    expected = "frame 0 is not an mmcodec header (Input data was truncated)"
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(work, range(4))) == [150] * 4
