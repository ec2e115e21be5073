"""Structural equality for values that may hold tensors.

``Tensor.__eq__`` is elementwise, so ``==`` on containers of tensors either raises or
answers the wrong question. These helpers compare tensors by dtype, shape and values,
and containers by type (a list never equals a tuple) and contents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when both tensors have the same dtype, shape and values (NaNs compare equal)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.device != b.device:  # pragma: no cover - the test machines have no second device
        b = b.to(a.device)
    try:
        if torch.equal(a, b):
            return True
    except (NotImplementedError, RuntimeError):  # complex32 and some float8 ops are unimplemented
        pass
    return _equal_bitwise(a, b)


def _equal_bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise comparison, so that NaN payloads that travelled unchanged compare equal."""
    if a.is_complex():
        a, b = torch.view_as_real(a.contiguous()), torch.view_as_real(b.contiguous())
    if a.dtype == torch.bool or a.element_size() not in _SAME_WIDTH_INT:
        return False
    as_int = _SAME_WIDTH_INT[a.element_size()]
    return bool(torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int)))


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def values_equal(a: Any, b: Any) -> bool:
    """Deep equality that understands tensors, lists vs tuples, mappings and slices."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and tensors_equal(a, b)
    if type(a) is not type(b):
        # int and float leaves are distinct on the wire, so they are distinct here too.
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        return list(a.keys()) == list(b.keys()) and all(values_equal(a[k], b[k]) for k in a)
    if type(a) is slice:  # bounds compare by type too: slice(0, 3) is not slice(0, 3.0)
        return values_equal((a.start, a.stop, a.step), (b.start, b.stop, b.step))
    return bool(a == b)
