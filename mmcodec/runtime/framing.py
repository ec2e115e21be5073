"""Frames: validating what the caller hands the decoder, and the single-buffer layout.

Single-buffer layout (all integers little-endian)::

    b"MMCB" | u32 layout version | u64 frame count N | N x (u64 offset, u64 length)
    | payloads, each starting at a multiple of 64 bytes from the buffer's start

so a buffer read from a file, ``mmap`` or shared memory that is itself 64-byte
aligned yields aligned tensors without a copy.

The same layout is the capture format: :func:`save_frames` writes a multipart message
(the frames of ``encode``, or the parts a socket received) to a file that
``decode_bytes``, :func:`load_frames` and ``mmcodec inspect`` read.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits

ALIGNMENT = 64
_MAGIC = b"MMCB"
_LAYOUT_VERSION = 1
_PREFIX = struct.Struct("<4sIQ")
_ENTRY = struct.Struct("<QQ")


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _flat_bytes(view: memoryview, what: str) -> memoryview:
    """The same memory as a 1-D view of bytes; ``what`` names it in the error."""
    if not view.c_contiguous:  # a strided 1-D byte view too
        raise DecodeError(f"{what} is not contiguous memory")
    if view.format != "B" or view.ndim != 1:
        # cast() refuses a shape with a zero in it: an empty frame is just empty.
        return view.cast("B") if view.nbytes else memoryview(b"")
    return view


def _not_one_buffer(frames: Any) -> None:
    """Raise the error that points at ``decode_bytes`` when ``frames`` is one buffer.

    Called only on the way to another error: a list of frames never pays for the check.
    """
    try:
        memoryview(frames)  # bytes, bytearray, memoryview, mmap, an array: one buffer
    except TypeError:
        return  # a sequence of frames after all
    raise DecodeError(
        f"decode takes the list of frames encode returned, not one {type(frames).__name__}: "
        "for a single buffer (what encode_bytes returned), call decode_bytes"
    )


def as_byte_views(frames: Sequence[Any], limits: Limits) -> list[memoryview]:
    """One flat byte memoryview per frame, with the frame count and sizes bounded."""
    try:
        count = len(frames)
    except TypeError:
        raise DecodeError(f"frames must be a sequence, got {type(frames).__name__}") from None
    if count == 0:
        _not_one_buffer(frames)
        raise DecodeError("no frames: a message has at least its header frame")
    if count > limits.max_frames:
        _not_one_buffer(frames)
        raise DecodeError(f"{count} frames exceed the limit of {limits.max_frames}")
    views: list[memoryview] = []
    total = 0
    for frame in frames:
        try:
            view = memoryview(frame)
        except TypeError:
            _not_one_buffer(frames)
            raise DecodeError(
                f"frame {len(views)} is a {type(frame).__name__}, not a bytes-like object"
            ) from None
        if view.format != "B" or view.ndim != 1 or not view.c_contiguous:
            view = _flat_bytes(view, f"frame {len(views)}")  # the message is built only here
        total += view.nbytes
        views.append(view)
    if views[0].nbytes <= 1:  # no header is this short; an mmap iterates as 1-byte "frames"
        _not_one_buffer(frames)
    if views[0].nbytes > limits.max_header_bytes:
        raise DecodeError(
            f"header of {views[0].nbytes} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    if total > limits.max_total_bytes:
        raise DecodeError(f"{total} bytes exceed the limit of {limits.max_total_bytes}")
    return views


def join(frames: Sequence[memoryview]) -> bytearray:
    """Copy frames into one buffer with a frame table and 64-byte aligned payloads."""
    table_end = _PREFIX.size + _ENTRY.size * len(frames)
    offsets = []
    position = _align(table_end)
    for frame in frames:
        offsets.append(position)
        position = _align(position + frame.nbytes)
    out = bytearray(position)
    _PREFIX.pack_into(out, 0, _MAGIC, _LAYOUT_VERSION, len(frames))
    for index, (offset, frame) in enumerate(zip(offsets, frames, strict=True)):
        _ENTRY.pack_into(out, _PREFIX.size + _ENTRY.size * index, offset, frame.nbytes)
        out[offset : offset + frame.nbytes] = frame
    return out


def split(buffer: Any, limits: Limits) -> list[memoryview]:
    """The frames of a :func:`join` buffer, as views of it (no copy), bounds-checked."""
    try:
        view = memoryview(buffer)
    except TypeError:
        raise DecodeError(f"expected a bytes-like buffer, got {type(buffer).__name__}") from None
    view = _flat_bytes(view, "buffer")
    size = view.nbytes
    if size > limits.max_total_bytes:
        raise DecodeError(f"{size} bytes exceed the limit of {limits.max_total_bytes}")
    if size < _PREFIX.size:
        raise DecodeError(f"buffer of {size} bytes is too short for a frame table")
    magic, version, count = _PREFIX.unpack_from(view, 0)
    if magic != _MAGIC:
        raise DecodeError(f"buffer does not start with {_MAGIC!r} (found {bytes(magic)!r})")
    if version != _LAYOUT_VERSION:
        raise DecodeError(f"single-buffer layout version {version} is not supported")
    if not 1 <= count <= limits.max_frames:
        raise DecodeError(f"frame count {count} outside 1..{limits.max_frames}")
    table_end = _PREFIX.size + _ENTRY.size * count
    if table_end > size:
        raise DecodeError(f"frame table of {count} entries overruns the {size}-byte buffer")
    frames = []
    for index in range(count):
        offset, length = _ENTRY.unpack_from(view, _PREFIX.size + _ENTRY.size * index)
        if offset < table_end or offset + length > size:
            raise DecodeError(
                f"frame {index} ({length} bytes at offset {offset}) lies outside the "
                f"buffer's payload area ({table_end}..{size})"
            )
        frames.append(view[offset : offset + length])
    return frames


def save_frames(frames: Sequence[Any], path: str | os.PathLike[str]) -> None:
    """Write a message's frames (any bytes-like objects) to ``path`` as one buffer.

    The file holds exactly what :func:`join` makes (an ``encode_bytes`` buffer is one
    already): ``mmcodec inspect FILE`` shows it, :func:`load_frames` reads it back.
    """
    views = []
    for number, frame in enumerate(frames):
        views.append(_flat_bytes(memoryview(frame), f"frame {number}"))
    Path(path).write_bytes(join(views))


def load_frames(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS) -> list[memoryview]:
    """The frames saved in ``path`` by :func:`save_frames` (or an ``encode_bytes`` buffer).

    A file larger than ``limits.max_total_bytes`` is refused from its size, unread.
    """
    with Path(path).open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limits.max_total_bytes:
            raise DecodeError(f"{size} bytes exceed the limit of {limits.max_total_bytes}")
        return split(f.read(), limits)
