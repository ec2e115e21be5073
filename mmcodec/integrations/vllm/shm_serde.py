"""(b) The shared-memory processor cache's serde: values into a chunk and back, with no pickle.

vLLM 0.33's ``MsgpackSerde`` pickles its metadata on every put and every get, pickles any
value that is not a tensor or an item, and copies each tensor twice (into the segment,
then out). :class:`MmcodecSerde` is an ``ObjectSerde`` with no pickle anywhere:

- a ``MultiModalKwargsItem``, a ``MultiModalKwargsItems`` and a ``torch.Tensor`` travel as
  mmcodec frames (a tensor as the data of a batched element);
- ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes`` and lists, tuples and dicts of
  them (what vLLM's storage tests store) travel as msgpack: a tuple comes back a list, a
  ``bytearray`` or ``memoryview`` comes back ``bytes``;
- anything else raises ``TypeError``.

A chunk's bytes (after the storage's in-use flags) are the metadata, then the data::

    metadata  b"MMSV" | u8 version | u8 kind | u16 0 | u32 data offset | u32 frame count N
              | N x (u64 offset, u64 length)            (little-endian; offsets from the data)
    data      the frames, each starting 64 bytes apart from the data's start

The data offset counts from the metadata's start, so a storage may pad between the two
(:class:`~mmcodec.integrations.vllm.shm_storage.ZeroCopyShmObjectStorage` does, to put
every frame on a 64-byte boundary of the segment). Each frame is copied once, into the
segment. ``deserialize`` copies tensors out (a stock storage reuses a chunk as soon as
``get`` returns); the zero-copy storage reads views with :meth:`MmcodecSerde.read`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import torch
from vllm.distributed.device_communicators.shm_object_storage import ObjectSerde
from vllm.multimodal.inputs import (
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
)

from mmcodec.generated import multimodal_vllm as mv
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits

__all__ = ["ALIGNMENT", "MmcodecSerde", "Serialized"]

ALIGNMENT: Final = 64
"""Frames start this many bytes apart (from the data's start), as mmcodec's single buffer."""

_HEAD: Final = struct.Struct("<4sBBHII")
_ENTRY: Final = struct.Struct("<QQ")
_MAGIC: Final = b"MMSV"
_VERSION: Final = 1

ITEM: Final = 0
ITEMS: Final = 1
TENSOR: Final = 2
BUILTINS: Final = 3
_ROOTS: Final = {
    ITEM: MultiModalKwargsItem,
    ITEMS: MultiModalKwargsItems,
    TENSOR: MultiModalFieldElem,
}

_SCALARS: Final = frozenset({type(None), bool, int, float, str, bytes})
_BYTES_LIKE: Final = frozenset({bytearray, memoryview})
_MAX_BUILTIN_DEPTH: Final = 64
_ENCODER: Final = msgspec.msgpack.Encoder()


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True, slots=True)
class Serialized:
    """A value as frames, before it is written: what a storage needs to place it."""

    kind: int
    frames: list[memoryview]
    offsets: list[int]
    """Each frame's offset from the data's start (multiples of :data:`ALIGNMENT`)."""
    data_bytes: int

    @property
    def metadata_bytes(self) -> int:
        return _HEAD.size + _ENTRY.size * len(self.frames)

    def metadata(self, data_offset: int) -> bytes:
        """The metadata, for data that starts ``data_offset`` bytes after its own start."""
        out = bytearray(self.metadata_bytes)
        _HEAD.pack_into(out, 0, _MAGIC, _VERSION, self.kind, 0, data_offset, len(self.frames))
        for index, (offset, frame) in enumerate(zip(self.offsets, self.frames, strict=True)):
            _ENTRY.pack_into(out, _HEAD.size + _ENTRY.size * index, offset, frame.nbytes)
        return bytes(out)

    def pieces(self) -> list[Any]:
        """The data as consecutive pieces (frames and zero padding), for a stock storage."""
        out: list[Any] = []
        position = 0
        for offset, frame in zip(self.offsets, self.frames, strict=True):
            if offset > position:
                out.append(bytes(offset - position))
            out.append(frame)
            position = offset + frame.nbytes
        return out

    def write(self, segment: memoryview, at: int) -> None:
        """Copy the frames into ``segment``, the data starting at ``at``."""
        for offset, frame in zip(self.offsets, self.frames, strict=True):
            start = at + offset
            segment[start : start + frame.nbytes] = frame


class MmcodecSerde(ObjectSerde):  # type: ignore[misc]  # vLLM is untyped here
    """vLLM's ``ObjectSerde`` through mmcodec and msgpack: no pickle, tensors copied in once."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits

    # -- writing ----------------------------------------------------------------------

    def prepare(self, value: Any) -> Serialized:
        """``value`` as frames, or ``TypeError`` for a value this serde does not store."""
        if isinstance(value, MultiModalKwargsItem):
            return _frames(ITEM, mv.encode(value))
        if isinstance(value, MultiModalKwargsItems):
            return _frames(ITEMS, mv.encode(value))
        if isinstance(value, torch.Tensor):
            elem = MultiModalFieldElem(data=value, field=MultiModalBatchedField())
            return _frames(TENSOR, mv.encode(elem))
        _check_builtins(value)
        return _frames(BUILTINS, [memoryview(_ENCODER.encode(value))])

    def serialize(self, value: Any) -> tuple[list[Any], int, bytes, int]:
        serialized = self.prepare(value)
        metadata = serialized.metadata(serialized.metadata_bytes)
        return serialized.pieces(), serialized.data_bytes, metadata, len(metadata)

    # -- reading ----------------------------------------------------------------------

    def deserialize(self, data: memoryview) -> Any:
        """The value in a chunk, tensors copied out of it."""
        return self.read(data, copy=True)

    def read(self, data: memoryview | Any, *, copy: bool) -> Any:
        """The value whose metadata starts at ``data[0]``; tensors view ``data`` unless ``copy``.

        ``data`` is anything bytes-like (a memoryview, or a numpy array that stands for
        the chunk's memory: the views then keep it alive). Raises ``DecodeError`` (a
        ``ValueError``) for bytes that are not a value this serde wrote.
        """
        kind, frames = self.frames(data)
        if kind == BUILTINS:
            try:
                return msgspec.msgpack.decode(frames[0])
            except msgspec.DecodeError as e:
                raise DecodeError(f"stored msgpack value rejected ({e})") from None
        value = mv.decode(frames, _ROOTS[kind], copy=copy, limits=self.limits)
        return value.data if kind == TENSOR else value

    def frames(self, data: Any) -> tuple[int, list[Any]]:
        """The kind and the frames (slices of ``data``) of a stored value, bounds-checked."""
        view = memoryview(data)
        size = view.nbytes
        if size < _HEAD.size:
            raise DecodeError(f"stored value of {size} bytes is too short for its metadata")
        magic, version, kind, _, data_offset, count = _HEAD.unpack_from(view, 0)
        if magic != _MAGIC or version != _VERSION:
            raise DecodeError(
                f"stored value starts with {bytes(magic)!r} version {version}, "
                f"not {_MAGIC!r} version {_VERSION}"
            )
        if kind not in _ROOTS and kind != BUILTINS:
            raise DecodeError(f"stored value of unknown kind {kind}")
        if not 1 <= count <= self.limits.max_frames or (kind == BUILTINS and count != 1):
            raise DecodeError(f"stored value of {count} frames")
        metadata_end = _HEAD.size + _ENTRY.size * count
        if not metadata_end <= data_offset <= size:
            raise DecodeError(f"data offset {data_offset} outside {metadata_end}..{size}")
        frames: list[Any] = []
        for index in range(count):
            offset, length = _ENTRY.unpack_from(view, _HEAD.size + _ENTRY.size * index)
            start = data_offset + offset
            if start + length > size:
                raise DecodeError(
                    f"frame {index} ({length} bytes at {start}) overruns the {size}-byte value"
                )
            frames.append(data[start : start + length])
        return kind, frames


def _frames(kind: int, frames: Sequence[memoryview]) -> Serialized:
    flat = [f if f.format == "B" and f.ndim == 1 else f.cast("B") for f in frames]
    offsets = []
    position = 0
    for frame in flat:
        offsets.append(position)
        position = _align(position + frame.nbytes)
    data_bytes = offsets[-1] + flat[-1].nbytes
    return Serialized(kind, flat, offsets, data_bytes)


def _check_builtins(value: Any) -> None:
    """``TypeError`` unless ``value`` is plain data msgpack carries (see the module docstring)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind in _SCALARS or kind in _BYTES_LIKE:
            continue
        if depth >= _MAX_BUILTIN_DEPTH:
            raise TypeError(f"value nested deeper than {_MAX_BUILTIN_DEPTH} levels")
        if kind is list or kind is tuple:
            stack.extend((child, depth + 1) for child in item)
        elif kind is dict:
            for key, child in item.items():
                if type(key) not in _SCALARS:
                    raise TypeError(f"dict key of type {type(key).__name__} is not stored")
                stack.append((child, depth + 1))
        else:
            raise TypeError(
                f"{kind.__name__} is not stored by MmcodecSerde: multimodal items, item maps, "
                "tensors, and None, bool, int, float, str, bytes, list, tuple, dict of them"
            )
