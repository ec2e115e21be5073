"""Allocation: first-fit, coalescing regions of a pool's data area (the sender's alone)."""

from __future__ import annotations

import bisect
from typing import Final

__all__ = ["ALIGNMENT", "RegionAllocator", "align"]

ALIGNMENT: Final = 64
"""Every region starts at a multiple of this from the (page-aligned) data area."""


def align(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


class RegionAllocator:
    """First-fit allocation of ``alignment``-aligned regions of ``[0, size)``.

    Free regions are kept sorted and coalesced: freeing a region merges it with free
    neighbours, so after every region is freed one region spans the whole area again.
    """

    __slots__ = ("_alignment", "_ends", "_size", "_starts", "_used")

    def __init__(self, size: int, alignment: int = ALIGNMENT) -> None:
        if alignment < 1 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, not {alignment}")
        self._alignment = alignment
        self._size = size // alignment * alignment
        self._starts: list[int] = [0] if self._size else []
        self._ends: list[int] = [self._size] if self._size else []
        self._used: dict[int, int] = {}  # start -> end of each allocated region

    @property
    def size(self) -> int:
        return self._size

    @property
    def free_bytes(self) -> int:
        return sum(self._ends) - sum(self._starts)

    def free_regions(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each free region, in address order."""
        return list(zip(self._starts, self._ends, strict=True))

    def allocate(self, nbytes: int) -> int | None:
        """The start of a free region of at least ``nbytes`` (the lowest that fits), or None."""
        if nbytes < 1:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        length = align(nbytes, self._alignment)
        ends = self._ends
        for index, start in enumerate(self._starts):
            if ends[index] - start >= length:
                if ends[index] - start == length:
                    del self._starts[index], ends[index]
                else:
                    self._starts[index] = start + length
                self._used[start] = start + length
                return start
        return None

    def free(self, start: int) -> None:
        """Return the region that :meth:`allocate` gave out at ``start``."""
        end = self._used.pop(start)
        starts, ends = self._starts, self._ends
        index = bisect.bisect_left(starts, start)
        joins_previous = index > 0 and ends[index - 1] == start
        joins_next = index < len(starts) and starts[index] == end
        if joins_previous and joins_next:
            ends[index - 1] = ends[index]
            del starts[index], ends[index]
        elif joins_previous:
            ends[index - 1] = end
        elif joins_next:
            starts[index] = start
        else:
            starts.insert(index, start)
            ends.insert(index, end)
