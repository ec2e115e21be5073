"""Where the items of a list with absent (None) items sit: the ``i``-th present item's
position, from the absent positions alone (a column list sends no position per item)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

__all__ = ["itself", "positions"]


def positions(absent: Sequence[int]) -> Callable[[int], int]:
    """Where the ``i``-th present item of a column list sits in the list, from its absent
    positions (increasing): one binary search per value asked for, no memory per item."""
    if not absent:
        return itself
    before = _PresentBefore(absent)
    return lambda index: index + bisect.bisect_right(before, index)


def itself(index: int) -> int:
    return index


class _PresentBefore:
    """How many present items come before each absent one (``absent[j] - j``, which never
    decreases): a sequence for :mod:`bisect`, computed as it is read."""

    __slots__ = ("absent",)

    def __init__(self, absent: Sequence[int]) -> None:
        self.absent = absent

    def __len__(self) -> int:
        return len(self.absent)

    def __getitem__(self, j: int) -> int:
        return self.absent[j] - j
