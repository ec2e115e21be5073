"""The demo's small control messages: typed msgspec structs, one frame each, no pickle.

Sender -> receivers, on the data socket (PUSH to one receiver, PUB to several), between
codec messages: :class:`Announce` (the next ``repeat`` messages are payload ``name``
built from ``seed``) or :class:`Stop`. Each receiver -> sender, on the report socket:
:class:`Ready` (expected value built, send away), then one :class:`Result` per message,
each naming the receiver's reader index.
"""

from __future__ import annotations

from typing import Final

import msgspec


class Announce(msgspec.Struct, tag=True, array_like=True, frozen=True):
    name: str
    seed: int
    repeat: int


class Stop(msgspec.Struct, tag=True, array_like=True, frozen=True):
    pass


class Ready(msgspec.Struct, tag=True, array_like=True, frozen=True):
    reader: int = 0
    """Which receiver says so (its fan-out reader index)."""


class Result(msgspec.Struct, tag=True, array_like=True, frozen=True):
    decoded_ns: int
    """``time.monotonic_ns()`` in the receiver right after the message was decoded."""
    ok: bool
    detail: str = ""
    """Why the value is wrong (or failed to decode) when not ``ok``."""
    reader: int = 0
    shared_bytes: int = 0
    """Bytes of the decoded tensors that view shared memory (not copied on the way)."""


CONTROL_DECODER: Final[msgspec.msgpack.Decoder[Announce | Stop]] = msgspec.msgpack.Decoder(
    Announce | Stop
)
REPORT_DECODER: Final[msgspec.msgpack.Decoder[Ready | Result]] = msgspec.msgpack.Decoder(
    Ready | Result
)
ENCODER: Final = msgspec.msgpack.Encoder()
