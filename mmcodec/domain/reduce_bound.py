"""How much a reduce may build: at most ``Limits.max_reduce_ratio`` times what its elements hold.

A reduce (``MultiModalKwargsItems.get_data``, a field's ``reduce_data``) makes a batch out of
elements: it stacks them, concatenates them, zero-pads ragged ones to the largest size of
each dimension, or flattens lists of them. Decoded elements can ask for far more than a
message carries: the same 1 MiB tensor referenced by 1,000 items stacks to 1,000 MiB, and
two empty tensors shaped (1, N, 0) and (1, 0, N) pad to (2, N, N). So before a reduce
allocates, it compares the two sizes:

- **what it builds**: the bytes of the tensor it makes (elements x dtype size of the
  stacked, concatenated or padded result); for a flat field's reduce over lists, 8 bytes
  per entry of the list it makes, and 512 bytes per tensor it makes by splitting a
  tensor element into its rows. A reduce that builds nothing (one contiguous element, a
  shared field's first element, a batched field's list of ragged elements) is not
  checked.
- **what the elements hold**: the memory their tensors span, each byte counted once
  however many elements, tensors or references cover it (the union of the tensors'
  address ranges, per device); plus 512 bytes per distinct tensor object and 8 bytes
  per entry of each distinct list or tuple in their data (a tensor object takes about
  0.6 KB whatever its data; an empty one holds nothing else).

Stacking or concatenating distinct tensors builds exactly what they hold (a ratio of 1);
zero-padding ragged elements builds more (audio clips of different lengths: a few
times); the same item repeated n times in a batch builds n times. Beyond the ratio the
reduce raises ``ValueError`` before allocating anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

POINTER_BYTES = 8
"""What one list entry costs."""
TENSOR_BYTES = 512
"""What one tensor object costs beside its data (about 0.6 KB measured, counted low)."""


def held_bytes(datas: Sequence[Any]) -> int:
    """What the elements' data holds (see the module's docstring)."""
    ranges: dict[torch.device, list[tuple[int, int]]] = {}
    objects = 0
    seen: set[int] = set()
    stack = list(datas)
    while stack:
        value = stack.pop()
        if id(value) in seen:  # a tensor or list many elements share is held once
            continue
        if isinstance(value, torch.Tensor):
            seen.add(id(value))
            objects += TENSOR_BYTES
            start, end = _span(value)
            if end > start:
                ranges.setdefault(value.device, []).append((start, end))
        elif isinstance(value, list | tuple):
            seen.add(id(value))
            objects += POINTER_BYTES * len(value)
            stack.extend(value)
    return objects + sum(_union(spans) for spans in ranges.values())


def _held_at_least(datas: Sequence[Any]) -> int:
    """A lower bound of :func:`held_bytes` from the elements' own objects: a few
    operations per element, where the exact count reads every tensor's address."""
    held = 0
    for value in {id(value): value for value in datas}.values():
        if isinstance(value, torch.Tensor):
            held += TENSOR_BYTES
        elif isinstance(value, list | tuple):
            held += POINTER_BYTES * len(value)
    return held


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The address range a tensor's elements lie in (strides are never negative)."""
    if t.numel() == 0:
        return 0, 0
    start = t.data_ptr()
    if t.is_contiguous():
        return start, start + t.numel() * t.element_size()
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return start, start + extent * t.element_size()


def _union(spans: list[tuple[int, int]]) -> int:
    spans.sort()
    total = 0
    end = -1
    for start, stop in spans:
        if start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def tensor_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    """The bytes of a tensor of this shape and dtype."""
    return math.prod(shape) * dtype.itemsize


class ReduceBound:
    """The check one reduce makes before it allocates; what the elements hold is
    measured only when a result needs it."""

    __slots__ = ("datas", "ratio", "what")

    def __init__(self, datas: Sequence[Any], ratio: int, what: str) -> None:
        self.datas = datas
        self.ratio = ratio
        self.what = what
        """What is being reduced, for the error: "'pixel_values'", "3 elements"."""

    def check_tensors(self, building: int) -> None:
        """:meth:`check`, for elements that are all tensors."""
        if building > self.ratio * TENSOR_BYTES * len({*map(id, self.datas)}):
            self._check(building)  # else the common case, in a few C loops

    def check(self, building: int) -> None:
        """Raise ValueError if building ``building`` bytes exceeds the bound."""
        if building > self.ratio * _held_at_least(self.datas):
            self._check(building)  # else the common case: no tensor's layout read

    def _check(self, building: int) -> None:
        held = held_bytes(self.datas)
        if building > self.ratio * held:
            raise ValueError(
                f"cannot reduce {self.what}: the batch would take {building} bytes, more "
                f"than {self.ratio} times the {held} bytes its {len(self.datas)} elements "
                "hold (Limits.max_reduce_ratio; pass limits=Limits(max_reduce_ratio=...) "
                "to allow it)"
            )
