"""Multimodal model inputs: field variants, elements, items, with vLLM-compatible semantics.

A processor turns a request's media into one batch dict (``key -> NestedTensors``). To cache
and ship items one at a time, each key's value is split into per-item *elements*; the *field*
variant of an element says how the elements of many items merge back into a batch:

- ``BatchedField``: the batch is the elements stacked along a new dim 0.
- ``FlatField``: the batch is the elements concatenated along ``dim``; each element is
  ``batch[slice]``.
- ``SharedField``: every item holds the same data; the batch is that data.

Equality is deliberately stricter than vLLM's: fields compare with their parameters and data
compares list vs tuple and int vs float, so a lossy round trip cannot go unnoticed.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Self, TypeAlias, cast

import msgspec
import torch

from mmcodec.domain.reduce_bound import POINTER_BYTES, TENSOR_BYTES, ReduceBound, tensor_bytes
from mmcodec.runtime.equality import values_equal
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "BaseMultiModalField",
    "BatchedField",
    "FlatField",
    "MultiModalFieldConfig",
    "MultiModalFieldElem",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "NestedTensors",
    "SharedField",
]

NestedTensors: TypeAlias = (
    torch.Tensor | int | float | list["NestedTensors"] | tuple["NestedTensors", ...]
)
"""A tensor, an int or float leaf, or a (possibly ragged) list or tuple of NestedTensors."""


class BaseMultiModalField(abc.ABC):
    """How one key's batch value splits into per-item data and merges back."""

    __slots__ = ("keep_on_cpu",)
    __hash__ = None  # type: ignore[assignment]

    keep_on_cpu: bool
    """The engine keeps this field on the CPU instead of moving it to the accelerator."""

    def __init__(self, keep_on_cpu: bool = False) -> None:
        self.keep_on_cpu = keep_on_cpu

    @abc.abstractmethod
    def build_elems(self, data: NestedTensors) -> list[NestedTensors]:
        """Split a batch value into one piece of data per item (views, never copies)."""

    def elements(self, data: NestedTensors) -> list[MultiModalFieldElem]:
        """One element per item of a batch value, each carrying this field."""
        return [MultiModalFieldElem(piece, self) for piece in self.build_elems(data)]

    @abc.abstractmethod
    def _reduce(self, datas: list[NestedTensors], bound: ReduceBound) -> NestedTensors:
        """Merge per-item data (all of this field's class, none None) into a batch value,
        checking with ``bound`` what it builds before it allocates."""

    def reduce_data(
        self, elems: Sequence[MultiModalFieldElem], *, limits: Limits = DEFAULT_LIMITS
    ) -> NestedTensors:
        """Merge the elements' data into a batch value; the inverse of ``build_elems``.

        Raises ValueError when an element has a field of another class (the merge rule would
        be ambiguous) or holds no data (a cached item whose data was not sent), and, before
        allocating, when the batch would take more than ``limits.max_reduce_ratio`` times
        the bytes the elements hold (see :mod:`mmcodec.domain.reduce_bound`).
        """
        return self._reduce_elems(elems, limits, f"{len(elems)} elements")

    def _reduce_elems(
        self, elems: Sequence[MultiModalFieldElem], limits: Limits, what: str
    ) -> NestedTensors:
        cls = type(self)
        datas: list[NestedTensors] = []
        for i, elem in enumerate(elems):
            if type(elem.field) is not cls:
                raise ValueError(
                    f"cannot reduce elements of different field types: "
                    f"{cls.__name__} and {type(elem.field).__name__}"
                )
            if elem.data is None:
                raise ValueError(f"cannot reduce element {i}: its data is None")
            datas.append(elem.data)
        return self._reduce(datas, ReduceBound(datas, limits.max_reduce_ratio, what))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BaseMultiModalField)
            and type(other) is type(self)
            and self._params() == other._params()
        )

    def _params(self) -> tuple[Any, ...]:
        return (self.keep_on_cpu,)


class BatchedField(BaseMultiModalField):
    """Each item is one index of dim 0; the batch is the items stacked (a list when ragged)."""

    __slots__ = ()

    def build_elems(self, data: NestedTensors) -> list[NestedTensors]:
        if isinstance(data, torch.Tensor):
            if data.ndim == 0:
                raise TypeError("a batched field needs a tensor with at least one dimension")
            # One call instead of a loop of data[i]: the same views (storage and offsets).
            return list(data.unbind(0))
        if isinstance(data, (list, tuple)):
            return list(data)
        raise TypeError(f"a batched field needs a tensor, list or tuple, not {type(data).__name__}")

    def _reduce(self, datas: list[NestedTensors], bound: ReduceBound) -> NestedTensors:
        if not datas or not all(isinstance(d, torch.Tensor) for d in datas):
            return datas
        tensors = cast(list[torch.Tensor], datas)
        first = tensors[0]
        if len(tensors) == 1:
            # Same result as torch.stack, without a copy when the tensor is contiguous.
            return _contiguous(first.unsqueeze(0), bound)
        if all(t.shape == first.shape and t.dtype == first.dtype for t in tensors):
            bound.check_tensors(len(tensors) * tensor_bytes(first.shape, first.dtype))
            return torch.stack(tensors)
        return datas

    def __repr__(self) -> str:
        return f"BatchedField(keep_on_cpu={self.keep_on_cpu!r})"


class FlatField(BaseMultiModalField):
    """Each item is ``batch[slice]``; the batch is the items concatenated along ``dim``.

    For ``dim > 0`` each slice is a tuple of slices, one per leading dimension (or a list
    of them, as vLLM's own tests build; the codec keeps lists and tuples apart).
    """

    __slots__ = ("dim", "slices")

    slices: Sequence[slice | tuple[slice, ...] | list[slice]]
    dim: int

    def __init__(
        self,
        slices: Sequence[slice | tuple[slice, ...] | list[slice]],
        dim: int = 0,
        keep_on_cpu: bool = False,
    ) -> None:
        super().__init__(keep_on_cpu)
        self.slices = slices  # kept as given: the codec decides how to carry the container
        self.dim = dim

    def build_elems(self, data: NestedTensors) -> list[NestedTensors]:
        if isinstance(data, torch.Tensor):
            # A list of slices indexes as the tuple it stands for (not as a fancy index).
            return [data[tuple(s) if type(s) is list else s] for s in self.slices]
        if isinstance(data, (list, tuple)):
            if not all(type(s) is slice for s in self.slices):
                raise TypeError("a flat field over a list or tuple needs plain slices")
            return [data[s] for s in self.slices]  # type: ignore[index]
        raise TypeError(f"a flat field needs a tensor, list or tuple, not {type(data).__name__}")

    def _reduce(self, datas: list[NestedTensors], bound: ReduceBound) -> NestedTensors:
        if datas and all(isinstance(d, torch.Tensor) for d in datas):
            return self._concat(cast(list[torch.Tensor], datas), bound)
        if self.dim != 0:
            raise ValueError(f"a flat field over lists needs dim 0, not {self.dim}")
        building = 0
        for d in datas:
            if not isinstance(d, (torch.Tensor, list, tuple)):
                raise TypeError(f"cannot flatten a {type(d).__name__} into a flat field's batch")
            # A tensor's rows become new tensors; a list's entries, pointers.
            each = TENSOR_BYTES + POINTER_BYTES if isinstance(d, torch.Tensor) else POINTER_BYTES
            building += len(d) * each
        bound.check(building)  # one list shared by many elements, an empty tensor's rows
        out: list[NestedTensors] = []
        for d in datas:
            out.extend(d)  # type: ignore[arg-type]
        return out

    def _concat(self, tensors: list[torch.Tensor], bound: ReduceBound) -> torch.Tensor:
        first = tensors[0]
        if len(tensors) == 1:
            # Same result as torch.cat, without a copy when the tensor is contiguous.
            return _contiguous(first, bound)
        ndim = first.ndim
        dim = self.dim + ndim if self.dim < 0 else self.dim
        if any(t.ndim != ndim for t in tensors):
            raise ValueError("cannot concatenate tensors of different ranks in a flat field")
        dtype = first.dtype
        for t in tensors[1:]:
            dtype = torch.promote_types(dtype, t.dtype)  # what torch.cat produces
        off_dim = first.shape[:dim] + first.shape[dim + 1 :]
        if all(t.shape[:dim] + t.shape[dim + 1 :] == off_dim for t in tensors):
            bound.check_tensors(sum(t.numel() for t in tensors) * dtype.itemsize)
            return torch.cat(tensors, dim=dim)
        # Ragged off `dim` (e.g. audio of different lengths): zero-pad every other dimension
        # to its maximum, as vLLM does, by writing each tensor into a zeroed output.
        sizes = [max(t.shape[d] for t in tensors) for d in range(ndim)]
        sizes[dim] = sum(t.shape[dim] for t in tensors)
        bound.check_tensors(tensor_bytes(sizes, dtype))
        out = torch.zeros(sizes, dtype=dtype, device=first.device)
        start = 0
        for t in tensors:
            index = [slice(0, n) for n in t.shape]
            index[dim] = slice(start, start + t.shape[dim])
            out[tuple(index)] = t
            start += t.shape[dim]
        return out

    def _params(self) -> tuple[Any, ...]:
        return (self.keep_on_cpu, self.dim)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FlatField)
            and super().__eq__(other)
            # The container may be a list or a tuple; each entry's kind (slice or tuple
            # of slices) and bounds must match exactly.
            and values_equal(list(self.slices), list(other.slices))
        )

    def __repr__(self) -> str:
        return (
            f"FlatField(slices={self.slices!r}, dim={self.dim!r}, keep_on_cpu={self.keep_on_cpu!r})"
        )


class SharedField(BaseMultiModalField):
    """Every item holds the same data; the batch is that data."""

    __slots__ = ("batch_size",)

    batch_size: int

    def __init__(self, batch_size: int, keep_on_cpu: bool = False) -> None:
        super().__init__(keep_on_cpu)
        self.batch_size = batch_size

    def build_elems(self, data: NestedTensors) -> list[NestedTensors]:
        return [data] * self.batch_size  # the same object: it must travel once, not per item

    def elements(self, data: NestedTensors) -> list[MultiModalFieldElem]:
        # As vLLM's MultiModalSharedField.build_elems: one element object in every item,
        # which travels once.
        return [MultiModalFieldElem(data, self)] * self.batch_size

    def _reduce(self, datas: list[NestedTensors], bound: ReduceBound) -> NestedTensors:
        if not datas:
            raise ValueError("a shared field cannot reduce zero elements")
        return datas[0]  # builds nothing

    def _params(self) -> tuple[Any, ...]:
        return (self.keep_on_cpu, self.batch_size)

    def __repr__(self) -> str:
        return f"SharedField(batch_size={self.batch_size!r}, keep_on_cpu={self.keep_on_cpu!r})"


def _contiguous(t: torch.Tensor, bound: ReduceBound) -> torch.Tensor:
    """``t`` itself when contiguous (no copy, nothing to check), else a checked copy."""
    if t.is_contiguous():
        return t
    bound.check_tensors(tensor_bytes(t.shape, t.dtype))
    return t.contiguous()


class MultiModalFieldElem(msgspec.Struct, eq=False):
    """One item's data for one key, with the field that says how it merges into a batch.

    ``data`` is None when the item is cached on the receiving side and was not sent.
    A msgspec Struct only for its C-level constructor: a request can hold hundreds of
    elements, and a Python ``__init__`` would cost four times as much per element.
    """

    __hash__ = None  # type: ignore[assignment]

    data: NestedTensors | None
    field: BaseMultiModalField

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MultiModalFieldElem)
            and type(other) is type(self)
            and values_equal(self.data, other.data)
            and self.field == other.field
        )

    def __repr__(self) -> str:
        return f"MultiModalFieldElem(data={_summary(self.data)}, field={self.field!r})"


def _summary(data: object) -> str:
    """A short description of nested data; a tensor's full repr would drown the structure."""
    if isinstance(data, torch.Tensor):
        return f"<tensor {str(data.dtype).removeprefix('torch.')}{list(data.shape)}>"
    if isinstance(data, list):
        return "[" + ", ".join(map(_summary, data)) + "]"
    if isinstance(data, tuple):
        return "(" + ", ".join(map(_summary, data)) + (",)" if len(data) == 1 else ")")
    return repr(data)


class MultiModalKwargsItem(dict[str, MultiModalFieldElem]):
    """One multimodal item (one image, one audio clip): ``key -> element``.

    Equality is that of an ordered mapping: same keys in the same order, equal elements.
    """

    def get_data(self) -> dict[str, NestedTensors | None]:
        """The item's unbatched data: ``key -> element data``."""
        return {key: elem.data for key, elem in self.items()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiModalKwargsItem) or type(other) is not type(self):
            return False
        return list(self) == list(other) and all(self[k] == other[k] for k in self)

    def __ne__(self, other: object) -> bool:  # dict defines its own __ne__; keep it consistent
        return not self == other

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


class MultiModalKwargsItems(dict[str, list[MultiModalKwargsItem | None]]):
    """Items by modality, in prompt order; an entry is None when the item is cached elsewhere.

    Equality is that of an ordered mapping: same modalities in the same order, equal item lists.
    """

    @classmethod
    def from_hf_inputs(
        cls,
        batch: Mapping[str, NestedTensors],
        config: Mapping[str, MultiModalFieldConfig],
    ) -> Self:
        """Split a processor's batch into items, grouped by the modality of each key's config.

        Like vLLM, keys without a config, None values and keys that yield no elements are
        skipped. Modalities and each item's keys follow the batch's key order. Raises
        ValueError when the keys of one modality yield different numbers of items.
        """
        by_modality: dict[str, dict[str, list[MultiModalFieldElem]]] = {}
        for key, value in batch.items():
            field_config = config.get(key)
            if field_config is None or value is None:
                continue
            elems = field_config.build_elems(value)
            if elems:
                by_modality.setdefault(field_config.modality, {})[key] = elems

        out = cls()
        for modality, elems_by_key in by_modality.items():
            counts = {key: len(elems) for key, elems in elems_by_key.items()}
            n_items = len(next(iter(elems_by_key.values())))
            if any(n != n_items for n in counts.values()):
                raise ValueError(
                    f"keys of modality {modality!r} yield different numbers of items: {counts}"
                )
            out[modality] = [
                MultiModalKwargsItem({key: elems[i] for key, elems in elems_by_key.items()})
                for i in range(n_items)
            ]
        return out

    def get_data(self, *, limits: Limits = DEFAULT_LIMITS) -> dict[str, NestedTensors]:
        """The batch to pass to the model: every key's elements, across all items, reduced.

        Elements are gathered in modality order, then item order. Raises RuntimeError (as
        vLLM does) when an item is None: its data is cached elsewhere and was not filled in;
        ValueError as ``reduce_data`` does, naming the key, when a key's elements cannot be
        merged or their batch would take more than ``limits.max_reduce_ratio`` times the
        bytes they hold (checked before anything is allocated).
        """
        elems_by_key: dict[str, list[MultiModalFieldElem]] = {}
        for modality, items in self.items():
            for i, item in enumerate(items):
                if item is None:
                    raise RuntimeError(f"cannot build data: item {modality!r}[{i}] is None")
                for key, elem in item.items():
                    elems_by_key.setdefault(key, []).append(elem)
        return {
            key: elems[0].field._reduce_elems(elems, limits, repr(key))
            for key, elems in elems_by_key.items()
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiModalKwargsItems) or type(other) is not type(self):
            return False
        return list(self) == list(other) and all(
            len(self[m]) == len(other[m]) and all(map(_item_equal, self[m], other[m])) for m in self
        )

    def __ne__(self, other: object) -> bool:  # dict defines its own __ne__; keep it consistent
        return not self == other

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


def _item_equal(a: MultiModalKwargsItem | None, b: MultiModalKwargsItem | None) -> bool:
    return b is None if a is None else a == b


class MultiModalFieldConfig:
    """A processor's declaration of one key: its field variant and the modality it belongs to."""

    __slots__ = ("field", "modality")
    __hash__ = None  # type: ignore[assignment]

    field: BaseMultiModalField
    modality: str

    def __init__(self, field: BaseMultiModalField, modality: str) -> None:
        self.field = field
        self.modality = modality

    @staticmethod
    def batched(modality: str, *, keep_on_cpu: bool = False) -> MultiModalFieldConfig:
        """Item ``i`` is ``batch[i]``."""
        return MultiModalFieldConfig(BatchedField(keep_on_cpu), modality)

    @staticmethod
    def flat(
        modality: str,
        slices: Sequence[slice | tuple[slice, ...]],
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> MultiModalFieldConfig:
        """Item ``i`` is ``batch[slices[i]]`` (a tuple of slices when ``dim > 0``)."""
        return MultiModalFieldConfig(FlatField(slices, dim, keep_on_cpu), modality)

    @staticmethod
    def flat_from_sizes(
        modality: str,
        size_per_item: torch.Tensor,
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> MultiModalFieldConfig:
        """Item ``i`` spans ``size_per_item[i]`` consecutive indices of ``dim``.

        Slice bounds are Python ints. For ``dim == 0`` each slice is a plain slice; for
        ``dim > 0`` it is ``(slice(None),) * dim + (slice(start, stop),)``.
        """
        if size_per_item.ndim != 1:
            raise ValueError(
                f"size_per_item must be a 1-D tensor, not of shape {tuple(size_per_item.shape)}"
            )
        if dim < 0:
            raise ValueError(f"flat_from_sizes needs a non-negative dim, not {dim}")
        bounds = [0, *itertools.accumulate(int(n) for n in size_per_item.tolist())]
        starts_stops = itertools.pairwise(bounds)
        slices: list[slice] | list[tuple[slice, ...]]
        if dim == 0:
            slices = [slice(a, b) for a, b in starts_stops]
        else:
            lead = (slice(None),) * dim
            slices = [(*lead, slice(a, b)) for a, b in starts_stops]
        return MultiModalFieldConfig(FlatField(slices, dim, keep_on_cpu), modality)

    @staticmethod
    def shared(
        modality: str, batch_size: int, *, keep_on_cpu: bool = False
    ) -> MultiModalFieldConfig:
        """Each of the ``batch_size`` items holds the whole batch value."""
        return MultiModalFieldConfig(SharedField(batch_size, keep_on_cpu), modality)

    def build_elems(self, batch_value: NestedTensors) -> list[MultiModalFieldElem]:
        """One element per item, each carrying this config's field (see ``field.elements``)."""
        return self.field.elements(batch_value)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MultiModalFieldConfig)
            and type(other) is type(self)
            and self.modality == other.modality
            and self.field == other.field
        )

    def __repr__(self) -> str:
        return f"MultiModalFieldConfig(field={self.field!r}, modality={self.modality!r})"
