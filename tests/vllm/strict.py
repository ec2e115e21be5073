"""Strict comparison of decoded objects with the originals, across both bindings.

vLLM's ``MultiModalFieldElem.__eq__`` compares data and the field's *class*, never its
parameters, so a decoder that loses slices, dim, batch_size or keep_on_cpu, turns tuples
into lists, reorders keys or changes a dtype still compares equal. These helpers check
all of it, plus the object graph: an object shared in the original (a field shared by
every item, a shared element, a tensor referenced twice) is shared in the decoded value,
and nothing else is.

Classes are compared by kind, so a vLLM object can be compared with one of this
package's (``MultiModalFlatField`` is the kind ``FlatField``); with ``cross=False`` the
classes must be the very same.
"""

from __future__ import annotations

from collections import UserDict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

# vLLM's class names that differ from this package's names for the same schema type.
_KIND = {
    "MultiModalBatchedField": "BatchedField",
    "MultiModalFlatField": "FlatField",
    "MultiModalSharedField": "SharedField",
}
_FIELDS = {
    "BatchedField": ("keep_on_cpu",),
    "FlatField": ("slices", "dim", "keep_on_cpu"),
    "SharedField": ("batch_size", "keep_on_cpu"),
    "MultiModalFieldElem": ("data", "field"),
    "PlaceholderRange": ("offset", "length", "is_embed"),
    "MultiModalFeatureSpec": ("data", "modality", "identifier", "mm_position", "mm_hash"),
}
# Objects whose identity is part of the value: sharing must be kept exactly.
_SHARED_KINDS = frozenset(
    {"BatchedField", "FlatField", "SharedField", "MultiModalFieldElem", "MultiModalKwargsItem"}
)


def kind(obj: object) -> str:
    name = type(obj).__name__
    return _KIND.get(name, name)


class _Graph:
    def __init__(self) -> None:
        self.forward: dict[int, object] = {}
        self.backward: dict[int, object] = {}
        self.keep: list[object] = []  # ids stay valid while compared

    def pair(self, actual: object, expected: object, where: str) -> bool:
        """Record that ``actual`` stands for ``expected``; True when seen before."""
        seen = self.forward.get(id(expected))
        if seen is not None:
            assert seen is actual, f"{where}: shared in the original, not in the decoded value"
            return True
        assert id(actual) not in self.backward, (
            f"{where}: one decoded object stands for two distinct originals"
        )
        self.forward[id(expected)] = actual
        self.backward[id(actual)] = expected
        self.keep += [actual, expected]
        return False


def assert_same(actual: object, expected: object, *, cross: bool = False) -> None:
    """Assert ``actual`` (decoded) is ``expected`` (the original) in every detail."""
    _same(actual, expected, "$", cross, _Graph())


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


def _int_bound(bound: object) -> object:
    """What a slice bound travels as: vLLM builds 0-d tensors and numpy ints too."""
    if isinstance(bound, torch.Tensor):
        return int(bound.item())
    if isinstance(bound, np.integer):
        return int(bound)
    return bound


def _same(actual: Any, expected: Any, where: str, cross: bool, graph: _Graph) -> None:
    if isinstance(expected, torch.Tensor):
        assert type(actual) is torch.Tensor, f"{where}: {type(actual).__name__}, not a tensor"
        if graph.pair(actual, expected, where):
            return
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype}"
        assert actual.shape == expected.shape, f"{where}: shape {tuple(actual.shape)}"
        assert actual.device.type == "cpu", f"{where}: on {actual.device}"
        if expected.numel():  # bit by bit: NaNs, -0.0 and bf16 included
            assert torch.equal(_bits(actual), _bits(expected)), f"{where}: values differ"
        return
    if isinstance(expected, slice):
        assert type(actual) is slice, f"{where}: {type(actual).__name__}, not a slice"
        for name in ("start", "stop", "step"):
            a, e = getattr(actual, name), _int_bound(getattr(expected, name))
            assert a is None or type(a) is int, f"{where}.{name}: {type(a).__name__}"
            assert a == e, f"{where}.{name}: {a!r} != {e!r}"
        return
    if expected is None or type(expected) in (int, float, bool, str):
        assert type(actual) is type(expected), f"{where}: {type(actual).__name__}"
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
        return
    if type(expected) in (list, tuple):
        assert type(actual) is type(expected), (
            f"{where}: {type(actual).__name__}, not {type(expected).__name__}"
        )
        assert len(actual) == len(expected), f"{where}: {len(actual)} items, not {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _same(a, e, f"{where}[{i}]", cross, graph)
        return
    expected_kind = kind(expected)
    if cross:
        assert kind(actual) == expected_kind, f"{where}: {kind(actual)}, not {expected_kind}"
    else:
        assert type(actual) is type(expected), (
            f"{where}: {type(actual).__name__}, not {type(expected).__name__}"
        )
    if expected_kind in _SHARED_KINDS and graph.pair(actual, expected, where):
        return
    if isinstance(expected, (dict, UserDict, Mapping)):
        assert list(actual.keys()) == list(expected.keys()), (
            f"{where}: keys {list(actual.keys())}, not {list(expected.keys())}"
        )
        for key in expected:
            _same(actual[key], expected[key], f"{where}[{key!r}]", cross, graph)
        return
    names = _FIELDS.get(expected_kind)
    assert names is not None, f"{where}: cannot compare a {type(expected).__name__}"
    for name in names:
        a, e = getattr(actual, name), getattr(expected, name)
        if name == "slices":  # the container decodes as a list; its entries keep their kind
            assert type(a) is list, f"{where}.slices: {type(a).__name__}"
            a, e = list(a), list(e)
        _same(a, e, f"{where}.{name}", cross, graph)
