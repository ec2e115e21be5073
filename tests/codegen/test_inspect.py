"""``mmcodec inspect``: captured messages as trees, text and JSON; hostile captures rejected.

The payloads are the realistic builders of :mod:`mmcodec.payloads`; captures are written
with :func:`mmcodec.runtime.framing.save_frames` (frames) or are ``encode_bytes`` buffers.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmcodec import payloads
from mmcodec.codegen.cli import main
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.codec import codec_of
from mmcodec.runtime.inspect import describe, render_text
from tests.golden import common
from tests.security.samples import SAMPLES

MODULE = "mmcodec.generated.multimodal"
ROOT = Path(__file__).resolve().parents[2]


def _inspect(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def internvl_capture(tmp_path: Path) -> Path:
    """Two InternVL images as frames: a flat field, a batched one, a shared one."""
    path = tmp_path / "internvl.mmc"
    framing.save_frames(mm.encode(payloads.internvl(0)), path)
    return path


INTERNVL_TREE = """\
envelope: wire version 2, schema 'multimodal' major 1, root MultiModalKwargsItems
frames: 2 (0: 270 bytes, 1: 31309824 bytes), header first
tensor runs: 3
  run 0: bfloat16[13, 3, 448, 448] x 2, 31309824 bytes, frame 1 offset 0
  run 1: int64[] x 2, 16 bytes, inline
  run 2: int64[] x 1, 8 bytes, inline
refs: 5 entries: 0, 2, 4, 1, 3
tensors: 5
  tensor 0: bfloat16[13, 3, 448, 448] (run 0 #0)
  tensor 1: bfloat16[13, 3, 448, 448] (run 0 #1)
  tensor 2: int64[] (run 1 #0)
  tensor 3: int64[] (run 1 #1)
  tensor 4: int64[] (run 2 #0)
body:
  MultiModalKwargsItems
    ['image']: list[2]
      [0]: MultiModalKwargsItem
        ['pixel_values_flat']: MultiModalFieldElem
          .data: tensor 0: bfloat16[13, 3, 448, 448]
          .field: FlatField
            .slices: list[2]
              [0]: slice(0, 13)
              [1]: slice(13, 26)
            .dim: 0
            .keep_on_cpu: False
        ['image_num_patches']: MultiModalFieldElem
          .data: tensor 2: int64[]
          .field: BatchedField
            .keep_on_cpu: False
        ['image_token_id']: MultiModalFieldElem
          .data: tensor 4: int64[]
          .field: SharedField
            .batch_size: 2
            .keep_on_cpu: False
      [1]: MultiModalKwargsItem
        ['pixel_values_flat']: MultiModalFieldElem
          .data: tensor 1: bfloat16[13, 3, 448, 448]
          .field: -> BaseMultiModalField #0 (the value at $['image'][0]['pixel_values_flat'].field)
        ['image_num_patches']: MultiModalFieldElem
          .data: tensor 3: int64[]
          .field: -> BaseMultiModalField #1 (the value at $['image'][0]['image_num_patches'].field)
        ['image_token_id']: -> MultiModalFieldElem #2 (the value at $['image'][0]['image_token_id'])
"""
"""Tensors are numbered as the runs hold them (the refs table maps the body's references
to them); the FlatSlice union's values show as the slices they are, not as the wrapper
structs that carry them on the wire (FlatSlice_0)."""


def test_tree_of_a_real_payload_names_fields_types_tensors_and_back_references(
    internvl_capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _inspect([str(internvl_capture), "--module", MODULE], capsys)
    assert (code, err) == (0, "")
    assert out == INTERNVL_TREE


def test_without_a_module_the_body_is_shown_by_position(
    internvl_capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _inspect([str(internvl_capture)], capsys)
    assert code == 0
    head, body = out.split("body (by position; --module names fields):\n")
    assert head == INTERNVL_TREE.split("body:\n")[0]  # envelope, runs, refs: the same
    lines = body.splitlines()
    assert lines[:6] == [
        "  dict[1]",
        "    ['image']: list[2]",
        "      [0]: dict[3]",
        "        ['pixel_values_flat']: list[2]",
        "          [0]: 0",  # tensor reference 0: only the schema can tell
        "          [1]: list[4]",  # the FlatField, tag first
    ]
    assert "      [1]: dict[3]" in lines
    assert "        ['image_token_id']: 2" in lines  # the shared element: a bare back-reference


def test_json_output_with_tensor_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = payloads.qwen2_5_vl(0, n_images=2)
    capture = tmp_path / "qwen.bin"
    capture.write_bytes(mm.encode_bytes(items))  # an encode_bytes buffer is a capture too
    code, out, _ = _inspect(
        [str(capture), "--module", MODULE, "--format", "json", "--tensors", "5"], capsys
    )
    assert code == 0
    tree = json.loads(out)

    assert tree["envelope"] == {
        "wire_version": 2,
        "schema": "multimodal",
        "major": 1,
        "root": "MultiModalKwargsItems",
    }
    assert tree["runs"] == [
        {"run": 0, "dtype": "bfloat16", "shape": [5184, 1176], "count": 1,
         "bytes": 5184 * 1176 * 2, "frame": 1, "offset": 0},
        {"run": 1, "dtype": "bfloat16", "shape": [5120, 1176], "count": 1,
         "bytes": 5120 * 1176 * 2, "frame": 1, "offset": 5184 * 1176 * 2},
        {"run": 2, "dtype": "int64", "shape": [3], "count": 2, "bytes": 48, "inline": True},
    ]  # fmt: skip
    # The refs table as runs of entries: here four of one entry each.
    assert tree["refs"] == [{"first": t, "count": 1, "step": 0} for t in (0, 2, 1, 3)]
    assert [f["bytes"] for f in tree["frames"]] == [
        f.nbytes for f in framing.split(capture.read_bytes(), mm.DEFAULT_LIMITS)
    ]

    # One entry per tensor, in run order; values the same as the decoded tensors'.
    decoded = mm.decode_bytes(capture.read_bytes(), mm.MultiModalKwargsItems)
    images = decoded["image"]
    assert images[0] is not None and images[1] is not None
    expected = [
        images[0]["pixel_values"].data,
        images[1]["pixel_values"].data,
        images[0]["image_grid_thw"].data,
        images[1]["image_grid_thw"].data,
    ]
    for number, (entry, tensor) in enumerate(zip(tree["tensors"], expected, strict=True)):
        assert isinstance(tensor, torch.Tensor)
        assert entry["tensor"] == number
        assert entry["dtype"] == str(tensor.dtype).removeprefix("torch.")
        assert entry["shape"] == list(tensor.shape)
        assert entry["values"] == tensor.reshape(-1)[:5].double().tolist()
    assert tree["tensors"][2]["values"] == [1, 72, 72]
    assert tree["truncated"] is False

    body = tree["body"]
    assert body["$type"] == "MultiModalKwargsItems"
    [(modality, image_list)] = body["$dict"]
    assert modality == "image"
    first = dict(image_list[0]["$dict"])
    second = dict(image_list[1]["$dict"])
    pixels = first["pixel_values"]
    assert pixels["$struct"] == "MultiModalFieldElem"
    assert pixels["fields"]["data"] == {"$tensor": 0, "dtype": "bfloat16", "shape": [5184, 1176]}
    # The body's reference 1 is tensor 2 (refs[1]): the tensor the entries above call 2.
    assert first["image_grid_thw"]["fields"]["data"] == {
        "$tensor": 2,
        "dtype": "int64",
        "shape": [3],
    }
    flat = pixels["fields"]["field"]
    assert flat["$struct"] == "FlatField"
    assert flat["fields"]["slices"] == [  # the union's values, not their wire wrappers
        {"$slice": [0, 5184, None]},
        {"$slice": [5184, 10304, None]},
    ]
    assert second["pixel_values"]["fields"]["field"] == {
        "$ref": "BaseMultiModalField",
        "index": 0,
        "to": "$['image'][0]['pixel_values'].field",
    }


def test_a_tensor_referenced_twice_is_marked(capsys: pytest.CaptureFixture[str]) -> None:
    shared = torch.arange(4)
    elem = mm.MultiModalFieldElem([shared, shared], mm.BatchedField())
    frames = mm.encode(mm.MultiModalKwargsItem({"pair": elem}), type=mm.MultiModalKwargsItem)
    data = describe(frames, codec_of(mm), values=2)["body"]
    [(_, pair)] = data["$dict"]
    first, second = pair["fields"]["data"]
    assert first == {"$tensor": 0, "dtype": "int64", "shape": [4]}
    assert second == {**first, "again": "$['pair'].data[0]"}


def test_stdin_is_read_with_a_dash(internvl_capture: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mmcodec.codegen", "inspect", "-", "--module", MODULE],
        input=internvl_capture.read_bytes(),
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == INTERNVL_TREE


# -- hostile captures ----------------------------------------------------------------

_ENC = msgspec.msgpack.encode


def _header(body: bytes, runs: list[Any] | None = None) -> bytes:
    """Frame 0 with a hand-made body: an 8-entry msgpack array, the body's bytes last."""
    head = ["mmc", 2, "multimodal", 1, "MultiModalKwargsItems", runs or [], []]
    return b"\x98" + b"".join(_ENC(x) for x in head) + body


def _llava() -> bytes:
    return bytes(mm.encode_bytes(payloads.llava(0)))


def _with_frame_count(count: int) -> bytes:
    buffer = bytearray(_llava())
    struct.pack_into("<Q", buffer, 8, count)
    return bytes(buffer)


HOSTILE: dict[str, tuple[Callable[[], bytes | bytearray], str]] = {
    "empty": (lambda: b"", "buffer of 0 bytes is too short for a frame table"),
    "truncated table": (lambda: _llava()[:40], "frame table of 2 entries overruns the 40-byte"),
    "truncated payload": (lambda: _llava()[:-100], "lies outside the buffer's payload area"),
    "bad magic": (lambda: b"XXXX" + _llava()[4:], "buffer does not start with b'MMCB'"),
    "huge frame count": (lambda: _with_frame_count(1 << 40), "frame count 1099511627776 outside"),
    "huge tensor count": (
        lambda: framing.join(
            [memoryview(_header(_ENC({}), [["int64", [3], b"x" * 24, 0, 10**9]]))]
        ),
        "tensor count 1000000000 outside",
    ),
    "huge array": (
        lambda: framing.join([memoryview(_header(b"\xdd\x7f\xff\xff\xff"))]),
        "frame 0 is not an mmcodec header",
    ),
    "deep nesting": (
        lambda: framing.join([memoryview(_header(b"\x91" * 100_000 + b"\x01"))]),
        "nested too deeply",
    ),
    "extension type": (
        lambda: framing.join([memoryview(_header(b"\xc7\x01\x05x"))]),
        "extension type 5 in the message body|got `ext`",
    ),
    "not msgpack": (
        lambda: framing.join([memoryview(b"\xc1\xc1\xc1")]),
        "frame 0 is not an mmcodec header",
    ),
}


@pytest.mark.parametrize("with_module", [False, True], ids=["by position", "with module"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_capture_is_one_line_and_exit_1(
    case: str, with_module: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, expected = HOSTILE[case]
    path = tmp_path / "hostile.mmc"
    path.write_bytes(make())
    code, out, err = _inspect([str(path), *(["--module", MODULE] if with_module else [])], capsys)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"{path}: $"), err
    assert re.search(expected, err), err


def test_a_bad_body_is_found_with_the_module_and_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = _ENC({"image": [{"pixel_values": [7, [0, False]]}]})  # tensor 7 of none
    path = tmp_path / "bad.mmc"
    framing.save_frames([_header(body)], path)
    code, _, err = _inspect([str(path), "--module", MODULE], capsys)
    assert code == 1
    assert err == f"{path}: $['image'][0]['pixel_values'].data: tensor 7 out of range (0 tensors)\n"


def test_hostile_input_in_a_subprocess_prints_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "deep.mmc"
    path.write_bytes(HOSTILE["deep nesting"][0]())
    result = subprocess.run(
        [sys.executable, "-m", "mmcodec.codegen", "inspect", str(path), "--module", MODULE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"{path}: $: message nested too deeply\n"


def test_a_message_of_another_schema_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "point.mmc"
    point = common.Point(x=1, y=2)
    framing.save_frames(common.encode(point), path)
    code, _, err = _inspect([str(path), "--module", MODULE], capsys)
    assert code == 1
    assert err == (
        f"{path}: $: message is from schema 'common' major version 2; "
        "the module reads schema 'multimodal' major version 1\n"
    )
    code, out, _ = _inspect([str(path), "--module", "tests.golden.common"], capsys)
    assert code == 0
    assert out.endswith("body:\n  Point\n    .x: 1\n    .y: 2\n")


def test_the_message_never_chooses_what_is_imported(tmp_path: Path) -> None:
    # A message names its schema; without --module nothing is imported for it.
    path = tmp_path / "common.mmc"
    framing.save_frames(common.encode(common.Point(x=1, y=2)), path)
    probe = (
        "import sys\n"
        "from mmcodec.codegen.cli import main\n"
        f"code = main(['inspect', {str(path)!r}])\n"
        "assert code == 0, code\n"
        "print(sorted(m for m in sys.modules if m.startswith(('tests', 'mmcodec.generated'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.mmc"], "mmcodec inspect: cannot read missing.mmc: No such file or directory"),
        (["-", "--module", "json"], "mmcodec inspect: json is not a module generated by mmcodec"),
        (
            ["-", "--module", "no_such_module_here"],
            "mmcodec inspect: cannot import no_such_module_here: "
            "No module named 'no_such_module_here'",
        ),
        (["-", "--tensors", "-1"], "mmcodec inspect: --tensors takes a count >= 0"),
    ],
)
def test_usage_and_io_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _inspect(args, capsys)
    assert (code, out, err) == (2, "", message + "\n")


def test_save_frames_and_load_frames_round_trip(tmp_path: Path) -> None:
    items = payloads.llava(0)
    frames = mm.encode(items)
    path = tmp_path / "llava.mmc"
    framing.save_frames(frames, path)
    loaded = framing.load_frames(path)
    assert [bytes(f) for f in loaded] == [bytes(f) for f in frames]
    assert mm.decode(loaded, mm.MultiModalKwargsItems) == items
    # The capture is the single-buffer layout: decode_bytes reads it as it is.
    assert path.read_bytes() == bytes(mm.encode_bytes(items))
    assert mm.decode_bytes(path.read_bytes(), mm.MultiModalKwargsItems) == items


# -- inspect and decode agree on mutated messages ---------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sample=st.sampled_from(sorted(SAMPLES)),
    edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 8),
)
def test_inspect_accepts_exactly_what_decode_accepts(
    sample: str, edits: list[tuple[int, int]], cut: int
) -> None:
    root, make = SAMPLES[sample]
    frames = [bytearray(f) for f in mm.encode(make())]
    header = frames[0]
    for position, value in edits:
        header[position % len(header)] = value
    frames[0] = header[: len(header) - cut]
    try:
        mm.decode(frames, root)
        decoded = True
    except mm.DecodeError:
        decoded = False
    try:
        with_module = describe(frames, codec_of(mm))
    except mm.DecodeError as e:
        assert not decoded or e.message.startswith("message holds a "), e  # another root
        with_module = None
    if decoded:
        assert with_module is not None
    by_position: dict[str, Any] | None = None
    with contextlib.suppress(mm.DecodeError):  # by position, the body is msgpack only
        by_position = describe(frames, values=3)
    for tree in (with_module, by_position):
        if tree is not None:
            json.dumps(tree, allow_nan=False)  # JSON as it is, no NaN or Infinity
            assert re.match("envelope: wire version [23],", render_text(tree))
    if with_module is not None:
        assert by_position is not None  # names added, nothing else rejected


# -- the schema's names --------------------------------------------------------------


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_types_are_named_as_the_schema_names_them(sample: str) -> None:
    _, make = SAMPLES[sample]
    tree = describe(mm.encode(make()), codec_of(mm))
    text = json.dumps(tree) + render_text(tree)
    assert not re.search(r"FlatSlice_\d|Wire\b|_Wire", text), text  # wire classes' names
    if sample == "nested_item":  # a FlatField along dim 2: each slice a tuple of slices
        [(_, columns)] = [e for e in tree["body"]["$dict"] if e[0] == "columns"]
        assert columns["fields"]["field"]["fields"]["slices"] == [
            {"$tuple": [{"$slice": [None, None, None]}] * 2 + [{"$slice": [8, 40, None]}]}
        ]
        assert "          [0]: tuple[3]\n            [0]: slice(None, None)\n" in text
