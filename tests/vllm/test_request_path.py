"""(a) The request path: vLLM's msgpack codec with multimodal items routed through mmcodec."""

from __future__ import annotations

import random
import struct
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
import torch.multiprocessing as torch_mp
import vllm.multimodal.inputs as vi
from msgspec import msgpack
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.engine.tensor_ipc import TensorIpcReceiver, TensorIpcSender
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from mmcodec.generated import multimodal_vllm as mv
from mmcodec.integrations.vllm import MmcodecMsgpackDecoder, MmcodecMsgpackEncoder
from mmcodec.integrations.vllm.request_path import EXT_CODE, INLINE_EXT_CODE
from mmcodec.payloads import PAYLOADS, qwen2_5_vl, small_items
from mmcodec.runtime.errors import DecodeError
from tests.vllm import peers
from tests.vllm.strict import assert_same


def _received(frames: list[Any]) -> list[Any]:
    """What a transport hands a decoder: copies of the frames (writable: vLLM's decoder
    warns about read-only buffers when it views a tensor outside items in one)."""
    return [bytearray(memoryview(f).cast("B")) for f in frames]


def _round_trip(obj: Any, t: Any, **decoder: Any) -> Any:
    frames = MmcodecMsgpackEncoder().encode(obj)
    return MmcodecMsgpackDecoder(t, **decoder).decode(_received(frames))


def test_an_engine_core_request_round_trips_strictly() -> None:
    request = peers.request(3)
    decoded = _round_trip(request, EngineCoreRequest)
    for got, want in zip(decoded.mm_features, request.mm_features, strict=True):
        assert_same(got, want)
    assert torch.equal(decoded.prompt_embeds, request.prompt_embeds)
    assert (decoded.request_id, decoded.prompt_token_ids) == ("request-3", list(range(64)))


class _Message(msgspec.Struct):
    items: vi.MultiModalKwargsItems
    one: list[vi.MultiModalKwargsItem]


@pytest.mark.parametrize("name", [*PAYLOADS, "small items"])
def test_every_payload_round_trips_strictly_typed_and_untyped(name: str) -> None:
    make: Any = PAYLOADS.get(name, lambda seed, api: small_items(seed, 8, api=api))
    items = make(1, api=vi)
    as_list = [item for entries in items.values() for item in entries]
    typed = _round_trip(_Message(items, as_list), _Message)
    untyped = _round_trip({"items": items, "one": as_list}, None)
    assert type(typed.items) is type(untyped["items"]) is vi.MultiModalKwargsItems
    assert_same(typed.items, items)
    assert_same(typed.one, as_list)
    assert_same(untyped["items"], items)
    assert_same(untyped["one"], as_list)


def test_what_the_items_share_travels_once_and_stays_shared() -> None:
    items = small_items(2, 16, api=vi)["image"]
    frames = MmcodecMsgpackEncoder().encode(peers.features(2, items))
    decoded = MmcodecMsgpackDecoder(list[vi.MultiModalFeatureSpec]).decode(_received(frames))
    # every item's "embed" is one tensor in the original, and one in the decoded request
    assert len({id(f.data["embed"].data) for f in decoded if f.data is not None}) == 1
    # the same item twice in a message is one object after decoding
    twice = MmcodecMsgpackDecoder().decode(MmcodecMsgpackEncoder().encode([items[0], items[0]]))
    assert twice[0] is twice[1]


def test_only_the_items_change_on_the_wire() -> None:
    # A request with no item is byte for byte vLLM's message.
    request = peers.request(4, [None] * 5)
    assert list(MmcodecMsgpackEncoder().encode(request)) == list(MsgpackEncoder().encode(request))
    # With items: every routed value is an Ext of code 77 in vLLM's header, naming the
    # descriptor frame, which says where mmcodec's message lies: after vLLM's frames.
    frames = MmcodecMsgpackEncoder().encode(peers.request(4))
    header = msgpack.decode(frames[0], ext_hook=lambda code, data: (code, bytes(data)))
    markers = [feature["data"] for feature in header[2]]
    assert markers[5] is None  # the cached feature
    assert [code for code, _ in markers[:5]] == [EXT_CODE] * 5
    decoded = [struct.unpack("<IIB", data) for _, data in markers[:5]]
    slot = decoded[0][0]
    assert decoded == [(slot, index, 0) for index in range(5)]
    magic, first, count = struct.unpack("<4sII", bytes(frames[slot]))
    assert (magic, first, first + count) == (b"MMCF", slot + 1, len(frames))


def _exts(header: Any) -> list[tuple[int, bytes]]:
    """The routed values' extensions of a msgpack header, in order (not vLLM's own)."""
    found: list[tuple[int, bytes]] = []
    msgpack.decode(header, ext_hook=lambda code, data: found.append((code, bytes(data))))
    return [(code, data) for code, data in found if code in (EXT_CODE, INLINE_EXT_CODE)]


def test_a_request_with_one_item_carries_it_inline_in_as_many_frames_as_vllm() -> None:
    item = qwen2_5_vl(0, api=vi)["image"][0]
    request = peers.request(7, [item])  # one item, then a cached feature (no data)
    frames = MmcodecMsgpackEncoder().encode(request)
    stock = MsgpackEncoder().encode(request)
    assert len(frames) == len(stock) == 2  # the header (prompt_embeds inline), pixel_values
    ((code, data),) = _exts(frames[0])
    assert code == INLINE_EXT_CODE
    first, count, kind = struct.unpack_from("<IIB", data)
    assert (first, count, kind) == (1, 1, 0)
    # the extension holds mmcodec's header: with the payload frame, mmcodec's message
    assert_same(mv.decode([data[9:], frames[1]], vi.MultiModalKwargsItem), item)
    decoded = MmcodecMsgpackDecoder(EngineCoreRequest).decode(_received(frames))
    assert_same(decoded.mm_features[0], request.mm_features[0])
    assert decoded.mm_features[1].data is None
    assert torch.equal(decoded.prompt_embeds, request.prompt_embeds)


@pytest.mark.parametrize("kind", ["item", "item map"])
def test_a_bare_item_or_item_map_travels_inline(kind: str) -> None:
    items = small_items(3, 2, api=vi)
    value = items["image"][0] if kind == "item" else items
    frames = MmcodecMsgpackEncoder().encode(value)
    assert [code for code, _ in _exts(frames[0])] == [INLINE_EXT_CODE]
    assert_same(MmcodecMsgpackDecoder(type(value)).decode(_received(frames)), value)


def test_a_request_with_several_items_sends_them_as_one_message() -> None:
    items = small_items(3, 2, api=vi)["image"]
    frames = MmcodecMsgpackEncoder().encode(peers.request(8, items))
    assert [code for code, _ in _exts(frames[0])] == [EXT_CODE, EXT_CODE]
    assert bytes(frames[1])[:4] == b"MMCF"  # one descriptor, one mmcodec message


def test_a_stock_message_decodes_with_the_routed_decoder() -> None:
    # A front end not yet upgraded (a rolling restart): vLLM's own message.
    request = peers.request(5)
    frames = [bytearray(f) if isinstance(f, bytes) else f for f in MsgpackEncoder().encode(request)]
    decoded = MmcodecMsgpackDecoder(EngineCoreRequest).decode(frames)
    for got, want in zip(decoded.mm_features, request.mm_features, strict=True):
        assert got.data == want.data  # vLLM's own decoding, vLLM's equality


def test_a_stock_decoder_refuses_a_routed_message() -> None:
    frames = MmcodecMsgpackEncoder().encode(peers.request(6))
    with pytest.raises(NotImplementedError, match=r"^Extension type code 77 is not supported$"):
        MsgpackDecoder(EngineCoreRequest).decode(_received(frames))
    frames = MmcodecMsgpackEncoder().encode(peers.request(6, [qwen2_5_vl(0, api=vi)["image"][0]]))
    with pytest.raises(NotImplementedError, match=r"^Extension type code 78 is not supported$"):
        MsgpackDecoder(EngineCoreRequest).decode(_received(frames))


def test_share_mem_false_copies_and_share_mem_true_views_the_frames() -> None:
    item = qwen2_5_vl(0, api=vi)["image"][0]
    frames = [bytearray(memoryview(f).cast("B")) for f in MmcodecMsgpackEncoder().encode(item)]
    viewed = MmcodecMsgpackDecoder(vi.MultiModalKwargsItem).decode(frames)
    copied = MmcodecMsgpackDecoder(vi.MultiModalKwargsItem, share_mem=False).decode(frames)
    big = frames[-1]
    base = np.frombuffer(big, dtype=np.uint8).ctypes.data
    pixels = viewed["pixel_values"].data
    assert base <= pixels.data_ptr() < base + len(big)
    copy = copied["pixel_values"].data
    assert not base <= copy.data_ptr() < base + len(big)
    assert_same(viewed, item)
    assert_same(copied, item)


def test_vllms_tensor_ipc_consumer_gets_the_other_tensors() -> None:
    # vLLM's mm_tensor_ipc="torch_shm": the consumer takes tensors outside items
    # (prompt_embeds); items travel in mmcodec's frames; one decoder reads both.
    tensors: Any = torch_mp.Queue()
    encoder = MmcodecMsgpackEncoder(oob_tensor_consumer=TensorIpcSender(tensors))
    decoder = MmcodecMsgpackDecoder(
        EngineCoreRequest, oob_tensor_provider=TensorIpcReceiver(tensors)
    )
    for seed in (8, 9):  # two messages: the consumer's per-message state moves on
        request = peers.request(seed)
        request.prompt_embeds = torch.randn(300, 64)  # above the inline threshold
        decoded = decoder.decode(_received(encoder.encode(request)))
        assert torch.equal(decoded.prompt_embeds, request.prompt_embeds)
        for got, want in zip(decoded.mm_features, request.mm_features, strict=True):
            assert_same(got, want)


def test_vllms_multimodal_kwargs_scenario_routed() -> None:
    """What the deselected tests/v1/test_serial_utils.py::test_multimodal_kwargs checks
    besides vLLM's wire (its scenario, from ../shared/vllm/test-scenarios.md), strictly."""
    audio = vi.MultiModalFieldElem(
        torch.zeros(1000, dtype=torch.bfloat16), vi.MultiModalBatchedField()
    )
    video = vi.MultiModalFieldElem(
        [torch.zeros(1000, dtype=torch.int8) for _ in range(4)],
        vi.MultiModalFlatField(slices=[[slice(1, 2, 3), slice(4, 5, 6)], [slice(None, 2)]], dim=0),
    )
    shared = vi.MultiModalFieldElem(
        torch.zeros(1000, dtype=torch.int32), vi.MultiModalSharedField(batch_size=4)
    )
    flat = vi.MultiModalFieldElem(
        torch.zeros(1000, dtype=torch.int32),
        vi.MultiModalFlatField(slices=[slice(1, 2, 3), slice(4, 5, 6)], dim=2),
    )
    items = vi.MultiModalKwargsItems(
        {
            "audio": [vi.MultiModalKwargsItem({"a0": audio})],
            "video": [vi.MultiModalKwargsItem({"v0": video})],
            "image": [vi.MultiModalKwargsItem({"i0": shared, "i1": flat})],
        }
    )
    decoded = _round_trip({"mm": [items]}, dict[str, list[vi.MultiModalKwargsItems]])["mm"][0]
    assert len(decoded) == 3
    assert list(decoded["image"][0].keys()) == ["i0", "i1"]
    assert_same(decoded, items)


def _routed_frames() -> list[Any]:
    return _received(MmcodecMsgpackEncoder().encode([qwen2_5_vl(0, api=vi)["image"][0]]))


def _with_marker(frames: list[Any], marker: bytes) -> list[Any]:
    header = msgpack.encode([msgpack.Ext(EXT_CODE, marker)])
    return [header, *frames[1:]]


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (b"\x01", r"marker of 1 bytes, not 9"),
        (struct.pack("<IIB", 1, 0, 7), r"unknown kind 7"),
        (struct.pack("<IIB", 9, 0, 0), r"descriptor frame 9 out of range \(4 frames\)"),
        (struct.pack("<IIB", 0, 0, 0), r"descriptor frame 0 out of range"),
        (struct.pack("<IIB", 2, 0, 0), r"descriptor of \d+ bytes, not 12"),
        (struct.pack("<IIB", 1, 5, 0), r"routed value 5 is not in the message"),
        (struct.pack("<IIB", 1, 0, 1), r"routed value 0 is not a MultiModalKwargsItems"),
    ],
)
def test_bad_markers_raise_decode_error(marker: bytes, message: str) -> None:
    frames = _with_marker(_routed_frames(), marker)
    with pytest.raises(DecodeError, match=message):
        MmcodecMsgpackDecoder().decode(frames)


@pytest.mark.parametrize(
    ("descriptor", "message"),
    [
        (struct.pack("<4sII", b"XXXX", 2, 2), r"does not start with b'MMCF'"),
        (struct.pack("<4sII", b"MMCF", 1, 2), r"mmcodec frames 1\.\.2 out of range"),
        (struct.pack("<4sII", b"MMCF", 2, 9), r"mmcodec frames 2\.\.10 out of range"),
        (struct.pack("<4sII", b"MMCF", 2, 0), r"out of range"),
        (struct.pack("<4sII", b"MMCF", 3, 1), r"^\$"),  # a payload frame is no header
    ],
)
def test_bad_descriptors_raise_decode_error(descriptor: bytes, message: str) -> None:
    frames = _routed_frames()
    frames[1] = descriptor
    with pytest.raises(DecodeError, match=message):
        MmcodecMsgpackDecoder().decode(frames)


def _inline_frames() -> list[Any]:
    """A bare item inline: its header in the extension value, one payload frame."""
    return _received(MmcodecMsgpackEncoder().encode(qwen2_5_vl(0, api=vi)["image"][0]))


@pytest.mark.parametrize(
    ("prefix", "header", "message"),
    [
        (b"", b"", r"^\$: inline routed value of 0 bytes holds no header$"),
        (struct.pack("<IIB", 1, 1, 0), b"", r"^\$: inline routed value of 9 bytes holds no"),
        (struct.pack("<IIB", 1, 1, 2), None, r"^\$: routed value of unknown kind 2$"),
        (struct.pack("<IIB", 0, 1, 0), None, r"^\$: inline value's frames 0\.\.0 out of range"),
        (struct.pack("<IIB", 1, 2, 0), None, r"^\$: inline value's frames 1\.\.2 out of range"),
        (struct.pack("<IIB", 2**32 - 1, 1, 0), None, r"frames 4294967295\.\.4294967295 out of"),
        # the header's run names a payload frame the marker does not give
        (
            struct.pack("<IIB", 1, 0, 0),
            None,
            r"^\$\['pixel_values'\]\.data: frame 1 out of range \(1 frames\) \(tensor run \d\)$",
        ),
        (struct.pack("<IIB", 1, 1, 0), b"\x93\x01\x02", r"^\$: frame 0 is not an mmcodec header"),
    ],
)
def test_bad_inline_values_raise_decode_error(
    prefix: bytes, header: bytes | None, message: str
) -> None:
    frames = _inline_frames()
    ((_, data),) = _exts(frames[0])
    value = prefix + (data[9:] if header is None else header)
    frames[0] = msgpack.encode(msgpack.Ext(INLINE_EXT_CODE, value))
    with pytest.raises(DecodeError, match=message):
        MmcodecMsgpackDecoder(vi.MultiModalKwargsItem).decode(frames)


def test_mangled_inline_values_raise_only_decode_error() -> None:
    # Random bytes of the extension value (its prefix and mmcodec's header) changed or cut:
    # refused with mmcodec's DecodeError or decoded, never anything else.
    frames = _inline_frames()
    ((_, data),) = _exts(frames[0])
    rng = random.Random(20)
    refused = 0
    for _ in range(1000):
        mangled = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            mangled[rng.randrange(len(mangled))] = rng.randrange(256)
        mangled = mangled[: rng.choice([len(mangled), rng.randrange(len(mangled) + 1)])]
        frames[0] = msgpack.encode(msgpack.Ext(INLINE_EXT_CODE, bytes(mangled)))
        try:
            MmcodecMsgpackDecoder(vi.MultiModalKwargsItem).decode(frames)
        except DecodeError:
            refused += 1
    assert refused > 600  # most changes are caught; nothing else escaped


def test_an_inline_item_map_where_an_item_is_expected_is_refused() -> None:
    frames = _inline_frames()
    ((_, data),) = _exts(frames[0])
    frames[0] = msgpack.encode([msgpack.Ext(INLINE_EXT_CODE, data[:8] + b"\x01" + data[9:])])
    # the item's header says MultiModalKwargsItem: kind 1 asks mmcodec for an item map
    with pytest.raises(DecodeError, match=r"MultiModalKwargsItem"):
        MmcodecMsgpackDecoder(list[vi.MultiModalKwargsItems]).decode(frames)


def test_a_routed_value_of_the_wrong_type_is_refused() -> None:
    # Raised in msgspec's dec_hook, which reports it as its ValidationError (a ValueError),
    # with the position in the message, as it does vLLM's own decoding errors.
    frames = _received(MmcodecMsgpackEncoder().encode({"x": qwen2_5_vl(0, api=vi)}))
    with pytest.raises(msgspec.ValidationError, match="a routed MultiModalKwargsItems where"):
        MmcodecMsgpackDecoder(dict[str, vi.MultiModalKwargsItem]).decode(frames)
    frames = _received(MmcodecMsgpackEncoder().encode({"x": qwen2_5_vl(0, api=vi)["image"][0]}))
    with pytest.raises(msgspec.ValidationError, match="a routed MultiModalKwargsItem where"):
        MmcodecMsgpackDecoder(dict[str, vi.MultiModalKwargsItems]).decode(frames)


def _container_of(frames: list[Any]) -> dict[str, Any]:
    """The mmcodec container of a routed message, by key (the descriptor is frame 1 here)."""
    _, first, count = struct.unpack("<4sII", bytes(frames[1]))
    container = mv.decode(frames[first : first + count], vi.MultiModalKwargsItems)
    return {key: len(entry) for key, entry in container.data.items()}


def test_consecutive_items_travel_as_one_list_and_item_maps_as_their_modalities() -> None:
    items = small_items(3, 4, api=vi)["image"]
    item_map = small_items(4, 2, api=vi)
    message = [items[0], items[1], item_map, items[2], items[3], items[1]]
    frames = MmcodecMsgpackEncoder().encode(message)
    # items 0 and 1 are one run, the map is "2" and its modality, items 2 and 3 the next run
    # (the repeated items[1] is value 1 again: no entry of its own)
    assert _container_of(frames) == {"0": 2, "2": 0, "2:image": 2, "3": 2}
    decoded = MmcodecMsgpackDecoder().decode(_received(frames))
    assert decoded[5] is decoded[1]
    for got, want in zip(decoded, message, strict=True):
        assert_same(got, want)


def _with_container(container: dict[str, list[Any]], kind: int = 0) -> list[Any]:
    """A routed message whose one marker names value 0 of ``container``."""
    frames = mv.encode(vi.MultiModalKwargsItems(container), type=vi.MultiModalKwargsItems)
    header = msgpack.encode([msgpack.Ext(EXT_CODE, struct.pack("<IIB", 1, 0, kind))])
    descriptor = struct.pack("<4sII", b"MMCF", 2, len(frames))
    return _received([header, descriptor, *frames])


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"x": []}, r"^\$: routed container key 'x' does not start with an index$"),
        ({"01": []}, r"^\$: routed container key '01' does not start with an index$"),
        ({"9" * 11: []}, r"^\$: routed container key '9{11}' does not start with an index$"),
        ({"\u0661": []}, r"does not start with an index$"),  # an Arabic-Indic digit
        ({"1": []}, r"^\$: routed value 1 out of order \(expected 0\)$"),
        ({"0": [None]}, r"^\$: routed items from 0 hold a None$"),
        ({"0:image": []}, r"^\$: routed container key '0:image' follows no item map 0$"),
        ("run", r"^\$: routed container key '0:image' follows no item map 0$"),
        ({"0": [], "0:a": [], "0:a ": [], "1": []}, None),  # distinct modalities: fine
    ],
)
def test_bad_containers_raise_decode_error(container: Any, message: str | None) -> None:
    item = small_items(5, 1, api=vi)["image"][0]
    if container == "run":  # a modality after a run of items, not after an item map
        container = {"0": [item], "0:image": [item]}
    frames = _with_container(container, kind=1 if message is None else 0)
    decoder = MmcodecMsgpackDecoder()
    if message is None:
        assert decoder.decode(frames) == [vi.MultiModalKwargsItems({"a": [], "a ": []})]
        return
    with pytest.raises(DecodeError, match=message):
        decoder.decode(frames)
