"""The control part: what travels through ZMQ in place of the frames put in shared memory."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.nesting import refuse_deep_nesting

__all__ = [
    "CONTROL_VERSION",
    "ENCODER",
    "MARKER",
    "ShmControl",
    "ShmFrame",
    "byte_view",
    "is_control",
    "parse_control",
]

MARKER: Final = b"\xc1mmc-shm"
"""First bytes of a control part. 0xc1 is the one byte msgpack never uses, so no
msgpack document, and so no codec header (a msgpack array), can start with it."""
CONTROL_VERSION: Final = 3


class ShmFrame(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """Where one codec frame lies in the segment."""

    ticket: int
    generation: int
    """The ticket's generation when the frame was copied in; a reader takes the frame
    only while the segment still shows it."""
    offset: int
    """Bytes from the start of the data area."""
    length: int


class ShmControl(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """The control part after :data:`MARKER`: ``[version, segment, pid, fd, sequence, frames]``.

    ``segment`` is the pool's name, ``pid`` and ``fd`` where readers find it
    (``/proc/<pid>/fd/<fd>``). ``sequence`` numbers the pool's messages from 1. ``frames``
    describes codec frames 1..N (the header, frame 0, always comes through ZMQ, right
    after the control part): ``None`` is "the next ZMQ part", a :class:`ShmFrame` a region
    of the segment; at least one is.
    """

    version: int
    segment: str
    pid: int
    fd: int
    sequence: int
    frames: list[ShmFrame | None]


class _ControlHead(msgspec.Struct, array_like=True, gc=False, frozen=True):
    version: int


ENCODER: Final = msgspec.msgpack.Encoder()
_HEAD_DECODER: Final = msgspec.msgpack.Decoder(_ControlHead)
_CONTROL_DECODER: Final = msgspec.msgpack.Decoder(ShmControl)


def is_control(part: memoryview) -> bool:
    """Whether a message's first part is a shared-memory control part."""
    return part[: len(MARKER)].tobytes() == MARKER


def byte_view(frame: Any) -> memoryview:
    view = frame if type(frame) is memoryview else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def parse_control(control: memoryview, limits: Limits) -> ShmControl:
    """The control part, decoded and bounded; its contents are checked by the attacher."""
    body = control[len(MARKER) :]
    if body.nbytes > limits.max_header_bytes:
        raise DecodeError(
            f"control part of {body.nbytes} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    # A control part is three levels deep; msgspec's recursion limit (RecursionError) stops
    # deeper input in C, after work proportional to the bytes read, and refuse_deep_nesting
    # in a process that raised that limit beyond what a stack holds.
    try:
        refuse_deep_nesting(body)
        head = _HEAD_DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError) as e:
        raise DecodeError(f"malformed shared memory control part ({_reason(e)})") from None
    if head.version != CONTROL_VERSION:
        raise DecodeError(
            f"shared memory control version {head.version} is not supported "
            f"(this receiver reads version {CONTROL_VERSION})"
        )
    try:
        message = _CONTROL_DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise DecodeError(f"malformed shared memory control part ({_reason(e)})") from None
    if len(message.frames) + 1 > limits.max_frames:
        raise DecodeError(
            f"{len(message.frames) + 1} frames exceed the limit of {limits.max_frames}"
        )
    return message


def _reason(error: BaseException) -> str:
    return "nested too deeply" if isinstance(error, RecursionError) else str(error)
