"""The floor: what any correct codec of a payload must do, timed beside mmcodec in one run.

A codec cannot cost less than reading what it sends and building what it returns. This
module does exactly that and nothing else, on the same objects and the same memory:

- **Encode floor** (:func:`encode_floor`): walk every modality, item and element (reading
  each element's ``data`` and ``field``), and read the layout of every distinct tensor
  (by identity, as a deduplicating codec must): ``data_ptr()``, ``shape``, ``stride()``,
  ``dtype``, ``storage_offset()`` and ``nbytes``. No checks, no planning, no header, no
  frames: whatever a codec does beyond this is its own cost.
- **Decode floor** (:meth:`Floor.decode`): from the memory the payloads are in (the source
  tensors' storages, which mmcodec's frames view in-process), build the same decoded
  objects with no wire work: per run of same-shape tensors laid back to back, one numpy
  view and one torch call (``unbind`` for a batch), as mmcodec's decoder does; one object
  per distinct field variant (a flat field's slices built anew, with int bounds, as a
  decoder returns them), element and item (shared ones shared, as the source shares them);
  the item lists and the items map. Each class is built the cheapest way the
  runtime knows (:func:`~mmcodec.runtime.builtins.mapping_builder`, and a plain dataclass
  by assigning its fields when :func:`~mmcodec.runtime.builtins.assigns_fields` allows),
  so a slow constructor does not flatter a codec that avoids it. Which tensor, field and
  element goes where is worked out once, before timing (:func:`plan`): that knowledge is
  what a wire format carries, and reading it is a codec's own cost.
- **Round-trip floor**: both, then :func:`bench.runner.touch` on the result, exactly as
  mmcodec's round trip is touched.

The floor is generic over the classes (``api``: this package's domain module or
``vllm.multimodal.inputs``), so ``make bench-vllm`` measures it on vLLM's classes too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import ModuleType
from typing import Any, Final

import numpy as np
import torch

from bench.runner import Budget, Stats, measure_interleaved, touch
from mmcodec.runtime.builtins import assigns_fields, expect_mapping, mapping_builder
from mmcodec.runtime.dtypes import BY_TORCH

__all__ = [
    "FLOOR_PAYLOADS",
    "STEPS",
    "Floor",
    "FloorResult",
    "encode_floor",
    "measure_floor",
    "plan",
]

FLOOR_PAYLOADS: Final = ("64 small items", "qwen2.5-vl x16")
"""The payloads with a floor row: many small items, and a list-heavy realistic request
(16 images: 16 items, a flat field of 16 slices, a batched grid)."""

_Tensor = torch.Tensor


# -- encode ---------------------------------------------------------------------------------


def encode_floor(items: Any) -> int:
    """Walk every element and read every distinct tensor's layout; return how many."""
    layouts: dict[int, tuple[Any, ...]] = {}
    for item_list in expect_mapping(items).values():
        for item in item_list:
            if item is None:
                continue
            for elem in expect_mapping(item).values():
                data = elem.data
                _ = elem.field
                if type(data) is _Tensor:
                    if id(data) not in layouts:
                        layouts[id(data)] = _layout(data)
                elif data is not None:
                    _nested_layouts(data, layouts)
    return len(layouts)


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.storage_offset(), t.nbytes)


def _nested_layouts(data: object, layouts: dict[int, tuple[Any, ...]]) -> None:
    if isinstance(data, _Tensor):
        if id(data) not in layouts:
            layouts[id(data)] = _layout(data)
    elif isinstance(data, (list, tuple)):
        for x in data:
            _nested_layouts(x, layouts)


# -- decode ---------------------------------------------------------------------------------

_Run = tuple[np.dtype[Any], tuple[int, ...], int, memoryview, int, "torch.dtype | None"]
"""(numpy carrier, shape of the run (count first when count > 1), count, buffer, byte
offset, torch dtype to re-view as or None)."""
_Data = Any
"""An element's data as the plan says how to build it: a tensor position (int), a leaf
(:class:`_Leaf`), a list or tuple of those, or None."""


@dataclass(frozen=True, slots=True)
class _Leaf:
    value: int | float


@dataclass(frozen=True, slots=True)
class Floor:
    """What the decode floor builds, and from where (see :func:`plan`)."""

    runs: tuple[_Run, ...]
    fields: tuple[tuple[type, dict[str, Any]], ...]
    """Per distinct field object: its class and constructor keywords."""
    elems: tuple[tuple[_Data, int], ...]
    """Per distinct element: its data and the index of its field."""
    modalities: tuple[tuple[str, tuple[tuple[tuple[str, ...], tuple[int, ...]] | None, ...]], ...]
    """Per modality, per item: its keys and the indices of their elements (or None)."""
    make_elem: Callable[[Any, Any], Any]
    make_item: Callable[[dict[str, Any]], Any]
    make_items: Callable[[dict[str, Any]], Any]

    def decode(self) -> Any:
        """Build the decoded objects (see the module's docstring)."""
        tensors: list[torch.Tensor] = []
        for carrier, shape, count, buffer, offset, view in self.runs:
            t = torch.from_numpy(np.ndarray(shape, carrier, buffer, offset))
            if view is not None:
                t = t.view(view)
            if count == 1:
                tensors.append(t)
            else:
                tensors.extend(t.unbind(0))
        field_objects = [
            cls(**{name: _value(v) for name, v in kwargs.items()}) for cls, kwargs in self.fields
        ]
        make_elem = self.make_elem
        elems = [
            make_elem(
                tensors[data] if type(data) is int else _build(data, tensors),
                field_objects[field],
            )
            for data, field in self.elems
        ]
        make_item = self.make_item
        out = {
            modality: [
                None
                if spec is None
                else make_item(dict(zip(spec[0], [elems[i] for i in spec[1]], strict=True)))
                for spec in specs
            ]
            for modality, specs in self.modalities
        }
        return self.make_items(out)

    def roundtrip(self, items: Any) -> object:
        """The round-trip floor: the encode floor, the decode floor, the touch."""
        encode_floor(items)
        return touch(self.decode())


@dataclass(frozen=True, slots=True)
class _Slices:
    """A flat field's slices, built anew by every decode (a codec builds them too): per
    item, the bounds of one slice, or a list or tuple of them."""

    items: tuple[Any, ...]


def _value(param: Any) -> Any:
    """A field's constructor argument: itself, or slices built from their bounds."""
    if type(param) is not _Slices:
        return param
    out: list[Any] = []
    for kind, bounds in param.items:
        if kind == "slice":
            out.append(slice(*bounds))
        elif kind == "tuple":
            out.append(tuple(slice(*b) for b in bounds))
        else:
            out.append([slice(*b) for b in bounds])
    return out


def _slices(slices: Any) -> _Slices:
    """What a flat field's slices decode to (int bounds: vLLM builds 0-d tensors)."""

    def bounds(s: slice) -> tuple[int | None, ...]:
        return tuple(None if b is None else int(b) for b in (s.start, s.stop, s.step))

    entries: list[tuple[str, Any]] = []
    for s in slices:
        if type(s) is slice:
            entries.append(("slice", bounds(s)))
        else:
            entries.append((type(s).__name__, tuple(bounds(x) for x in s)))
    return _Slices(tuple(entries))


def _build(data: _Data, tensors: list[torch.Tensor]) -> Any:
    if data is None:
        return None
    if type(data) is int:
        return tensors[data]
    if type(data) is _Leaf:
        return data.value
    built = [_build(x, tensors) for x in data]
    return built if type(data) is list else tuple(built)


def plan(items: Any, api: ModuleType) -> Floor:
    """Work out, untimed, what :meth:`Floor.decode` builds for ``items`` and from where."""
    tensors: dict[int, torch.Tensor] = {}
    field_index: dict[int, int] = {}
    field_specs: list[tuple[type, dict[str, Any]]] = []
    elem_index: dict[int, int] = {}
    elem_specs: list[tuple[Any, int]] = []  # data as tensor ids, resolved below
    modalities = []
    for modality, item_list in expect_mapping(items).items():
        specs: list[tuple[tuple[str, ...], tuple[int, ...]] | None] = []
        for item in item_list:
            if item is None:
                specs.append(None)
                continue
            entries = expect_mapping(item)
            indices = []
            for elem in entries.values():
                if id(elem) not in elem_index:
                    field = elem.field
                    if id(field) not in field_index:
                        field_index[id(field)] = len(field_specs)
                        field_specs.append((type(field), _params(field)))
                    elem_index[id(elem)] = len(elem_specs)
                    elem_specs.append((_collect(elem.data, tensors), field_index[id(field)]))
                indices.append(elem_index[id(elem)])
            specs.append((tuple(entries), tuple(indices)))
        modalities.append((modality, tuple(specs)))
    runs, position = _runs(list(tensors.values()))
    elems = tuple((_positions(data, position), field) for data, field in elem_specs)
    return Floor(
        runs=tuple(runs),
        fields=tuple(field_specs),
        elems=elems,
        modalities=tuple(modalities),
        make_elem=_elem_maker(api.MultiModalFieldElem),
        make_item=mapping_builder(api.MultiModalKwargsItem),
        make_items=mapping_builder(api.MultiModalKwargsItems),
    )


def _params(field: object) -> dict[str, Any]:
    if is_dataclass(field):
        params = {f.name: getattr(field, f.name) for f in fields(field)}
    else:
        names = ("keep_on_cpu", "slices", "dim", "batch_size")
        params = {n: getattr(field, n) for n in names if hasattr(field, n)}
    if "slices" in params:
        params["slices"] = _slices(params["slices"])
    return params


def _elem_maker(cls: type) -> Callable[[Any, Any], Any]:
    if not assigns_fields(cls, ("data", "field")):
        return cls  # the class's own constructor (a msgspec Struct's is C code)
    new = object.__new__

    def make(data: Any, field: Any) -> Any:
        elem: Any = new(cls)
        elem.data = data
        elem.field = field
        return elem

    return make


def _collect(data: object, tensors: dict[int, torch.Tensor]) -> Any:
    """The element's data with each tensor replaced by its id (registered in ``tensors``)."""
    if data is None:
        return None
    if isinstance(data, _Tensor):
        tensors.setdefault(id(data), data)
        return ("t", id(data))
    if isinstance(data, (int, float)):
        return _Leaf(data)
    assert isinstance(data, (list, tuple)), type(data)
    collected = [_collect(x, tensors) for x in data]
    return collected if type(data) is list else tuple(collected)


def _positions(data: Any, position: Mapping[int, int]) -> _Data:
    if data is None or type(data) is _Leaf:
        return data
    if type(data) is tuple and len(data) == 2 and data[0] == "t":
        return position[data[1]]
    out = [_positions(x, position) for x in data]
    return out if type(data) is list else tuple(out)


def _runs(tensors: list[torch.Tensor]) -> tuple[list[_Run], dict[int, int]]:
    """Group same-dtype, same-shape tensors that lie back to back in one storage into runs."""
    groups: dict[tuple[int, torch.dtype, tuple[int, ...]], list[tuple[int, torch.Tensor]]] = {}
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("the floor's payloads hold contiguous tensors only")
        base = t.untyped_storage().data_ptr()
        key = (base, t.dtype, tuple(t.shape))
        groups.setdefault(key, []).append((t.data_ptr() - base, t))
    runs: list[_Run] = []
    position: dict[int, int] = {}
    for (_, dtype, shape), members in groups.items():
        members.sort(key=lambda m: m[0])
        nbytes = members[0][1].nbytes
        start = 0
        while start < len(members):
            end = start + 1
            while end < len(members) and nbytes and members[end][0] == members[end - 1][0] + nbytes:
                end += 1
            first = members[start][1]
            count = end - start
            info = BY_TORCH[dtype]
            storage = torch.empty(0, dtype=torch.uint8).set_(first.untyped_storage())
            buffer = memoryview(storage.numpy().data).cast("B")
            run_shape = shape if count == 1 else (count, *shape)
            view = info.torch_dtype if info.needs_view else None
            runs.append((info.numpy_carrier, run_shape, count, buffer, members[start][0], view))
            for _, t in members[start:end]:
                position[id(t)] = len(position)
            start = end
    return runs, position


# -- measurement ----------------------------------------------------------------------------

STEPS: Final = ("encode", "decode", "round trip")
"""What the floor table compares: encode; decode with every tensor touched; the round trip
(encode, decode, touch)."""


@dataclass(frozen=True, slots=True)
class FloorResult:
    """A codec and the floor on one payload, timed side by side in one run."""

    payload: str
    codec: dict[str, Stats]
    floor: dict[str, Stats]

    def ratio(self, step: str, stat: str = "median") -> float:
        """The codec's ``stat`` (``"median"`` or ``"p10"``) ÷ the floor's: at least 1 when
        the codec does more than the floor, as it must."""
        ours, floor = self.codec[step], self.floor[step]
        return getattr(ours, stat) / getattr(floor, stat)  # type: ignore[no-any-return]


def measure_floor(
    payload: str,
    items: Any,
    api: ModuleType,
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
    budget: Budget,
    rounds: int = 10,
) -> FloorResult:
    """Time ``encode``/``decode`` (a codec of ``api``'s classes) and the floor on ``items``,
    interleaved (:func:`bench.runner.measure_interleaved`); decodes are touched."""
    floor = plan(items, api)
    if floor.decode() != items:  # the floor builds what the codec builds, or it is no floor
        raise AssertionError(f"the decode floor does not rebuild {payload}")
    frames = encode(items)
    fns: dict[tuple[str, str], Callable[[], object]] = {
        ("codec", "encode"): lambda: encode(items),
        ("codec", "decode"): lambda: touch(decode(frames)),
        ("codec", "round trip"): lambda: touch(decode(encode(items))),
        ("floor", "encode"): lambda: encode_floor(items),
        ("floor", "decode"): lambda: touch(floor.decode()),
        ("floor", "round trip"): lambda: floor.roundtrip(items),
    }
    stats = measure_interleaved(fns, budget, rounds=rounds)
    return FloorResult(
        payload,
        {step: stats[("codec", step)] for step in STEPS},
        {step: stats[("floor", step)] for step in STEPS},
    )
