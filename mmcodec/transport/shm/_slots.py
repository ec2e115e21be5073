"""Reader slots and release bytes: the board that readers write and the sender reads as hints.

Every reader of a segment can write every byte of its board, so nothing here is trusted:
the sender reads it only to decide *when* to try taking a ticket back, and the ticket's
lock decides whether it may (see :mod:`mmcodec.transport.shm`). A reader's slot holds the
sequence number of the last message it took (fan-out: a later one means it will never
get an earlier one) and whether a reader ever attached as that index; a release byte per
ticket and reader says the reader's last view of that ticket's frame is gone.
"""

from __future__ import annotations

import contextlib
import mmap
from typing import Final

import numpy as np

from mmcodec.transport.shm._segment import SLOT, SLOTS_AT, Layout

__all__ = ["IN_USE", "RELEASED", "RELEASED_BYTE", "Board"]

IN_USE: Final = 0
RELEASED: Final = 1
RELEASED_BYTE: Final = bytes([RELEASED])


class Board:
    """Views of a mapped board: ``last_seq`` and ``attached`` (one entry per reader) and
    ``states`` (tickets x readers release bytes)."""

    __slots__ = ("attached", "last_seq", "layout", "mapping", "states")

    def __init__(self, mapping: mmap.mmap, layout: Layout) -> None:
        self.mapping = mapping
        self.layout = layout
        slots = np.ndarray((layout.readers, 2), "<u8", mapping, SLOTS_AT, strides=(SLOT, 8))
        self.last_seq = slots[:, 0]
        self.attached = slots[:, 1]
        shape = (layout.tickets, layout.readers)
        self.states = np.ndarray(shape, np.uint8, mapping, layout.releases)

    def release(self, ticket: int, reader: int) -> None:
        """Set a release byte: from any thread, during garbage collection too."""
        position = self.layout.releases + ticket * self.layout.readers + reader
        with contextlib.suppress(ValueError):  # unmapped already (interpreter exit)
            self.mapping[position] = RELEASED

    def released_by_all(self) -> list[int]:
        """The tickets whose release bytes are all set (one pass over the bytes, no call)."""
        if self.layout.readers == 1:
            mapping, start = self.mapping, self.layout.releases
            end = start + self.layout.tickets
            found = []
            position = mapping.find(RELEASED_BYTE, start, end)
            while position != -1:
                found.append(position - start)
                position = mapping.find(RELEASED_BYTE, position + 1, end)
            return found
        released: list[int] = np.flatnonzero((self.states == RELEASED).all(axis=1)).tolist()
        return released

    def sequences(self, latest: int) -> list[int]:
        """Each reader's last sequence number, 0 for one above ``latest`` (the sender's
        own last): no reader took a message that was never sent, so it is a stray write,
        and it must not make the sender think the reader is past messages it was sent."""
        return [s if s <= latest else 0 for s in self.last_seq.tolist()]

    def close(self) -> None:
        del self.last_seq, self.attached, self.states  # the mapping's exports
        self.mapping.close()
