"""The demo's small control messages: typed msgspec structs, one frame each, no pickle.

Sender -> receiver, on the data socket, between codec messages: :class:`Announce` (the
next ``repeat`` messages are payload ``name`` built from ``seed``) or :class:`Stop`.
Receiver -> sender, on the report socket: :class:`Ready` (expected value built, send
away), then one :class:`Result` per message.
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
    pass


class Result(msgspec.Struct, tag=True, array_like=True, frozen=True):
    decoded_ns: int
    """``time.monotonic_ns()`` in the receiver right after the message was decoded."""
    ok: bool
    detail: str = ""
    """Why the value is wrong (or failed to decode) when not ``ok``."""


CONTROL_DECODER: Final[msgspec.msgpack.Decoder[Announce | Stop]] = msgspec.msgpack.Decoder(
    Announce | Stop
)
REPORT_DECODER: Final[msgspec.msgpack.Decoder[Ready | Result]] = msgspec.msgpack.Decoder(
    Ready | Result
)
ENCODER: Final = msgspec.msgpack.Encoder()
