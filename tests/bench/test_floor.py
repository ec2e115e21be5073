"""The floor (bench/floor.py): it builds exactly what a codec builds, from the same memory,
and reads what an encoder must read; its measurement and targets. Never timings."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bench import report
from bench.floor import FLOOR_PAYLOADS, STEPS, FloorResult, encode_floor, measure_floor, plan
from bench.runner import Budget, Stats, copied_tensor_bytes, touch
from mmcodec.domain import multimodal as domain
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, small_items
from tests.vllm.strict import assert_same

TINY = Budget(warmup=1, min_reps=2, max_reps=2, seconds=0.0)


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_the_decode_floor_rebuilds_every_payload_from_its_own_memory(name: str) -> None:
    items = PAYLOADS[name](0)
    floor = plan(items, domain)
    decoded = floor.decode()
    # Every detail, and the object graph: what the source shares is shared, nothing else.
    assert_same(decoded, items)
    assert copied_tensor_bytes(items, decoded) == 0  # views of the source's memory
    assert touch(decoded) == touch(items)


def test_the_floor_builds_one_object_per_distinct_field_element_and_tensor() -> None:
    items = small_items(0)
    floor = plan(items, domain)
    assert [run[2] for run in floor.runs] == [64, 64, 1, 1]  # two batches, two shared
    assert len(floor.fields) == 4  # batched grid and pixels, shared embed and scale
    assert len(floor.elems) == 64 * 2 + 2  # a shared element is one object in every item
    decoded = floor.decode()
    first, second = decoded["image"][0], decoded["image"][1]
    assert first["embed"] is second["embed"]
    assert first["grid"].field is second["grid"].field
    assert first["grid"] is not second["grid"]


def test_the_encode_floor_reads_each_distinct_tensor_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    original = torch.Tensor.data_ptr

    def counting(self: torch.Tensor) -> int:
        reads.append(id(self))
        return original(self)

    monkeypatch.setattr(torch.Tensor, "data_ptr", counting)
    items = small_items(0)
    assert encode_floor(items) == 130
    assert len(reads) == len(set(reads)) == 130
    assert encode_floor(PAYLOADS["qwen2.5-vl x16"](0)) == 32


def _decode(frames: Any) -> Any:
    return mm.decode(frames, mm.MultiModalKwargsItems)


def test_measure_floor_times_both_sides_of_every_step() -> None:
    result = measure_floor(
        "64 small items", small_items(0), domain, mm.encode, _decode, TINY, rounds=1
    )
    assert set(result.codec) == set(result.floor) == set(STEPS)
    assert all(result.codec[s].n >= 2 and result.floor[s].n >= 2 for s in STEPS)
    assert result.ratio("encode") == result.codec["encode"].median / result.floor["encode"].median


def test_floor_targets_need_the_median_and_the_p10_within_the_bar() -> None:
    codec = {step: Stats.of([1.4] * 10) for step in STEPS}
    floor = {step: Stats.of([0.8, 0.8] + [1.0] * 8) for step in STEPS}  # p10 0.8, median 1.0
    floor["encode"] = Stats.of([1.0] * 10)
    lines = [t.line() for t in report.floor_targets([FloorResult(report.SMALL, codec, floor)], "x")]
    assert lines == [
        "PASS  64 small items, x encode vs the floor: 1.40x by median (1.40 s vs 1.00 s),"
        " 1.40x by p10 (target ≤ 2x)",
        "FAIL  64 small items, x round trip vs the floor: 1.40x by median (1.40 s vs 1.00 s),"
        " 1.75x by p10 (target ≤ 1.5x)",
    ]
    assert [t.passed for t in report.floor_targets([], "x")] == [None, None]
    assert FLOOR_PAYLOADS[0] == report.SMALL
