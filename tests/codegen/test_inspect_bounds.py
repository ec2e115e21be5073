"""``mmcodec inspect`` in proportion to the message (issue 21, items 3-5).

Each reproducer is a capture the decoder accepts; costs are asserted by output size and
by the peak allocation ``tracemalloc`` traces (or a process's address-space limit),
never by wall time. Each test here failed before the fix: item 3's capture made 80 MB of
text and a few hundred MB of paths at this size (each node's path built from its
parent's, each back-reference printing the full path it repeats), item 4's table one
entry per row, item 5's read reserved the 4 GiB limit for a 192-byte file.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

from mmcodec.codegen.cli import main
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.codec import codec_of
from mmcodec.runtime.inspect import DEFAULT_MAX_OUTPUT, describe, render_text

ROOT = Path(__file__).resolve().parents[2]
CODEC = codec_of(mm)
PER_BYTE = 100
"""The bound: memory within 100 bytes per byte of capture (100 MB per MB) ..."""
FIXED = 4 << 20
"""... plus what a description the size of the default budget takes, at most."""


def traced_peak(call: Callable[[], Any]) -> tuple[Any, int]:
    """(what ``call`` returned, peak bytes allocated while it ran)."""
    tracemalloc.start()
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def long_key_capture(key_chars: int, items: int) -> bytes:
    """Item 3: one long modality key, then ``items`` items ``{"": element}``, the element
    sent once and every later item a one-byte back-reference to it."""
    elem = mm.MultiModalFieldElem(torch.zeros(1), mm.BatchedField())
    batch: list[mm.MultiModalKwargsItem | None] = [
        mm.MultiModalKwargsItem({"": elem}) for _ in range(items)
    ]
    return bytes(mm.encode_bytes(mm.MultiModalKwargsItems({"k" * key_chars: batch})))


def refs_capture(rows: int) -> bytes:
    """Item 4: one tensor, and a refs table of ``rows`` entries all pointing at it."""
    body = {"x": [0, [0, False]]}
    run = ["float32", [1], b"\0" * 4]
    header = ["mmc", 2, "multimodal", 1, "MultiModalKwargsItem", [run], [0] * rows, body]
    return bytes(framing.join([memoryview(msgspec.msgpack.encode(header))]))


def described(capture: bytes, with_module: bool, **options: Any) -> tuple[dict[str, Any], str]:
    frames = framing.split(capture, mm.DEFAULT_LIMITS)
    tree = describe(frames, CODEC if with_module else None, **options)
    return tree, render_text(tree)


@pytest.mark.parametrize("with_module", [True, False], ids=["with module", "by position"])
def test_a_long_key_repeated_by_back_references_costs_in_proportion(with_module: bool) -> None:
    capture = long_key_capture(20_000, 4_000)
    assert len(capture) < 40_000
    mm.decode_bytes(capture, mm.MultiModalKwargsItems)  # a message the decoder accepts

    (tree, text), peak = traced_peak(lambda: described(capture, with_module))
    assert peak < PER_BYTE * len(capture) + FIXED, peak
    assert len(text) < 12 * len(capture), len(text)  # 80 MB before
    assert len(json.dumps(tree)) < 24 * len(capture)
    assert tree["truncated"] is False
    if with_module:
        [(key, items)] = tree["body"]["$dict"]
        assert key == {"$str": "k" * 64, "length": 20_000}  # shortened, its length kept
        # One element in every item: a column list, its column the element then its index.
        assert (items["$columns"], items["count"]) == ("MultiModalKwargsItem", 4_000)
        [column] = items["columns"]
        assert column["$values"] == "MultiModalFieldElem"
        assert len(column["values"]) == 4_000
        # Every back-reference names its value, by the same short path, spelled once.
        back = column["values"][1:]
        assert {b["$ref"] for b in back} == {"MultiModalFieldElem"}
        assert {b["to"] for b in back} == {f"$[{'k' * 24!r}...][0]['']"}
        assert len({id(b["to"]) for b in back}) == 1
        assert text.count("(the value at ") == 1
        assert text.count("-> MultiModalFieldElem #0") == 3_999


def test_the_issue_s_capture_is_described_in_proportion() -> None:
    """Item 3's capture as filed: a 100 KB key and 20,000 items (39-57 s, 6 GB, 2 GB of
    text before; the same bound per byte now)."""
    capture = long_key_capture(100_000, 20_000)
    (_, text), peak = traced_peak(lambda: described(capture, True))
    assert peak < PER_BYTE * len(capture) + FIXED, peak
    assert len(text) < 12 * len(capture)


@pytest.mark.parametrize("with_module", [True, False], ids=["with module", "by position"])
def test_a_refs_table_of_equal_entries_is_one_run(with_module: bool) -> None:
    capture = refs_capture(200_000)
    mm.decode_bytes(capture, mm.MultiModalKwargsItem)

    (tree, text), peak = traced_peak(lambda: described(capture, with_module))
    assert peak < PER_BYTE * len(capture) + FIXED, peak  # one entry per row before
    assert tree["refs"] == [{"first": 0, "count": 200_000, "step": 0}]
    assert [t["tensor"] for t in tree["tensors"]] == [0]  # one tensor, one entry
    assert "refs: 200000 entries: 0 (x200000)\ntensors: 1\n" in text
    assert len(text) < 4_000


def test_refs_runs_of_consecutive_and_single_entries() -> None:
    tree, text = described(refs_capture(3), False)
    assert tree["refs"] == [{"first": 0, "count": 3, "step": 0}]
    # A hand-made table: 0..2, then 1, then 2 twice.
    runs = [["int64", [], b"\0" * 24, 0, 3]]
    header = ["mmc", 2, "multimodal", 1, "MultiModalKwargsItem", runs, [0, 1, 2, 1, 2, 2], {}]
    capture = bytes(framing.join([memoryview(msgspec.msgpack.encode(header))]))
    tree, text = described(capture, True)
    assert tree["refs"] == [
        {"first": 0, "count": 3, "step": 1},
        {"first": 1, "count": 2, "step": 1},
        {"first": 2, "count": 1, "step": 0},
    ]
    assert "refs: 6 entries: 0..2, 1..2, 2\n" in text


@pytest.mark.parametrize("with_module", [True, False], ids=["with module", "by position"])
@pytest.mark.parametrize("output", ["text", "json"])
def test_output_stops_at_the_budget_with_a_marker(with_module: bool, output: str) -> None:
    # A million references to one tensor in the body: every one a node.
    t = torch.zeros(1)
    item = mm.MultiModalKwargsItem(
        {"x": mm.MultiModalFieldElem([t] * 1_000_000, mm.BatchedField())}
    )
    capture = bytes(mm.encode_bytes(item))
    budget = 64 << 10

    (tree, text), peak = traced_peak(lambda: described(capture, with_module, max_output=budget))
    shown = text if output == "text" else json.dumps(tree, indent=2)
    # The budget counts text; indented JSON spells the same nodes over more lines.
    assert len(shown) < (2 if output == "text" else 4) * budget, len(shown)
    assert peak < PER_BYTE * len(capture), peak  # the body's msgpack, and little else
    assert tree["truncated"] is True
    data = tree["body"]["$dict"][0][1]["fields"]["data"] if with_module else None
    if data is not None:
        assert data[-1] == {"$omitted": 1_000_000 - len(data) + 1}
        assert data[1]["again"] == "$['x'].data[0]"
    assert text.endswith(
        "(truncated: the description reached its output budget; "
        "mmcodec inspect --max-output raises it)\n"
    )
    assert "more (output budget reached)" in text


def test_the_default_budget_bounds_every_section() -> None:
    # 1,000 runs of 20 empty tensors (a header of 30 KB affords them): the tensor table
    # alone passes the budget.
    runs = [["float32", [0], b"", 0, 20] for _ in range(1000)]
    body = {"x": [0, [0, False]], "padding": "p" * 30_000}
    header = ["mmc", 2, "multimodal", 1, "MultiModalKwargsItem", runs, [], body]
    capture = bytes(framing.join([memoryview(msgspec.msgpack.encode(header))]))
    tree, text = described(capture, False, max_output=32 << 10)
    assert tree["truncated"] is True
    assert len(text) < 64 << 10
    assert tree["body"] == {"$omitted": 1}
    assert DEFAULT_MAX_OUTPUT == 1 << 20


def test_the_cli_takes_a_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "items.mmc"
    path.write_bytes(long_key_capture(10, 2_000))
    assert main(["inspect", str(path), "--max-output", "4000"]) == 0
    out, _ = capsys.readouterr()
    assert len(out) < 8_000 and "... " in out and out.endswith("raises it)\n")
    assert main(["inspect", str(path), "--max-output", "-1"]) == 2
    assert capsys.readouterr().err == "mmcodec inspect: --max-output takes a count >= 0\n"


# -- item 5: reads sized by the file ---------------------------------------------------


def small_capture(tmp_path: Path) -> Path:
    path = tmp_path / "small.mmc"
    item = mm.MultiModalKwargsItem({"x": mm.MultiModalFieldElem(torch.zeros(1), mm.BatchedField())})
    path.write_bytes(mm.encode_bytes(item))
    assert path.stat().st_size == 192
    return path


def test_a_small_capture_takes_little_memory_to_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = small_capture(tmp_path)
    main(["inspect", str(path)])  # imports what the command needs, once
    capsys.readouterr()
    code, peak = traced_peak(lambda: main(["inspect", str(path)]))
    assert code == 0
    assert peak < 1 << 20, peak  # read(4 GiB + 1) before


def _limit_address_space(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def test_under_an_address_space_limit_a_small_capture_is_shown(tmp_path: Path) -> None:
    path = small_capture(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "mmcodec.codegen", "inspect", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_limit_address_space(3 << 30),  # the issue's: MemoryError before
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("envelope: wire version 2")


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.mmc"
    with path.open("wb") as f:  # sparse: no disk, and no memory unless read
        f.truncate((4 << 30) + 1)
    result = subprocess.run(
        [sys.executable, "-m", "mmcodec.codegen", "inspect", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_limit_address_space(1 << 30),
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == f"{path}: $: {(4 << 30) + 1} bytes exceed the limit of {4 << 30}\n"


def test_stdin_is_read_as_it_comes(tmp_path: Path) -> None:
    path = small_capture(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "mmcodec.codegen", "inspect", "-"],
        input=path.read_bytes(),
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_limit_address_space(1 << 30),
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_load_frames_refuses_a_file_over_the_limit_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.mmc"
    with path.open("wb") as f:
        f.truncate(256 << 20)  # sparse
    error, peak = traced_peak(lambda: _raises(lambda: framing.load_frames(path, SMALL)))
    assert str(error) == f"$: {256 << 20} bytes exceed the limit of {SMALL.max_total_bytes}"
    assert peak < 1 << 20  # read whole before (256 MB)


SMALL = mm.Limits(max_total_bytes=1 << 20)


def _raises(call: Callable[[], Any]) -> Exception:
    with pytest.raises(mm.DecodeError) as caught:
        call()
    return caught.value


def test_a_body_of_a_million_empty_lists_costs_in_proportion_by_position() -> None:
    body = b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000
    head = ["mmc", 2, "multimodal", 1, "MultiModalKwargsItem", [], []]
    header = b"\x98" + b"".join(msgspec.msgpack.encode(x) for x in head) + body
    capture = bytes(framing.join([memoryview(header)]))
    (tree, _), peak = traced_peak(lambda: described(capture, False))
    assert tree["truncated"] is True
    assert peak < PER_BYTE * len(capture) + FIXED, peak


def test_tensor_values_stop_at_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = torch.arange(100_000, dtype=torch.int32)
    item = mm.MultiModalKwargsItem({"x": mm.MultiModalFieldElem(t, mm.BatchedField())})
    tree, text = described(bytes(mm.encode_bytes(item)), False, values=10**9, max_output=4096)
    [entry] = tree["tensors"]
    shown = len(entry["values"])
    assert entry["values"] == list(range(shown)) and 100 < shown < 4096 // 16
    assert entry["values_omitted"] == 100_000 - shown
    assert f", ... {100_000 - shown} more]\n" in text
    assert tree["truncated"] is True


# -- column lists (wire version 3) ---------------------------------------------------------


def column_list_capture(count: int, data: list[Any], absent: list[int] | None = None) -> bytes:
    """One modality as a column list of ``count`` items of one key: a fields column whose
    data column is ``data`` (tensor references, one value per present item) and whose
    field column is one BatchedField, then a bare index to it for every other item."""
    present = len(data)
    column = [1, data, [[0, False]] + [0] * (present - 1)]
    body = {"x": {"count": count, "keys": ["k"], "columns": [column], "absent": absent or []}}
    run = ["float32", [1], b"\0" * 4]
    header = ["mmc", 3, "multimodal", 1, "MultiModalKwargsItems", [run], [], body]
    return bytes(framing.join([memoryview(msgspec.msgpack.encode(header))]))


@pytest.mark.parametrize("with_module", [True, False], ids=["with module", "by position"])
def test_a_column_of_a_million_references_costs_in_proportion(with_module: bool) -> None:
    # 1,000 items, each holding a list of 1,000 references to one tensor: a data column
    # of a million references, every one a node that the budget stops.
    t = torch.zeros(1)
    field = mm.BatchedField()
    items: list[mm.MultiModalKwargsItem | None] = [
        mm.MultiModalKwargsItem({"k": mm.MultiModalFieldElem([t] * 1_000, field)})
        for _ in range(1_000)
    ]
    capture = bytes(mm.encode_bytes(mm.MultiModalKwargsItems({"x": items})))
    assert msgspec.msgpack.decode(framing.split(capture, mm.DEFAULT_LIMITS)[0])[1] == 3
    budget = 64 << 10

    (tree, text), peak = traced_peak(lambda: described(capture, with_module, max_output=budget))
    assert peak < PER_BYTE * len(capture) + FIXED, peak
    assert len(text) < 2 * budget, len(text)
    assert tree["truncated"] is True
    if with_module:
        [(_, columns)] = tree["body"]["$dict"]
        [column] = columns["columns"]
        data = column["fields"]["data"]
        assert data[-1] == {"$omitted": 1_000 - len(data) + 1}  # items past the budget
        assert data[0][1] == {
            "$tensor": 0, "dtype": "float32", "shape": [1], "again": "$['x'][0]['k'].data[0]"
        }  # fmt: skip
        assert column["fields"]["$omitted"] == 1 and "field" not in column["fields"]
    assert text.endswith("mmcodec inspect --max-output raises it)\n")


@pytest.mark.parametrize("with_module", [True, False], ids=["with module", "by position"])
def test_a_column_list_of_many_items_costs_what_its_decode_costs(with_module: bool) -> None:
    # 200,000 items at two bytes each: the densest a column list gets. The decoder builds
    # every item (its memory, not inspect's); inspect adds only what the budget allows.
    count = 200_000
    capture = column_list_capture(count, [0] * count)
    frames = framing.split(capture, mm.DEFAULT_LIMITS)
    _, decoding = traced_peak(lambda: mm.decode(frames, mm.MultiModalKwargsItems))

    (tree, text), peak = traced_peak(lambda: described(capture, with_module))
    bound = decoding + FIXED if with_module else PER_BYTE * len(capture) + FIXED
    assert peak < bound, (peak, decoding)
    assert len(text) < 2 * DEFAULT_MAX_OUTPUT
    assert tree["truncated"] is True
    if with_module:
        [(_, columns)] = tree["body"]["$dict"]
        assert (columns["count"], columns["present"], columns["absent"]) == (count, count, [])


def test_absent_items_are_runs_and_cost_no_memory_per_item() -> None:
    # Every other item absent (100,000 runs), then a run of 100,000: positions of the
    # values shown are found by binary search, the runs past the budget never made.
    p = 100_000
    absent = [*range(1, 2 * p, 2), *range(2 * p + 1, 3 * p + 1)]
    capture = column_list_capture(3 * p + 1, [0] * (p + 1), absent)
    frames = framing.split(capture, mm.DEFAULT_LIMITS)
    _, decoding = traced_peak(lambda: mm.decode(frames, mm.MultiModalKwargsItems))

    (tree, text), peak = traced_peak(lambda: described(capture, True, max_output=16 << 10))
    assert peak < decoding + FIXED, (peak, decoding)
    [(_, columns)] = tree["body"]["$dict"]
    runs = columns["absent"]
    assert runs[:2] == [{"first": 1, "count": 1}, {"first": 3, "count": 1}]
    assert runs[-1] == {"$omitted": p + 1 - (len(runs) - 1)}
    assert "(200000 absent), 1 key\n      absent: 1, 3, 5, " in text

    # With the budget for all of it: the last run is one entry, each value at its item.
    tree, text = described(capture, True, max_output=64 << 20)
    [(_, columns)] = tree["body"]["$dict"]
    assert columns["absent"][-1] == {"first": 2 * p + 1, "count": p}
    assert f", {2 * p - 1}, {2 * p + 1}..{3 * p}\n" in text
    data = columns["columns"][0]["fields"]["data"]
    assert data[-1]["again"] == "$['x'][0]['k'].data"
    assert f"\n          [{2 * p - 2}]: tensor 0: float32[1] (again)\n" in text
    assert f"\n          [{2 * p}]: tensor 0: float32[1] (again)\n" in text
