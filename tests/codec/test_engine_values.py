"""Values as engines build them, not as this package's own constructors do.

vLLM's ``flat_from_sizes`` accumulates a tensor of sizes, so slice bounds are 0-d int64
tensors (numpy integers elsewhere); its item classes are ``UserDict``s; its serializer
tests build slice groups as lists. These travel as their plain counterparts and decode
as documented: bounds as ints, lists as lists, mappings as the decoding module's class.
"""

from __future__ import annotations

import dataclasses
from collections import UserDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.builtins import assigns_fields, mapping_builder
from tests.codec.helpers import assert_elem_equal, assert_items_equal, header


def _elem(field: mm.BaseMultiModalField) -> mm.MultiModalFieldElem:
    return mm.MultiModalFieldElem(torch.arange(12).reshape(3, 4), field)


def _round_trip(elem: mm.MultiModalFieldElem) -> mm.MultiModalFieldElem:
    return mm.decode(mm.encode(elem), mm.MultiModalFieldElem)


def test_tensor_and_numpy_slice_bounds_travel_as_ints() -> None:
    sizes = torch.tensor([1, 2])
    bounds = [0, *torch.cumsum(sizes, 0)]  # what flat_from_sizes builds: 0-d tensors
    as_tensors = mm.FlatField([(slice(bounds[0], bounds[1]),), (slice(bounds[1], bounds[2]),)])
    as_numpy = mm.FlatField([(slice(np.int64(0), np.int32(1)),), (slice(np.uint8(1), 3),)])
    as_ints = mm.FlatField([(slice(0, 1),), (slice(1, 3),)])
    wire = bytes(mm.encode(_elem(as_ints))[0])
    for field in (as_tensors, as_numpy):
        frames = mm.encode(_elem(field))
        assert bytes(frames[0]) == wire  # the receiver cannot tell them apart
        decoded = mm.decode(frames, mm.MultiModalFieldElem)
        assert_elem_equal(decoded, _elem(as_ints))  # ints, by type and value


def test_slice_groups_keep_list_or_tuple() -> None:
    field = mm.FlatField([[slice(None), slice(0, 2)], (slice(None), slice(2, 3))], dim=1)
    decoded = _round_trip(_elem(field))
    assert isinstance(decoded.field, mm.FlatField)
    assert [type(s) for s in decoded.field.slices] == [list, tuple]
    assert_elem_equal(decoded, _elem(field))
    assert header(mm.encode(_elem(field))).body  # and nothing else changed on the wire


def test_a_list_slice_group_indexes_as_its_tuple() -> None:
    data = torch.arange(12).reshape(3, 4)
    field = mm.FlatField([[slice(None), slice(0, 2)], (slice(None), slice(2, 4))], dim=1)
    first, second = field.build_elems(data)
    assert isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)
    assert torch.equal(first, data[:, 0:2]) and torch.equal(second, data[:, 2:4])


class _Item(UserDict[str, mm.MultiModalFieldElem]):
    """Like vLLM's MultiModalKwargsItem: a UserDict, whose entries live in ``data``."""


class _ReadOnly(Mapping[str, mm.MultiModalFieldElem]):
    def __init__(self, entries: dict[str, mm.MultiModalFieldElem]) -> None:
        self._entries = entries

    def __getitem__(self, key: str) -> mm.MultiModalFieldElem:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def test_any_mapping_encodes_as_a_mapping_type() -> None:
    shared = mm.MultiModalFieldElem(torch.ones(2), mm.SharedField(2))
    entries = {"b": _elem(mm.BatchedField()), "a": shared}
    expected = mm.MultiModalKwargsItems({"image": [mm.MultiModalKwargsItem(entries), None]})
    for mapping in (_Item(entries), _ReadOnly(entries)):
        items = UserDict({"image": [mapping, None]})
        decoded = mm.decode(
            mm.encode(items, type=mm.MultiModalKwargsItems), mm.MultiModalKwargsItems
        )
        assert_items_equal(decoded, expected)  # key order and None entries kept
        assert type(decoded["image"][0]) is mm.MultiModalKwargsItem


class _Checked(UserDict[str, int]):
    """A UserDict that validates on insertion: it must be built through __setitem__."""

    def __setitem__(self, key: str, value: int) -> None:
        if value < 0:
            raise ValueError("negative")
        super().__setitem__(key, value)


def test_mapping_builder_gives_a_plain_userdict_its_data_and_calls_the_rest() -> None:
    entries = {"b": 1, "a": 2}
    built = mapping_builder(_Item)(entries)
    assert type(built) is _Item and built.data is entries and list(built) == ["b", "a"]
    assert mapping_builder(_Checked) is _Checked  # its checks run
    with pytest.raises(ValueError, match="negative"):
        mapping_builder(_Checked)({"x": -1})
    assert mapping_builder(mm.MultiModalKwargsItem) is mm.MultiModalKwargsItem  # a dict


@dataclasses.dataclass
class _Plain:
    a: int
    b: int = 0


@dataclasses.dataclass(slots=True)
class _Slotted:
    a: int
    b: int


@dataclasses.dataclass(frozen=True)
class _Frozen:
    a: int
    b: int


@dataclasses.dataclass
class _PostInit:
    a: int
    b: int

    def __post_init__(self) -> None:
        self.b += 1


@dataclasses.dataclass
class _NotInInit:
    a: int
    b: int = dataclasses.field(init=False, default=0)


@dataclasses.dataclass
class _WithInitVar:
    a: int
    b: int
    scale: dataclasses.InitVar[int] = 1


@dataclasses.dataclass(init=False)
class _OwnInit:
    a: int
    b: int

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b * 2


@dataclasses.dataclass
class _OwnSetattr:
    a: int
    b: int

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)


class _NotADataclass:
    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b


@pytest.mark.parametrize(
    ("cls", "names", "expected"),
    [
        (_Plain, ("a", "b"), True),
        (_Slotted, ("a", "b"), True),
        (_Plain, ("b", "a"), False),  # another order: __dict__ would be laid out otherwise
        (_Plain, ("a",), False),  # b would be missing
        (_Frozen, ("a", "b"), False),
        (_PostInit, ("a", "b"), False),
        (_NotInInit, ("a", "b"), False),
        (_WithInitVar, ("a", "b"), False),
        (_OwnInit, ("a", "b"), False),
        (_OwnSetattr, ("a", "b"), False),
        (_NotADataclass, ("a", "b"), False),
        (_Plain(1, 2), ("a", "b"), False),  # an instance, not a class
    ],
)
def test_assigns_fields_only_where_init_would_do_just_that(
    cls: type, names: tuple[str, ...], expected: bool
) -> None:
    assert assigns_fields(cls, names) is expected
    if expected:  # what generated code then does builds what calling the class builds
        bare: Any = object.__new__(cls)
        for name, value in zip(names, (1, 2), strict=True):
            setattr(bare, name, value)
        assert bare == cls(1, 2)
        if not hasattr(cls, "__slots__"):
            assert list(vars(bare).items()) == list(vars(cls(1, 2)).items())
