"""(a) Front end -> engine core: vLLM's msgpack codec with multimodal items routed through mmcodec.

vLLM's ``MsgpackEncoder`` sends a ``MultiModalKwargsItem`` (or ``MultiModalKwargsItems``)
through Python hooks: a dict per element, one frame or one inline blob per tensor, and a
typed decoder that rebuilds the fields from factory names. Here every such value of one
message joins a single mmcodec message, whose frames are appended to the message's own
list of frames after vLLM's; in vLLM's msgpack header each value is an extension value
(code :data:`EXT_CODE`) that says which one it is. Everything else in the message stays
vLLM's, byte for byte.

A message whose only routed value the encoder can see in advance (an ``EngineCoreRequest``
with one item, the common request; or a bare item or item map) carries that value *inline*:
extension code :data:`INLINE_EXT_CODE`, whose data is ``<IIB`` (its first payload frame, the
number of payload frames, its kind) followed by the mmcodec header. Its payload frames follow
vLLM's: a one-image request is two frames, as vLLM's own (no descriptor, no separate header).

Any other message (frame indices)::

    0            vLLM's msgpack header; each routed value is Ext(EXT_CODE, marker)
    1..          vLLM's own payload frames (tensors outside items), as before
    slot         a 12-byte descriptor: b"MMCF", first mmcodec frame, frame count
    first..      the mmcodec message: its header, then its payload frames

``marker`` is ``<IIB``: the descriptor's frame index, the value's index in the mmcodec
message, its kind (0 an item, 1 an item map). The mmcodec message is one
``MultiModalKwargsItems`` whose entries are, in value order: ``"j"`` -> ``[item_j, item_j+1,
...]`` for a run of consecutive values that are items (a request's features, one item each),
or ``"j"`` -> ``[]`` then ``"j:modality"`` -> that modality's list for an item map ``j``.
One message for all the items of a request lets mmcodec send what the items share once
(vLLM's processors give every item the same field object) and pay its fixed cost once; one
list for a run of items lets it lay them out as columns (wire format, "Column lists").

A routed decoder reads stock messages too (a front end not yet upgraded). A stock decoder
given a routed message raises ``NotImplementedError("Extension type code 77 is not
supported")`` (78 for an inline value) at the first routed value: it never builds a wrong
object.
"""

from __future__ import annotations

import struct
import sys
from typing import Any, Final

from msgspec import msgpack
from vllm.multimodal.inputs import MultiModalKwargsItem, MultiModalKwargsItems
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from mmcodec.generated import multimodal_vllm as mv
from mmcodec.runtime.errors import DecodeError

__all__ = ["EXT_CODE", "INLINE_EXT_CODE", "MmcodecMsgpackDecoder", "MmcodecMsgpackEncoder"]

EXT_CODE: Final = 77
"""msgpack extension code of a routed value (vLLM 0.33 uses 1-3: pickle, cloudpickle, raw view)."""

INLINE_EXT_CODE: Final = 78
"""msgpack extension code of a message's only routed value, its mmcodec header inline."""

_MARKER: Final = struct.Struct("<IIB")
_INLINE: Final = struct.Struct("<IIB")
"""An inline value's prefix: its first payload frame, how many, its kind; the header follows."""
_DESCRIPTOR: Final = struct.Struct("<4sII")
_DESCRIPTOR_MAGIC: Final = b"MMCF"
_ITEM: Final = 0
_ITEMS: Final = 1
_KIND_NAMES: Final = ("MultiModalKwargsItem", "MultiModalKwargsItems")
_KIND_TYPES: Final = (MultiModalKwargsItem, MultiModalKwargsItems)


def _single_routed_value(obj: Any) -> bool:
    """Whether ``obj`` is known, before msgspec walks it, to hold exactly one routed value:
    an ``EngineCoreRequest`` whose features hold one item (nothing else in a request holds
    items), or an item or item map itself. Other messages are not looked into."""
    # Not imported here: vllm.v1.engine imports torch's compiler, and an object can be a
    # request only once its module is loaded.
    engine = sys.modules.get("vllm.v1.engine")
    if engine is not None and type(obj) is engine.EngineCoreRequest:
        features = obj.mm_features
        return features is not None and sum(f.data is not None for f in features) == 1
    return isinstance(obj, _KIND_TYPES)


class MmcodecMsgpackEncoder(MsgpackEncoder):  # type: ignore[misc]  # vLLM is untyped here
    """vLLM's ``MsgpackEncoder`` that sends multimodal items as one mmcodec message.

    Same constructor, same ``encode`` / ``encode_into`` results (a list of frames, frame 0
    the msgpack header), same handling of every other value; ``oob_tensor_consumer``
    (vLLM's tensor IPC) still receives the tensors outside items. Like vLLM's, an encoder
    is not thread-safe.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._values: list[Any] = []
        self._index_of: dict[int, int] = {}
        self._slot = -1
        self._inline_next = False

    def encode(self, obj: Any) -> list[Any]:
        self._begin(inline=_single_routed_value(obj))
        try:
            return self._finish(super().encode(obj))
        finally:
            self._begin()  # drop the references to this message's values

    def encode_into(self, obj: Any, buf: bytearray) -> list[Any]:
        self._begin(inline=_single_routed_value(obj))
        try:
            return self._finish(super().encode_into(obj, buf))
        finally:
            self._begin()

    def _begin(self, inline: bool = False) -> None:
        self._values = []
        self._index_of = {}
        self._slot = -1
        self._inline_next = inline

    def _finish(self, bufs: list[Any]) -> list[Any]:
        if self._slot < 0:
            return bufs
        container: dict[str, list[Any]] = {}
        run: list[Any] | None = None  # the run of items the next item joins
        for index, value in enumerate(self._values):
            key = str(index)
            if isinstance(value, MultiModalKwargsItem):
                if run is None:
                    run = container[key] = []
                run.append(value)
            else:  # an item map: a presence entry, then one entry per modality
                run = None
                container[key] = []
                for modality, items in value.items():
                    container[f"{key}:{modality}"] = list(items)
        frames = mv.encode(container, type=MultiModalKwargsItems)
        bufs[self._slot] = _DESCRIPTOR.pack(_DESCRIPTOR_MAGIC, len(bufs), len(frames))
        bufs.extend(frames)
        return bufs

    def _mark(self, value: Any, kind: int) -> msgpack.Ext:
        if self._inline_next:
            self._inline_next = False
            return self._inline(value, kind)
        if self._slot < 0:
            # Reserve the descriptor's frame now: its index must be in the header, which
            # msgspec is writing; its content is known only when the header is done.
            self._slot = len(self.aux_buffers)
            self.aux_buffers.append(b"")
        index = self._index_of.get(id(value))
        if index is None:  # the same object twice in a message travels once
            index = self._index_of[id(value)] = len(self._values)
            self._values.append(value)
        return msgpack.Ext(EXT_CODE, _MARKER.pack(self._slot, index, kind))

    def _inline(self, value: Any, kind: int) -> msgpack.Ext:
        """The message's only routed value: its header in the extension value, its payload
        frames after vLLM's (encoded now: msgspec writes the extension as it returns)."""
        header, *payloads = mv.encode(value, type=_KIND_TYPES[kind])
        first = len(self.aux_buffers)
        self.aux_buffers.extend(payloads)
        return msgpack.Ext(INLINE_EXT_CODE, _INLINE.pack(first, len(payloads), kind) + header)

    def _encode_mm_item(self, item: Any) -> msgpack.Ext:
        return self._mark(item, _ITEM)

    def _encode_mm_items(self, items: Any) -> msgpack.Ext:
        return self._mark(items, _ITEMS)


class MmcodecMsgpackDecoder(MsgpackDecoder):  # type: ignore[misc]  # vLLM is untyped here
    """vLLM's ``MsgpackDecoder`` that also reads routed multimodal values.

    A routed value decodes as vLLM's own class (its tensors view the frames, or are copies
    with ``share_mem=False``), typed or untyped; a stock value the way vLLM decodes it.
    Malformed routed values raise :class:`mmcodec.DecodeError` (a ``ValueError``) naming
    the problem. Like vLLM's, a decoder is not thread-safe.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._routed: tuple[int, list[Any]] | None = None

    def decode(self, bufs: Any) -> Any:
        self._routed = None
        try:
            return super().decode(bufs)
        finally:
            self._routed = None

    def ext_hook(self, code: int, data: memoryview) -> Any:
        if code == INLINE_EXT_CODE:
            return self._inline_value(data)
        if code != EXT_CODE:
            return super().ext_hook(code, data)
        if len(data) != _MARKER.size:
            raise DecodeError(f"routed value marker of {len(data)} bytes, not {_MARKER.size}")
        slot, index, kind = _MARKER.unpack(data)
        if kind > _ITEMS:
            raise DecodeError(f"routed value of unknown kind {kind}")
        values = self._values(slot)
        if index >= len(values):
            raise DecodeError(f"routed value {index} is not in the message")
        value = values[index]
        if (kind == _ITEMS) != isinstance(value, MultiModalKwargsItems):
            raise DecodeError(f"routed value {index} is not a {_KIND_NAMES[kind]}")
        return value

    def _inline_value(self, data: memoryview) -> Any:
        if len(data) <= _INLINE.size:
            raise DecodeError(f"inline routed value of {len(data)} bytes holds no header")
        first, count, kind = _INLINE.unpack_from(data)
        if kind > _ITEMS:
            raise DecodeError(f"routed value of unknown kind {kind}")
        frames = self.aux_buffers
        if not (first > 0 and first + count <= len(frames)):
            raise DecodeError(
                f"inline value's frames {first}..{first + count - 1} out of range "
                f"({len(frames)} frames)"
            )
        return mv.decode(
            [data[_INLINE.size :], *frames[first : first + count]],
            _KIND_TYPES[kind],
            copy=not self.share_mem,
        )

    def _values(self, slot: int) -> list[Any]:
        if self._routed is not None:
            if self._routed[0] != slot:
                raise DecodeError(f"routed values name descriptors {self._routed[0]} and {slot}")
            return self._routed[1]
        frames = self.aux_buffers
        if not 0 < slot < len(frames):
            raise DecodeError(f"descriptor frame {slot} out of range ({len(frames)} frames)")
        descriptor = memoryview(frames[slot]).cast("B")
        if descriptor.nbytes != _DESCRIPTOR.size:
            raise DecodeError(f"descriptor of {descriptor.nbytes} bytes, not {_DESCRIPTOR.size}")
        magic, first, count = _DESCRIPTOR.unpack(descriptor)
        if magic != _DESCRIPTOR_MAGIC:
            raise DecodeError(f"descriptor does not start with {_DESCRIPTOR_MAGIC!r}")
        if not (slot < first and count and first + count <= len(frames)):
            raise DecodeError(
                f"mmcodec frames {first}..{first + count - 1} out of range ({len(frames)} frames)"
            )
        frames = frames[first : first + count]
        values = _unpack(mv.decode(frames, MultiModalKwargsItems, copy=not self.share_mem))
        self._routed = (slot, values)
        return values

    def _decode_mm_item(self, obj: Any) -> Any:
        if isinstance(obj, MultiModalKwargsItem):  # routed: built by ext_hook
            return obj
        if isinstance(obj, MultiModalKwargsItems):
            raise DecodeError("a routed MultiModalKwargsItems where an item is expected")
        return super()._decode_mm_item(obj)

    def _decode_mm_items(self, obj: Any) -> Any:
        if isinstance(obj, MultiModalKwargsItems):
            return obj
        if isinstance(obj, MultiModalKwargsItem):
            raise DecodeError("a routed MultiModalKwargsItem where an item map is expected")
        return super()._decode_mm_items(obj)


def _unpack(container: Any) -> list[Any]:
    """The routed values of a decoded container, by index (see the module's docstring)."""
    values: list[Any] = []
    for key, entry in container.data.items():
        head, colon, modality = key.partition(":")
        if not (head.isascii() and head.isdigit() and len(head) <= 10) or (
            len(head) > 1 and head[0] == "0"
        ):
            raise DecodeError(f"routed container key {key!r} does not start with an index")
        index = int(head)  # one spelling per index: a map's keys name a modality once
        if not colon:
            if index != len(values):
                raise DecodeError(f"routed value {index} out of order (expected {len(values)})")
            if not entry:  # an item map's presence entry; its modalities follow
                values.append(MultiModalKwargsItems())
            elif any(item is None for item in entry):
                raise DecodeError(f"routed items from {index} hold a None")
            else:  # a run of items
                values.extend(entry)
        elif index + 1 != len(values) or not isinstance(values[index], MultiModalKwargsItems):
            raise DecodeError(f"routed container key {key!r} follows no item map {index}")
        else:
            values[index][modality] = entry
    return values
