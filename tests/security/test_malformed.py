"""Hand-written hostile messages: each is rejected with DecodeError, its path and exact message.

Each case starts from a valid encoding, decodes frame 0 untyped, changes one thing and
re-encodes it (see ``samples.header`` / ``samples.with_header``). Run numbers in the
expected messages are looked up, not hard-coded, so that the planner may reorder runs.
"""

from __future__ import annotations

import resource
import struct
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import errors
from tests.codec.helpers import rows_only
from tests.security.samples import (
    HEAD_BODY,
    HEAD_MAGIC,
    HEAD_MAJOR,
    HEAD_REFS,
    HEAD_ROOT,
    HEAD_SCHEMA,
    HEAD_TENSORS,
    HEAD_WIRE,
    RUN_COUNT,
    RUN_DATA,
    RUN_DTYPE,
    RUN_OFFSET,
    RUN_SHAPE,
    feature_spec,
    header,
    kwargs_items,
    nested_item,
    run_index_of,
    run_of,
    same,
    with_header,
)

ITEMS = mm.MultiModalKwargsItems
PIXELS_0 = "$['image'][0]['pixel_values'].data"
PIXELS_1 = "$['image'][1]['pixel_values'].data"
GRID_0 = "$['image'][0]['image_grid_thw'].data"
MASK_0 = "$['image'][0]['attention_mask'].data"


def reject(frames: Any, tp: type[Any] = ITEMS, **kwargs: Any) -> mm.DecodeError:
    """Decode, expecting DecodeError (exactly that class); return it."""
    with pytest.raises(mm.DecodeError) as info:
        mm.decode(frames, tp, **kwargs)
    assert type(info.value) is mm.DecodeError
    return info.value


def assert_rejected(frames: Any, path: str, message: str, **kwargs: Any) -> None:
    error = reject(frames, **kwargs)
    assert (error.path, error.message) == (path, message)
    assert str(error) == f"{path}: {message}"


@pytest.fixture(scope="module")
def frames() -> list[bytes]:
    """The kwargs_items sample, as rows (wire version 2; tests/security/test_column_lists.py
    edits column lists): header, a bf16 pixel frame, a bool mask frame."""
    with rows_only():
        return [bytes(f) for f in mm.encode(kwargs_items())]


def ref(envelope: list[Any], item: int, key: str) -> int:
    """The tensor reference an element's data holds in the body."""
    value: int = envelope[HEAD_BODY]["image"][item][key][0]
    return value


def test_the_fixture_is_a_valid_three_frame_message(frames: list[bytes]) -> None:
    assert len(frames) == 3
    assert mm.decode(frames, ITEMS) == kwargs_items()
    envelope = header(frames)
    assert run_of(envelope, ref(envelope, 0, "pixel_values"))[RUN_DATA] == 1
    assert run_of(envelope, ref(envelope, 0, "attention_mask"))[RUN_DATA] == 2


def test_decode_error_is_the_one_project_wide_value_error() -> None:
    assert mm.DecodeError is errors.DecodeError
    assert issubclass(mm.DecodeError, ValueError)
    assert not issubclass(mm.DecodeError, mm.EncodeError)


# -- tensor runs: checked against the table and the frames, errors name the element ------


@pytest.mark.parametrize("index", [7, 3, 0, -1])
def test_frame_index_out_of_range(frames: list[bytes], index: int) -> None:
    envelope = header(frames)
    number = run_index_of(envelope, ref(envelope, 0, "pixel_values"))
    run_of(envelope, ref(envelope, 0, "pixel_values"))[RUN_DATA] = index
    assert_rejected(
        with_header(envelope, frames),
        PIXELS_0,
        f"frame {index} out of range (3 frames) (tensor run {number})",
    )


@pytest.mark.parametrize("dtype", ["float128", "object", "", "torch.float32", "Float32", "qint8"])
def test_unknown_dtype(frames: list[bytes], dtype: str) -> None:
    envelope = header(frames)
    run = run_of(envelope, ref(envelope, 0, "image_grid_thw"))
    run[RUN_DTYPE] = dtype
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    assert_rejected(
        with_header(envelope, frames), GRID_0, f"unknown dtype {dtype!r} (tensor run {number})"
    )


@pytest.mark.parametrize("entry", [-1, -(2**63), 2**63, 2**64 - 1])
def test_shape_entry_not_a_non_negative_int64(frames: list[bytes], entry: int) -> None:
    envelope = header(frames)
    run_of(envelope, ref(envelope, 0, "image_grid_thw"))[RUN_SHAPE] = [entry]
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    assert_rejected(
        with_header(envelope, frames),
        GRID_0,
        f"shape entry {entry} is not a non-negative int64 (tensor run {number})",
    )


@pytest.mark.parametrize(
    ("shape", "needs"),
    [([4], 64), ([2], 32), ([3, 2], 96), ([], 16), ([0], 0)],
)
def test_inline_payload_length_must_match_shape(
    frames: list[bytes], shape: list[int], needs: int
) -> None:
    # The grid run holds both items' int64[3]: 48 inline bytes for a run of two.
    envelope = header(frames)
    run = run_of(envelope, ref(envelope, 0, "image_grid_thw"))
    assert (len(run[RUN_DATA]), run[RUN_COUNT]) == (48, 2)
    run[RUN_SHAPE] = shape
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    assert_rejected(
        with_header(envelope, frames),
        GRID_0,
        f"inline payload holds 48 bytes, shape {shape} of int64 needs {needs} "
        f"(tensor run {number})",
    )


def test_inline_payload_must_start_at_offset_zero(frames: list[bytes]) -> None:
    envelope = header(frames)
    run_of(envelope, ref(envelope, 0, "image_grid_thw"))[RUN_OFFSET] = 8
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    assert_rejected(
        with_header(envelope, frames),
        GRID_0,
        f"inline payload holds 48 bytes, shape [3] of int64 needs 48 (tensor run {number})",
    )


@pytest.mark.parametrize(
    ("change", "nbytes", "offset"),
    [
        ({RUN_SHAPE: [5, 128]}, 1280, None),  # one row too many
        ({RUN_OFFSET: 520}, 1024, 520),  # shifted past the frame's end
        ({RUN_OFFSET: -8}, 1024, -8),
        ({RUN_OFFSET: 2**63}, 1024, 2**63),
        ({RUN_SHAPE: [2**20, 2**20]}, 2**41, None),  # 2^40 elements claimed
    ],
)
def test_payload_overrunning_its_frame(
    frames: list[bytes], change: dict[int, Any], nbytes: int, offset: int | None
) -> None:
    # Item 1's pixels: bf16[4, 128] = 1024 bytes at offset 512 of frame 1 (1536 bytes).
    envelope = header(frames)
    run = run_of(envelope, ref(envelope, 1, "pixel_values"))
    assert (run[RUN_SHAPE], run[RUN_DATA], run[RUN_OFFSET]) == ([4, 128], 1, 512)
    for position, value in change.items():
        run[position] = value
    number = run_index_of(envelope, ref(envelope, 1, "pixel_values"))
    at = 512 if offset is None else offset
    assert_rejected(
        with_header(envelope, frames),
        PIXELS_1,
        f"payload of {nbytes} bytes at offset {at} overruns frame 1 (1536 bytes) "
        f"(tensor run {number})",
    )


def test_empty_shape_so_large_that_no_array_can_have_it(frames: list[bytes]) -> None:
    envelope = header(frames)
    run = run_of(envelope, ref(envelope, 0, "pixel_values"))
    run[RUN_SHAPE], run[RUN_DATA] = [0, 2**63 - 1, 2**63 - 1], b""
    number = run_index_of(envelope, ref(envelope, 0, "pixel_values"))
    assert_rejected(
        with_header(envelope, frames),
        PIXELS_0,
        f"shape [0, {2**63 - 1}, {2**63 - 1}] of bfloat16 spans 2**63 bytes or more "
        f"(tensor run {number})",
    )


def test_bool_payload_in_a_frame_holding_2(frames: list[bytes]) -> None:
    # Both items' masks are one run in frame 2; the path names the first element using it.
    envelope = header(frames)
    number = run_index_of(envelope, ref(envelope, 0, "attention_mask"))
    mask = bytearray(frames[2])
    mask[700] = 2
    assert_rejected(
        [frames[0], frames[1], bytes(mask)],
        MASK_0,
        f"bool payload holds a byte other than 0 and 1 (tensor run {number})",
    )


@pytest.mark.parametrize("byte", [2, 0x80, 0xFF])
def test_inline_bool_payload_holding_other_bytes(byte: int) -> None:
    spec_frames = [bytes(f) for f in mm.encode(feature_spec())]
    envelope = header(spec_frames)
    is_embed_ref = envelope[HEAD_BODY][3][2]
    run = run_of(envelope, is_embed_ref)
    payload = bytearray(run[RUN_DATA])
    payload[-1] = byte
    run[RUN_DATA] = bytes(payload)
    number = run_index_of(envelope, is_embed_ref)
    assert_rejected(
        with_header(envelope, spec_frames),
        "$.mm_position.is_embed",
        f"bool payload holds a byte other than 0 and 1 (tensor run {number})",
        tp=mm.MultiModalFeatureSpec,
    )


def test_frame_not_referenced_by_any_tensor(frames: list[bytes]) -> None:
    assert_rejected([*frames, bytes(64)], "$", "frame 3 is not referenced by any tensor")


def test_frame_not_referenced_after_a_run_moves_to_another(frames: list[bytes]) -> None:
    envelope = header(frames)
    run = run_of(envelope, ref(envelope, 0, "attention_mask"))
    run[RUN_DATA] = 1  # the masks now read (bf16 pixel bytes as bools) from frame 1
    run[RUN_SHAPE] = [0]
    assert_rejected(with_header(envelope, frames), "$", "frame 2 is not referenced by any tensor")


def test_runs_may_use_payload_frames_in_any_order(frames: list[bytes]) -> None:
    # Encoders number frames in the order runs use them; a decoder must not rely on it.
    envelope = header(frames)
    for run in envelope[HEAD_TENSORS]:
        if type(run[RUN_DATA]) is int:
            run[RUN_DATA] = 3 - run[RUN_DATA]  # frames 1 and 2 swap places
    decoded = mm.decode(with_header(envelope, [frames[0], frames[2], frames[1]]), ITEMS)
    assert same(decoded, mm.decode(frames, ITEMS))


# -- the envelope: identity checked first ---------------------------------------------------


@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (HEAD_MAGIC, "mmx", "frame 0 is not an mmcodec header (magic 'mmx')"),
        (HEAD_MAGIC, "", "frame 0 is not an mmcodec header (magic '')"),
        (
            HEAD_WIRE,
            4,
            "wire format version 4 is not supported (this decoder reads versions 2 to 3)",
        ),
        (
            HEAD_WIRE,
            1,
            "wire format version 1 is not supported (this decoder reads versions 2 to 3)",
        ),
        (
            HEAD_WIRE,
            0,
            "wire format version 0 is not supported (this decoder reads versions 2 to 3)",
        ),
        (
            HEAD_SCHEMA,
            "other",
            "message is from schema 'other' major version 1; "
            "this decoder reads schema 'multimodal' major version 1",
        ),
        (
            HEAD_MAJOR,
            2,
            "message is from schema 'multimodal' major version 2; "
            "this decoder reads schema 'multimodal' major version 1",
        ),
        (
            HEAD_ROOT,
            "MultiModalKwargsItem",
            "message holds a MultiModalKwargsItem, not a MultiModalKwargsItems",
        ),
        (HEAD_ROOT, "pickle", "message holds a pickle, not a MultiModalKwargsItems"),
    ],
)
def test_envelope_identity(frames: list[bytes], position: int, value: Any, message: str) -> None:
    envelope = header(frames)
    envelope[position] = value
    assert_rejected(with_header(envelope, frames), "$", message)


def test_identity_is_checked_before_the_rest_of_the_envelope(frames: list[bytes]) -> None:
    envelope = header(frames)
    envelope[HEAD_MAJOR] = 9
    envelope[HEAD_TENSORS] = "not runs"
    error = reject(with_header(envelope, frames))
    assert error.message.startswith("message is from schema 'multimodal' major version 9;")


def test_wrong_root_type_requested(frames: list[bytes]) -> None:
    assert_rejected(
        frames,
        "$",
        "message holds a MultiModalKwargsItems, not a MultiModalFeatureSpec",
        tp=mm.MultiModalFeatureSpec,
    )


@pytest.mark.parametrize("keep", [0, 1, 5, 40, -1])
def test_truncated_header(frames: list[bytes], keep: int) -> None:
    cut = frames[0][:keep]
    assert_rejected(
        [cut, *frames[1:]], "$", "frame 0 is not an mmcodec header (Input data was truncated)"
    )


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (
            b"\xc1",
            "frame 0 is not an mmcodec header "
            "(MessagePack data is malformed: invalid opcode '\\xc1' (byte 0))",
        ),
        (
            msgspec.msgpack.encode({"magic": "mmc"}),
            "frame 0 is not an mmcodec header (Expected `array`, got `object`)",
        ),
        (
            msgspec.msgpack.encode(["mmc", 1]),
            "frame 0 is not an mmcodec header (Expected `array` of at least length 5, got 2)",
        ),
    ],
)
def test_frame_zero_is_not_a_header(frames: list[bytes], head: bytes, message: str) -> None:
    assert_rejected([head, *frames[1:]], "$", message)


def test_envelope_missing_its_body(frames: list[bytes]) -> None:
    envelope = header(frames)
    del envelope[HEAD_BODY]
    assert_rejected(
        with_header(envelope, frames),
        "$",
        "malformed envelope: Expected `array` of at least length 8, got 7",
    )


def test_body_of_the_wrong_shape(frames: list[bytes]) -> None:
    envelope = header(frames)
    envelope[HEAD_BODY] = [1, 2]
    assert_rejected(with_header(envelope, frames), "$", "Expected `object`, got `array`")


# -- what the caller hands the decoder -------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([], "no frames: a message has at least its header frame"),
        ((), "no frames: a message has at least its header frame"),
        (None, "frames must be a sequence, got NoneType"),
        (5, "frames must be a sequence, got int"),
        ("abc", "frame 0 is a str, not a bytes-like object"),
        ([None], "frame 0 is a NoneType, not a bytes-like object"),
        ([[1, 2]], "frame 0 is a list, not a bytes-like object"),
    ],
)
def test_frames_that_are_not_frames(given: Any, message: str) -> None:
    assert_rejected(given, "$", message)


@pytest.mark.parametrize("bad", ["abc", 17, None, object()])
def test_non_bytes_payload_frame(frames: list[bytes], bad: object) -> None:
    assert_rejected(
        [frames[0], bad, frames[2]],
        "$",
        f"frame 1 is a {type(bad).__name__}, not a bytes-like object",
    )


def test_non_contiguous_frame(frames: list[bytes]) -> None:
    strided = memoryview(bytes(2 * len(frames[1])))[::2]
    assert_rejected([frames[0], strided, frames[2]], "$", "frame 1 is not contiguous memory")


def test_frames_of_other_item_formats_are_read_as_bytes(frames: list[bytes]) -> None:
    # A float32 array is as good a frame as bytes (ZMQ frames, numpy buffers, mmap).
    as_floats = memoryview(bytearray(frames[1])).cast("f")
    assert mm.decode([frames[0], as_floats, frames[2]], ITEMS) == kwargs_items()


def test_too_many_frames_default_limit(frames: list[bytes]) -> None:
    assert_rejected([frames[0], *[b""] * 4096], "$", "4097 frames exceed the limit of 4096")


def test_too_many_frames(frames: list[bytes]) -> None:
    assert_rejected(frames, "$", "3 frames exceed the limit of 2", limits=mm.Limits(max_frames=2))


def test_too_many_total_bytes(frames: list[bytes]) -> None:
    total = sum(map(len, frames))
    assert_rejected(
        frames,
        "$",
        f"{total} bytes exceed the limit of {total - 1}",
        limits=mm.Limits(max_total_bytes=total - 1),
    )
    assert mm.decode(frames, ITEMS, limits=mm.Limits(max_total_bytes=total)) == kwargs_items()


def test_header_too_large(frames: list[bytes]) -> None:
    size = len(frames[0])
    assert_rejected(
        frames,
        "$",
        f"header of {size} bytes exceeds the limit of {size - 1}",
        limits=mm.Limits(max_header_bytes=size - 1),
    )


# -- nesting and element counts --------------------------------------------------------------


def _nest_pixels(frames: list[bytes], levels: int) -> list[bytes]:
    envelope = header(frames)
    node: Any = ref(envelope, 0, "pixel_values")
    for _ in range(levels):
        node = [1, [node]]  # a ListNode holding the previous node
    envelope[HEAD_BODY]["image"][0]["pixel_values"][0] = node
    return with_header(envelope, frames)


def test_nesting_up_to_max_depth_is_fine(frames: list[bytes]) -> None:
    item = mm.decode(_nest_pixels(frames, 32), ITEMS)["image"][0]
    assert item is not None
    data: Any = item["pixel_values"].data
    for _ in range(32):
        assert type(data) is list and len(data) == 1
        data = data[0]
    assert isinstance(data, torch.Tensor) and data.shape == (2, 128)


@pytest.mark.parametrize("levels", [33, 40, 300])
def test_nesting_deeper_than_max_depth(frames: list[bytes], levels: int) -> None:
    # 300 levels fit msgspec's recursion limit; rebuilding must stop at 32, and the
    # error path must not cost 2**depth (each level used to re-walk the failed child).
    assert_rejected(
        _nest_pixels(frames, levels), PIXELS_0 + "[0]" * 32, "nested tensors deeper than 32 levels"
    )


def test_max_depth_is_the_callers(frames: list[bytes]) -> None:
    nested = [bytes(f) for f in mm.encode(nested_item())]
    assert_rejected(
        nested,
        "$['mixed'].data[3]",
        "nested tensors deeper than 1 levels",
        tp=mm.MultiModalKwargsItem,
        limits=mm.Limits(max_depth=1),
    )
    assert_rejected(
        nested,
        "$['ragged'].data",
        "nested tensors deeper than 0 levels",
        tp=mm.MultiModalKwargsItem,
        limits=mm.Limits(max_depth=0),
    )
    # The deepest value is the empty list in ("mixed" data)[3][2]: three levels.
    assert_rejected(
        nested,
        "$['mixed'].data[3][2]",
        "nested tensors deeper than 2 levels",
        tp=mm.MultiModalKwargsItem,
        limits=mm.Limits(max_depth=2),
    )
    assert mm.decode(nested, mm.MultiModalKwargsItem, limits=mm.Limits(max_depth=3)) == (
        nested_item()
    )


@pytest.fixture
def default_recursion_limit() -> Iterator[None]:
    """Python's default recursion limit for the test's duration.

    msgspec refuses nesting deeper than the interpreter's recursion limit, and libraries
    loaded by other tests (hypothesis while it runs, torch's compilers) raise it: 2,000
    levels then decode into a schema error instead. Pinning the limit keeps the case exact
    in any test order.
    """
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.usefixtures("default_recursion_limit")
@pytest.mark.parametrize("depth", [2_000, 100_000, 5_000_000])
@pytest.mark.parametrize("where", ["body", "tensors"])
def test_msgpack_nesting_beyond_the_recursion_limit(
    frames: list[bytes], depth: int, where: str
) -> None:
    # Raw msgpack: `depth` nested one-element arrays, a few bytes each level.
    envelope = header(frames)
    deep = b"\x91" * depth + b"\xc0"
    if where == "body":
        head = b"\x98" + msgspec.msgpack.encode(envelope[:HEAD_BODY])[1:] + deep
    else:
        before = msgspec.msgpack.encode(envelope[:HEAD_TENSORS])[1:]
        after = msgspec.msgpack.encode(envelope[HEAD_REFS:])[1:]
        head = b"\x98" + before + deep + after
    assert_rejected([head, *frames[1:]], "$", "message nested too deeply")


def test_million_empty_tensors_from_a_tiny_header_fail_fast(frames: list[bytes]) -> None:
    envelope = header(frames)
    envelope[HEAD_TENSORS] = [["float32", [0], b"", 0, 1_000_000]]
    envelope[HEAD_REFS] = []
    envelope[HEAD_BODY] = {"image": [{"pixel_values": [0, [0, False]]}]}
    head = msgspec.msgpack.encode(envelope)
    assert len(head) < 100
    tracemalloc.start()
    try:
        error = reject([head])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (error.path, error.message) == (
        PIXELS_0,
        f"tensor count 1000000 outside 1..{len(head)} (a message holds at most max_tensors "
        "and max_elements tensors, and one per byte of its header) (tensor run 0)",
    )
    assert peak < 1 << 20


def test_tensor_count_above_max_elements(frames: list[bytes]) -> None:
    envelope = header(frames)
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    first = sum(r[RUN_COUNT] for r in envelope[HEAD_TENSORS][:number])
    run_of(envelope, ref(envelope, 0, "image_grid_thw"))[RUN_COUNT] = 2**20 + 1
    message = with_header(envelope, frames)
    assert_rejected(
        message,
        GRID_0,
        f"tensor count {2**20 + 1} outside 1..{len(message[0]) - first} (a message holds at "
        "most max_tensors and max_elements tensors, and one per byte of its header) "
        f"(tensor run {number})",
    )
    # With a header this small, the bound is the header's size, not max_elements.
    assert len(message[0]) < mm.DEFAULT_LIMITS.max_elements


@pytest.mark.parametrize("count", [0, -1, -(2**63)])
def test_tensor_count_not_positive(frames: list[bytes], count: int) -> None:
    envelope = header(frames)
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    run_of(envelope, ref(envelope, 0, "image_grid_thw"))[RUN_COUNT] = count
    error = reject(with_header(envelope, frames))
    assert error.path == GRID_0
    assert error.message.startswith(f"tensor count {count} outside 1..")
    assert error.message.endswith(f"(tensor run {number})")


def test_container_elements_above_max_elements(frames: list[bytes]) -> None:
    assert_rejected(
        frames, "$", "2 elements exceed the limit of 1", limits=mm.Limits(max_elements=1)
    )
    spec = [bytes(f) for f in mm.encode(feature_spec())]
    assert_rejected(
        spec,
        "$.data",
        "2 elements exceed the limit of 1",
        tp=mm.MultiModalFeatureSpec,
        limits=mm.Limits(max_elements=1),
    )


def test_tensors_above_max_elements(frames: list[bytes]) -> None:
    # Containers hold at most 4 entries here, but the message holds 7 tensors.
    envelope = header(frames)
    total = sum(run[RUN_COUNT] for run in envelope[HEAD_TENSORS])
    assert total == 7
    error = reject(frames, limits=mm.Limits(max_elements=4))
    assert error.message.startswith("tensor count ")
    assert "outside 1.." in error.message


@pytest.mark.parametrize("limit", [0, 1])
def test_ndim_above_max_ndim_set_by_caller(frames: list[bytes], limit: int) -> None:
    envelope = header(frames)
    number = run_index_of(envelope, ref(envelope, 0, "pixel_values"))
    assert_rejected(
        frames,
        PIXELS_0,
        f"2 dimensions exceed the limit of {limit} (tensor run {number})",
        limits=mm.Limits(max_ndim=limit),
    )


def test_ndim_above_default_max_ndim(frames: list[bytes]) -> None:
    envelope = header(frames)
    run_of(envelope, ref(envelope, 0, "image_grid_thw"))[RUN_SHAPE] = [1] * 17
    number = run_index_of(envelope, ref(envelope, 0, "image_grid_thw"))
    assert_rejected(
        with_header(envelope, frames),
        GRID_0,
        f"17 dimensions exceed the limit of 16 (tensor run {number})",
    )


# -- msgpack extension types ----------------------------------------------------------------

EXT = msgspec.msgpack.Ext(1, b"\x80\x04\x95")  # what a pickle smuggled in an ext would start with


def _put_ext(envelope: list[Any], where: str) -> None:
    body = envelope[HEAD_BODY]
    if where == "magic":
        envelope[HEAD_MAGIC] = EXT
    elif where == "run data":
        run_of(envelope, ref(envelope, 0, "image_grid_thw"))[RUN_DATA] = EXT
    elif where == "refs":
        envelope[HEAD_REFS] = [EXT]
    elif where == "body":
        envelope[HEAD_BODY] = EXT
    elif where == "modality":
        body["image"] = EXT
    elif where == "element data":
        body["image"][0]["pixel_values"][0] = EXT
    elif where == "field":
        body["image"][0]["pixel_values"][1] = EXT
    else:  # pragma: no cover
        raise AssertionError(where)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("magic", "frame 0 is not an mmcodec header (Expected `str`, got `ext` - at `$[0]`)"),
        ("run data", None),
        ("refs", "malformed envelope: Expected `int`, got `ext` - at `$[6][0]`"),
        ("body", "Expected `object`, got `ext`"),
        ("modality", None),
        ("element data", None),
        ("field", None),
    ],
)
def test_extension_types_are_rejected(frames: list[bytes], where: str, message: str | None) -> None:
    envelope = header(frames)
    _put_ext(envelope, where)
    error = reject(with_header(envelope, frames))
    if message is not None:
        assert error.message == message
    assert "got `ext`" in error.message


# -- tensor references ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [7, 99, 2**64 - 1])
def test_tensor_reference_out_of_range(frames: list[bytes], bad: int) -> None:
    envelope = header(frames)
    envelope[HEAD_BODY]["image"][0]["pixel_values"][0] = bad
    assert_rejected(
        with_header(envelope, frames), PIXELS_0, f"tensor {bad} out of range (7 tensors)"
    )


@pytest.mark.parametrize("bad", [7, 99, -1, 2**63])
def test_reference_table_pointing_outside_the_tensors(frames: list[bytes], bad: int) -> None:
    envelope = header(frames)
    assert len(envelope[HEAD_REFS]) == 7
    envelope[HEAD_REFS][3] = bad
    assert_rejected(
        with_header(envelope, frames),
        "$",
        f"tensor reference table points at tensor {bad} (7 tensors)",
    )


def test_reference_table_shorter_than_the_references(frames: list[bytes]) -> None:
    # Every tensor of the runs must have an entry: a short table leaves some without one.
    envelope = header(frames)
    first = envelope[HEAD_REFS][0]
    envelope[HEAD_REFS] = [first]
    missing = 1 if first == 0 else 0
    by_position = [*envelope[:HEAD_REFS], [], *envelope[HEAD_REFS + 1 :]]
    assert_rejected(
        with_header(envelope, frames),
        "$",
        "no entry of the tensor reference table points at tensor "
        f"{missing} (tensor run {run_index_of(by_position, missing)})",
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("x", "malformed envelope: Expected `array`, got `str` - at `$[6]`"),
        ([0.5], "malformed envelope: Expected `int`, got `float` - at `$[6][0]`"),
        ({"0": 1}, "malformed envelope: Expected `array`, got `object` - at `$[6]`"),
    ],
)
def test_reference_table_of_the_wrong_type(frames: list[bytes], table: Any, message: str) -> None:
    envelope = header(frames)
    envelope[HEAD_REFS] = table
    assert_rejected(with_header(envelope, frames), "$", message)


def test_shared_back_reference_cannot_change_a_values_type() -> None:
    # Item 1 refers back to item 0's field variants by index. Each union type numbers
    # its own values, so any in-range index gives a field variant (never a FlatSlice,
    # which is another union's value), and an index past them is rejected.
    with rows_only():
        frames_ = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = header(frames_)
    item1 = envelope[HEAD_BODY]["image"][1]
    assert item1["image_grid_thw"][1][0] == -1  # a back-reference
    sent = sum(1 for elem in envelope[HEAD_BODY]["image"][0].values() if elem[1][0] != -1)
    for index in range(sent):
        item1["image_grid_thw"][1] = [-1, index]
        decoded = mm.decode(with_header(envelope, frames_), mm.MultiModalKwargsItems)
        assert isinstance(decoded["image"][1]["image_grid_thw"].field, mm.BaseMultiModalField)  # type: ignore[index]
    item1["image_grid_thw"][1] = [-1, sent]
    error = reject(with_header(envelope, frames_))
    assert error.path == "$['image'][1]['image_grid_thw'].field"
    assert error.message == (
        f"back-reference to BaseMultiModalField value {sent}, but {sent} were sent"
    )


def test_struct_back_reference_must_name_a_value_already_sent() -> None:
    # Elements are numbered as they complete; item 1's shared element refers back to
    # item 0's by index. Any index among the elements sent before the reference gives
    # an element; one past them, or a negative one, is rejected with its path.
    with rows_only():
        frames_ = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = header(frames_)
    item0, item1 = envelope[HEAD_BODY]["image"][:2]
    key = next(k for k, wire in item1.items() if isinstance(wire, int))
    before = [*item0.values(), *list(item1.values())[: list(item1).index(key)]]
    sent = sum(1 for wire in before if not isinstance(wire, int))
    assert sent == 7  # 4 in item 0, then item 1's 3 batched and flat elements
    for index in range(sent):
        item1[key] = index
        decoded = mm.decode(with_header(envelope, frames_), mm.MultiModalKwargsItems)
        assert isinstance(decoded["image"][1][key], mm.MultiModalFieldElem)  # type: ignore[index]
    item1[key] = sent
    error = reject(with_header(envelope, frames_))
    assert (error.path, error.message) == (
        f"$['image'][1][{key!r}]",
        f"back-reference to MultiModalFieldElem value {sent}, but {sent} were sent",
    )
    item1[key] = -1
    error = reject(with_header(envelope, frames_))
    assert error.path == f"$['image'][1][{key!r}]"
    assert error.message == "Expected `int` >= 0"


# -- no allocation before the checks ---------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2**20, 2**20], "payload of 2199023255552 bytes at offset 0 overruns frame 1"),
        ([2**40], "payload of 2199023255552 bytes at offset 0 overruns frame 1"),
        ([2**62, 2], f"shape [{2**62}, 2] of bfloat16 spans 2**63 bytes or more"),
        ([2**63 - 1], f"shape [{2**63 - 1}] of bfloat16 spans 2**63 bytes or more"),
        ([2**31] * 16, f"shape {[2**31] * 16} of bfloat16 spans 2**63 bytes or more"),
    ],
)
@pytest.mark.parametrize("copy", [False, True])
def test_huge_tensor_claim_fails_without_allocating(
    frames: list[bytes], shape: list[int], message: str, copy: bool
) -> None:
    envelope = header(frames)
    number = run_index_of(envelope, ref(envelope, 0, "pixel_values"))
    run_of(envelope, ref(envelope, 0, "pixel_values"))[RUN_SHAPE] = shape
    hostile = with_header(envelope, frames)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    tracemalloc.start()
    try:
        error = reject(hostile, copy=copy)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.path == PIXELS_0
    if "overruns" in message:
        message += " (1536 bytes)"
    assert error.message == f"{message} (tensor run {number})"
    assert peak < 1 << 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 << 10


# -- the single-buffer form ------------------------------------------------------------------


@pytest.fixture(scope="module")
def buffer() -> bytes:
    with rows_only():
        return bytes(mm.encode_bytes(kwargs_items()))


def _patched(buffer: bytes, fmt: str, offset: int, *values: int) -> bytes:
    out = bytearray(buffer)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


BufferCase = Callable[[bytes], tuple[Any, str]]


@pytest.mark.parametrize(
    "case",
    [
        lambda b: (b[:10], "buffer of 10 bytes is too short for a frame table"),
        lambda b: (b"", "buffer of 0 bytes is too short for a frame table"),
        lambda b: (b"XXXX" + b[4:], "buffer does not start with b'MMCB' (found b'XXXX')"),
        lambda b: (
            _patched(b, "<I", 4, 2),
            "single-buffer layout version 2 is not supported",
        ),
        lambda b: (_patched(b, "<Q", 8, 0), "frame count 0 outside 1..4096"),
        lambda b: (
            _patched(b, "<Q", 8, 2**64 - 1),
            "frame count 18446744073709551615 outside 1..4096",
        ),
        lambda b: (
            _patched(b, "<Q", 8, 4000),
            f"frame table of 4000 entries overruns the {len(b)}-byte buffer",
        ),
        lambda b: (
            _patched(b, "<QQ", 16, 2**64 - 1, 2**64 - 1),
            f"frame 0 ({2**64 - 1} bytes at offset {2**64 - 1}) lies outside the buffer's "
            f"payload area (64..{len(b)})",
        ),
        lambda b: (
            _patched(b, "<QQ", 32, 0, 16),
            f"frame 1 (16 bytes at offset 0) lies outside the buffer's payload area (64..{len(b)})",
        ),
        lambda b: (
            b[:100],
            "frame 0 (364 bytes at offset 64) lies outside the buffer's payload area (64..100)",
        ),
        lambda b: ("abc", "expected a bytes-like buffer, got str"),
        lambda b: (None, "expected a bytes-like buffer, got NoneType"),
        lambda b: (memoryview(b)[::2], "buffer is not contiguous memory"),
    ],
)
def test_decode_bytes_rejections(buffer: bytes, case: BufferCase) -> None:
    given, message = case(buffer)
    with pytest.raises(mm.DecodeError) as info:
        mm.decode_bytes(given, ITEMS)
    assert type(info.value) is mm.DecodeError
    assert (info.value.path, info.value.message) == ("$", message)


def test_decode_bytes_limits(buffer: bytes) -> None:
    with pytest.raises(mm.DecodeError) as info:
        mm.decode_bytes(buffer, ITEMS, limits=mm.Limits(max_total_bytes=len(buffer) - 1))
    assert info.value.message == f"{len(buffer)} bytes exceed the limit of {len(buffer) - 1}"
    with pytest.raises(mm.DecodeError) as info:
        mm.decode_bytes(buffer, ITEMS, limits=mm.Limits(max_frames=2))
    assert info.value.message == "frame count 3 outside 1..2"
    assert mm.decode_bytes(buffer, ITEMS) == kwargs_items()


def test_decode_bytes_checks_the_message_inside(buffer: bytes) -> None:
    # A frame table that points frame 1 at frame 2's bytes: the pixel run now overruns.
    _, length_1 = struct.unpack_from("<QQ", buffer, 32)
    offset_2, length_2 = struct.unpack_from("<QQ", buffer, 48)
    assert (length_1, length_2) == (1536, 1200)
    swapped = _patched(buffer, "<QQ", 32, offset_2, length_2)
    with pytest.raises(mm.DecodeError) as info:
        mm.decode_bytes(swapped, ITEMS)
    assert info.value.path == PIXELS_1
    assert "overruns frame 1 (1200 bytes)" in info.value.message
