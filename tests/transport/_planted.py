"""Segments made by hand, as a hostile process of the same user could make them.

A planted segment is a pair of memfds in this process, named and laid out like a pool's
(or not, as a test asks), which control parts name by this process's pid and the
descriptor's number. Nothing here goes through :class:`SharedMemoryPool`.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mmcodec.transport import shm
from mmcodec.transport.shm import _segment as segment

SEGMENT_SEALS = segment.SEGMENT_SEALS
BOARD_SEALS = segment.BOARD_SEALS


def control(
    name: str,
    frames: list[Any],
    *,
    fd: int,
    pid: int | None = None,
    version: int = shm.CONTROL_VERSION,
    sequence: int = 1,
) -> bytes:
    """A control part naming segment ``name`` at ``/proc/<pid>/fd/<fd>`` (pid: this one)."""
    pid = os.getpid() if pid is None else pid
    return shm.MARKER + msgspec.msgpack.encode([version, name, pid, fd, sequence, frames])


@dataclass
class Planted:
    """A segment and its board, planted here; :meth:`close` closes both."""

    name: str
    fd: int
    board_fd: int
    owned: list[int] = field(default_factory=list)

    def control(self, frames: list[Any], **changes: Any) -> bytes:
        return control(self.name, frames, fd=self.fd, **changes)

    def close(self) -> None:
        for fd in self.owned:
            os.close(fd)


def new_name() -> str:
    return "mmcodec-" + secrets.token_hex(16)


def plant(
    name: str | None = None,
    *,
    data_size: int = 4096,
    file_bytes: int | None = None,
    tickets: int = 1,
    readers: int = 1,
    seals: int = SEGMENT_SEALS,
    memfd_name: str | None = None,
    header: bytes | None = None,
    entries: dict[int, tuple[int, int, int, int]] | None = None,
    sequence: int = 0,
) -> Planted:
    """A memfd laid out as a segment of ``data_size`` bytes (the file ``file_bytes`` long,
    sparse: only what is written takes pages), its board beside it. ``entries`` are the
    ticket table's (generation, sequence, offset, length); ``header`` replaces the header."""
    name = name or new_name()
    layout = segment.Layout(readers, tickets, data_size)
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    board = os.memfd_create(name + segment.BOARD_SUFFIX, flags)
    os.ftruncate(board, layout.board_total)
    identity = segment.segment_id(name) if segment.SEGMENT_NAME.fullmatch(name) else bytes(16)
    os.pwrite(
        board,
        segment.BOARD_HEADER.pack(b"mmcboard", 3, readers, tickets, identity),
        0,
    )
    fcntl.fcntl(board, fcntl.F_ADD_SEALS, BOARD_SEALS)
    fd = os.memfd_create(memfd_name or name, flags)
    if header is None:
        header = segment.HEADER.pack(
            b"mmcshm\x00\x00", 3, readers, tickets, board, layout.data, data_size, identity
        )
    os.pwrite(fd, header, 0)
    os.pwrite(fd, segment.SEQUENCE.pack(sequence), segment.SEQUENCE_AT)
    for ticket, entry in (entries or {}).items():
        os.pwrite(fd, segment.TICKET.pack(*entry), segment.TICKETS_AT + 32 * ticket)
    os.ftruncate(fd, layout.total if file_bytes is None else file_bytes)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return Planted(name, fd, board, [fd, board])
