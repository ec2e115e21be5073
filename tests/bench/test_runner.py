"""The benchmark's machinery, run with tiny repetitions: structure and accounting, never timings."""

from __future__ import annotations

import os
import re
from collections import UserDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bench import crossprocess, report
from bench.__main__ import main
from bench.baselines import Baseline, Frame, MsgspecHooks, PickleInBand
from bench.crossprocess import MMCODEC_SHM, SHM_METHOD, CrossResult, Receiver, shm_pool_bytes
from bench.inprocess import (
    RAGGED_SIZES,
    InProcessResult,
    Skipped,
    memcpy_bandwidth,
    ragged_tensors,
    run_inline_sweep,
    run_inprocess,
    single_tensor,
)
from bench.runner import (
    METHODS,
    MMCODEC,
    Budget,
    Mmcodec,
    Stats,
    copied_tensor_bytes,
    measure,
    measure_interleaved,
    method_by_name,
    touch,
    wire_bytes,
)
from mmcodec.domain.multimodal import (
    BatchedField,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    NestedTensors,
)
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import llava, small_items, tensor_bytes

TINY = Budget(warmup=1, min_reps=2, max_reps=2, seconds=0.0)
SMALL_BYTES = 64 * (3 * 8 + 16 * 16 * 2) + 128 * 4 + 2 * 4  # distinct tensor bytes: 34,824
LLAVA_BYTES = 3 * 336 * 336 * 2


# -- Stats and measure ------------------------------------------------------------------------


def test_stats_sorts_and_interpolates_quantiles() -> None:
    stats = Stats.of([5.0, 1.0, 3.0, 2.0, 4.0])
    assert stats.samples == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert stats.n == 5
    assert stats.median == 3.0
    assert stats.p10 == pytest.approx(1.4)
    assert stats.p90 == pytest.approx(4.6)
    assert Stats.of([2.0, 1.0]).median == 1.5
    assert Stats.of([7.0]).p90 == 7.0


def test_stats_rejects_no_samples_and_bad_quantiles() -> None:
    with pytest.raises(ValueError, match=r"^no samples$"):
        Stats.of([])
    with pytest.raises(ValueError, match=r"^quantile 1\.5 outside \[0, 1\]$"):
        Stats.of([1.0]).quantile(1.5)


def _counter() -> tuple[list[int], Callable[[], None]]:
    calls = [0]

    def fn() -> None:
        calls[0] += 1

    return calls, fn


def test_measure_warms_up_then_samples_within_the_budget() -> None:
    calls, fn = _counter()
    stats = measure(fn, Budget(warmup=2, min_reps=3, max_reps=10, seconds=0.0))
    assert (calls[0], stats.n) == (5, 3)  # the time budget is spent: stop at min_reps
    calls, fn = _counter()
    stats = measure(fn, Budget(warmup=0, min_reps=1, max_reps=4, seconds=3600.0))
    assert (calls[0], stats.n) == (4, 4)  # max_reps caps a budget that is never spent
    assert all(s >= 0 for s in stats.samples)


def test_measure_interleaved_runs_calls_side_by_side_in_rounds() -> None:
    calls: list[str] = []
    fns: dict[str, Callable[[], None]] = {
        "a": lambda: calls.append("a"),
        "b": lambda: calls.append("b"),
    }
    budget = Budget(warmup=1, min_reps=5, max_reps=30, seconds=0.0)
    stats = measure_interleaved(fns, budget, rounds=3)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3  # warm-up, then 3 rounds of 2
    assert {k: s.n for k, s in stats.items()} == {"a": 6, "b": 6}
    with pytest.raises(ValueError, match=r"^rounds must be positive, not 0$"):
        measure_interleaved(fns, TINY, rounds=0)


# -- methods ----------------------------------------------------------------------------------


def test_methods_are_mmcodec_then_the_baselines_and_found_by_name() -> None:
    assert [m.name for m in METHODS] == [
        "mmcodec",
        "pickle",
        "pickle oob",
        "torch.save",
        "msgspec hooks",
    ]
    for method in METHODS:
        assert method_by_name(method.name) is method
    variant = method_by_name("mmcodec inline<4096")
    assert isinstance(variant, Mmcodec)
    assert (variant.name, variant.inline_threshold) == ("mmcodec inline<4096", 4096)
    assert Mmcodec(0).name == "mmcodec inline<0"
    with pytest.raises(KeyError, match="unknown method 'mmcodec inline<x'"):
        method_by_name("mmcodec inline<x")


def test_mmcodec_method_round_trips_at_any_threshold() -> None:
    items = small_items(1)
    for threshold in (0, 65536):
        method = Mmcodec(threshold, label_threshold=True)
        assert method.decode(method.encode(items)) == items
    frames = Mmcodec(0).encode(items)
    assert len(frames) == 1 + 4  # one frame per storage region: grid, pixels, embed, scale
    assert len(Mmcodec(65536).encode(items)) == 1  # everything inline


# -- touch, wire bytes, copies ----------------------------------------------------------------


def test_touch_counts_every_tensor_reference() -> None:
    assert touch(small_items(0)) == (64 * 4, 64 * (24 + 512 + 512 + 8))
    data: NestedTensors = (
        torch.ones(2),
        [torch.zeros(0, 3), 3, (torch.ones(1, dtype=torch.int8),)],
    )
    item = MultiModalKwargsItem(
        {
            "x": MultiModalFieldElem(data, BatchedField()),
            "y": MultiModalFieldElem(None, BatchedField()),
        }
    )
    assert touch(MultiModalKwargsItems({"image": [item, None], "audio": []})) == (3, 8 + 0 + 1)


class _UserItems(UserDict[str, Any]):
    """Stands in for vLLM's item classes, which are UserDicts; counts Python-level lookups."""

    lookups = 0

    def __getitem__(self, key: str) -> Any:
        _UserItems.lookups += 1
        return super().__getitem__(key)


def test_touch_reads_user_dicts_through_their_entries() -> None:
    items = small_items(0)
    wrapped = _UserItems(
        {
            modality: [None if item is None else _UserItems(item) for item in item_list]
            for modality, item_list in items.items()
        }
    )
    _UserItems.lookups = 0
    assert touch(wrapped) == touch(items) == (64 * 4, 64 * (24 + 512 + 512 + 8))  # type: ignore[arg-type]
    assert _UserItems.lookups == 0  # the entries were read from the wrapped dicts


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_touch_sees_the_same_references_after_every_method(method: Baseline) -> None:
    items = small_items(2)
    assert touch(method.decode(method.encode(items))) == touch(items)


def test_wire_bytes_sums_any_bytes_like() -> None:
    assert wire_bytes([b"ab", bytearray(3), np.zeros(2, dtype=np.int32).data]) == 13
    assert wire_bytes([]) == 0


def test_mmcodec_decodes_without_copying_frame_payloads() -> None:
    items = llava(0)
    decoded = mm.decode(mm.encode(items), mm.MultiModalKwargsItems)
    (source,) = [e.data for it in items["image"] if it for e in it.values()]
    (tensor,) = [e.data for it in decoded["image"] if it for e in it.values()]
    assert isinstance(source, torch.Tensor) and isinstance(tensor, torch.Tensor)
    assert tensor.data_ptr() == source.data_ptr()  # aliases the source: zero copies
    assert copied_tensor_bytes(items, decoded) == 0


def test_copied_bytes_count_inline_and_pickled_payloads() -> None:
    items = small_items(0)
    # mmcodec: per storage region, grid 1,536 B, pixels 32,768 B, embed 512 B, scale 8 B.
    assert copied_tensor_bytes(items, Mmcodec(0).decode(Mmcodec(0).encode(items))) == 0
    m1024 = Mmcodec(1024, label_threshold=True)
    assert copied_tensor_bytes(items, m1024.decode(m1024.encode(items))) == 512 + 8
    m64k = Mmcodec(65536)
    assert copied_tensor_bytes(items, m64k.decode(m64k.encode(items))) == SMALL_BYTES
    # hooks: per tensor, inline under 256 B (grid 24 B, scale 8 B) and once per item.
    hooks = MsgspecHooks()
    assert copied_tensor_bytes(items, hooks.decode(hooks.encode(items))) == 64 * (24 + 8)
    pickle = PickleInBand()
    assert copied_tensor_bytes(llava(0), pickle.decode(pickle.encode(llava(0)))) == LLAVA_BYTES


# -- in-process runs --------------------------------------------------------------------------


def test_run_inprocess_gives_one_result_per_payload_and_method() -> None:
    payloads = {"llava": llava(0), "small": small_items(0, n=4)}
    methods: list[Baseline] = [Mmcodec(), MsgspecHooks()]
    results, skipped = run_inprocess(
        payloads, methods, TINY, skip={("small", "msgspec hooks"): "not today"}
    )
    assert [(r.payload, r.method) for r in results] == [
        ("llava", "mmcodec"),
        ("llava", "msgspec hooks"),
        ("small", "mmcodec"),
    ]
    assert skipped == [Skipped("small", "msgspec hooks", "not today")]
    for r in results:  # interleaved: one sample per round, ten rounds
        assert (r.roundtrip.n, r.encode.n, r.decode.n, r.note) == (10, 10, 10, "")
    ours = results[0]
    assert (ours.wire_bytes, ours.frames) == (wire_bytes(mm.encode(llava(0))), 2)
    assert ours.copied_bytes == 0
    assert results[1].frames == 2


def test_slow_methods_are_timed_once() -> None:
    results, _ = run_inprocess({"llava": llava(0)}, [PickleInBand()], TINY, single_shot_above=0)
    (r,) = results
    assert (r.roundtrip.n, r.encode.n, r.decode.n) == (1, 1, 1)
    assert re.fullmatch(r"one call \(\d+\.\d s\)", r.note)
    assert (r.copied_bytes, r.frames) == (LLAVA_BYTES, 1)


def test_inline_sweep_reports_frames_and_copies_per_threshold() -> None:
    results = run_inline_sweep({"small": small_items(0)}, [0, 1024, 65536], TINY)
    assert [(r.threshold, r.frames, r.copied_bytes) for r in results] == [
        (0, 5, 0),
        (1024, 3, 520),
        (65536, 1, SMALL_BYTES),
    ]
    assert all(r.roundtrip.n == 10 and r.payload == "small" for r in results)


def test_ragged_tensors_give_the_threshold_one_region_per_tensor() -> None:
    items = ragged_tensors(0)
    (elem,) = [e for it in items["image"] if it for e in it.values()]
    assert isinstance(elem.data, list) and len(elem.data) == 64
    sizes = [t.nbytes for t in elem.data if isinstance(t, torch.Tensor)]
    assert sizes == [RAGGED_SIZES[i % 6] for i in range(64)]
    storages = {t.untyped_storage().data_ptr() for t in elem.data if isinstance(t, torch.Tensor)}
    assert len(storages) == 64
    results = run_inline_sweep({"ragged": items}, [0, 1024, 65536], TINY)
    below_1024 = sum(s for s in sizes if s < 1024)
    assert [(r.frames, r.copied_bytes) for r in results] == [
        (1 + 64, 0),
        (1 + sum(s >= 1024 for s in sizes), below_1024),
        (1, sum(sizes)),
    ]


def test_memcpy_bandwidth_times_each_size() -> None:
    out = memcpy_bandwidth([4096, 1 << 16], TINY)
    assert sorted(out) == [4096, 1 << 16]
    assert all(s.n == 2 for s in out.values())


def test_single_tensor_payloads_have_the_asked_size() -> None:
    items = single_tensor(2 * 2048, seed=1)
    assert tensor_bytes(items) == 4096
    (elem,) = [e for it in items["image"] if it for e in it.values()]
    assert isinstance(elem.data, torch.Tensor)
    assert (elem.data.dtype, tuple(elem.data.shape)) == (torch.bfloat16, (2, 1024))
    with pytest.raises(ValueError, match=r"^nbytes must be a positive multiple of 2048, not 100$"):
        single_tensor(100)


# -- cross-process ----------------------------------------------------------------------------


def test_receiver_decodes_and_acks_every_method() -> None:
    items = small_items(0, n=2)
    methods: list[Baseline] = [Mmcodec(), PickleInBand(), Mmcodec(0, label_threshold=True)]
    methods.append(SHM_METHOD)  # "mmcodec shm": a pool here, an attacher there
    with Receiver(shm_bytes=1 << 20) as receiver:
        results = receiver.measure("small", methods, items, TINY)
        assert [(r.payload, r.method) for r in results] == [("small", m.name) for m in methods]
        for r in results:  # one sample and one streamed message per method and round (5)
            assert r.latency.n == 5 and all(s > 0 for s in r.latency.samples)
            assert r.messages == 5 and r.throughput > 0
        with pytest.raises(RuntimeError, match=r"^the receiver does not know method 'nope'$"):
            receiver.latencies(_Unknown(), items, 1)


def test_mmcodec_shm_moves_large_frames_through_the_pool() -> None:
    items = llava(0)  # one 677 KB frame
    with Receiver(shm_bytes=4 << 20) as receiver:
        (result,) = receiver.measure("llava", [SHM_METHOD], items, TINY)
        assert result.method == "mmcodec shm" and result.throughput > 0
        pool = receiver._pool
        assert pool is not None and pool.size == 4 << 20
        assert pool.in_flight == 0  # the receiver released every frame it was sent
        assert pool.allocate(4 << 20) is not None  # ... and the whole pool is free again


def test_the_shared_memory_pool_fits_in_half_of_dev_shm(monkeypatch: pytest.MonkeyPatch) -> None:
    class Small:  # a default Docker container: 64 MB of /dev/shm, 60 MB free
        f_bavail, f_frsize = 60 * 256, 4096

    assert shm_pool_bytes(1 << 20) == 1 << 20
    monkeypatch.setattr(os, "statvfs", lambda path: Small())
    assert shm_pool_bytes(721 << 20) == 30 << 20
    monkeypatch.setattr(crossprocess, "shm_available", lambda: False)
    assert shm_pool_bytes(721 << 20) == 0


class _Unknown:
    """A method the receiver process cannot look up."""

    name = "nope"

    def encode(self, obj: Any) -> list[Frame]:
        raise AssertionError("never encoded: the receiver refuses the method first")

    def decode(self, frames: Sequence[Frame]) -> Any:
        raise AssertionError("never decoded")


# -- reports ----------------------------------------------------------------------------------


def _result(payload: str, method: str, rt: float, wire: int = 1, **ops: float) -> InProcessResult:
    return InProcessResult(
        payload,
        method,
        Stats.of([rt]),
        Stats.of([ops.get("encode", rt / 2)]),
        Stats.of([ops.get("decode", rt / 2)]),
        wire,
        1,
        0,
    )


def test_formatting() -> None:
    assert report.fmt_time(963e-6) == "963 µs"
    assert report.fmt_time(0.0211) == "21.1 ms"
    assert report.fmt_time(2.5) == "2.50 s"
    assert report.fmt_stats(Stats.of([0.002, 0.001, 0.003])) == "2.00 ms (1.20-2.80)"
    assert report.fmt_stats(Stats.of([25.0])) == "25.0 s (n=1)"
    assert report.fmt_ratio(1234.5) == "1,234x"
    assert report.fmt_bytes(2240164) == "2,240,164"


def test_targets_pass_and_fail_on_the_measured_figures() -> None:
    small, s2, s22, s67 = report.SMALL, report.SIZE_SMALL, report.SIZE_22, report.SIZE_LARGE
    results = report.Results(
        "python -m bench",
        "today",
        {},
        [],
        inprocess=[
            _result(small, "mmcodec", 1e-3, wire=30_000),
            _result(small, "pickle", 40e-3, wire=2_240_164),
            _result(small, "msgspec hooks", 4e-3, wire=83_339),
            _result(s2, "mmcodec", 1e-4, encode=50e-6, decode=40e-6),
            _result(s22, "mmcodec", 50e-6),
            _result(s22, "pickle", 30e-3),
            _result(s67, "mmcodec", 1e-4, encode=60e-6, decode=100e-6),
        ],
        memcpy={report.MEMCPY_REFERENCE: Stats.of([0.002])},
    )
    lines = [t.line() for t in report.check_targets(results)]
    assert lines == [
        "PASS  64 small items, round trip vs pickle protocol 5: 40.0x (40.0 ms vs 1.00 ms)"
        " (target ≥ 30x)",
        "FAIL  64 small items, round trip vs msgspec hooks: 4.00x (4.00 ms vs 1.00 ms)"
        " (target ≥ 5x)",
        "PASS  64 small items, wire bytes vs msgspec hooks: 30,000 vs 83,339, 0.36x"
        " (target ≤ 0.5x)",
        "N/A   64 small items, mmcodec encode vs the floor: not measured (target ≤ 2x)",
        "N/A   64 small items, mmcodec round trip vs the floor: not measured (target ≤ 1.5x)",
        "PASS  mmcodec encode time independent of size (67 MB vs 2 MB): 60.0 µs vs 50.0 µs,"
        " 1.20x (target ≤ 2x for 32x the bytes)",
        "FAIL  mmcodec decode time independent of size (67 MB vs 2 MB): 100 µs vs 40.0 µs,"
        " 2.50x (target ≤ 2x for 32x the bytes)",
        "PASS  mmcodec tensor bytes copied in-process, single-tensor payloads: 0 (target 0)",
        "PASS  22 MB, round trip vs pickle protocol 5: 600x (30.0 ms vs 50.0 µs) (target ≥ 500x)",
        "N/A   cross-process throughput, qwen2.5-vl (12.2 MB) vs memcpy 12 MiB: not measured"
        " (target ≥ 50 %)",
    ]
    mib = 1 << 20
    results.memcpy[256 * mib] = Stats.of([0.064])  # 4.19 GB/s; 12 MiB: 6.29 GB/s
    results.cross.append(
        CrossResult("qwen2.5-vl", "mmcodec", Stats.of([0.002]), 3.0e9, messages=10)
    )
    assert report.check_targets(results)[-1].line() == (
        "FAIL  cross-process throughput, qwen2.5-vl (12.2 MB) vs memcpy 12 MiB:"
        " memcpy 6,291 MB/s; mmcodec over ipc:// 3,000 MB/s, 48 % (72 % of memcpy 256 MiB)"
        " (target ≥ 50 %)"
    )
    # The shared-memory row is reported first, and the line names the row that meets it.
    results.cross.append(
        CrossResult("qwen2.5-vl", MMCODEC_SHM, Stats.of([0.002]), 5.0e9, messages=10)
    )
    assert report.check_targets(results)[-1].line() == (
        "PASS  cross-process throughput, qwen2.5-vl (12.2 MB) vs memcpy 12 MiB:"
        " memcpy 6,291 MB/s; mmcodec shm 5,000 MB/s, 79 % (119 % of memcpy 256 MiB);"
        " mmcodec over ipc:// 3,000 MB/s, 48 % (72 % of memcpy 256 MiB)"
        " (target ≥ 50 %, met by mmcodec shm)"
    )


def test_main_writes_tables_markdown_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--quick",
        "--payloads",
        "llava",
        "64 small items",
        "--no-cross",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "In-process — 64 small items: 34,824 tensor bytes in 130 tensors" in out
    assert re.search(r"^64 ragged tensors +65,536 ", out, re.M)  # the sweep's own payload
    assert re.search(
        r"^(PASS|FAIL)  64 small items, wire bytes vs msgspec hooks: [\d,]+ vs 83,339, "
        r"0\.\d\dx \(target ≤ 0\.5x\)$",
        out,
        re.M,
    )
    assert re.search(r"^64 small items +round trip +[\d.]+ (µs|ms) ", out, re.M)  # the floor table
    assert re.search(r"^(PASS|FAIL)  64 small items, mmcodec encode vs the floor: ", out, re.M)
    assert re.search(r"^total: \d+ s$", out, re.M)
    markdown = (tmp_path / "latest.md").read_text(encoding="utf-8")
    assert markdown.startswith("# mmcodec benchmark: latest results\n")
    assert "Command: `python -m bench --quick --payloads llava 64 small items" in markdown
    assert "| method | round trip | x | encode |" in markdown
    assert "![benchmark plot](bench.png)" in markdown
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [line for line in out.splitlines() if line.startswith(("mmcodec ", "pickle "))]
    assert len(rows) >= 4  # mmcodec and pickle, in both payload tables
    assert MMCODEC in out
