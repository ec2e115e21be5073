"""Property-based round trips: arbitrary items come back exactly, and reduce to the batch.

Items: tensors of every wire dtype (shapes with zeros, non-contiguous views, sizes on
both sides of the inline threshold), ragged lists and tuples of them with int and float
leaves up to depth 3, None data and None items, every field variant with random
parameters. Batches: one tensor per key split by ``from_hf_inputs``.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.dtypes import BY_NAME
from tests.codec.helpers import (
    DTYPE_NAMES,
    assert_items_equal,
    assert_nested_equal,
    random_tensor,
)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

dtypes = st.sampled_from([BY_NAME[name].torch_dtype for name in DTYPE_NAMES])
seeds = st.integers(0, 2**32 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(dtypes)
    shape = draw(st.lists(st.integers(0, 5), max_size=3))
    if draw(st.booleans()) and shape:
        shape[0] = draw(st.integers(0, 400))  # sometimes above the inline threshold
    layout = draw(st.sampled_from(["contiguous", "transposed", "stepped", "expanded"]))
    seed = draw(seeds)
    if layout == "transposed" and len(shape) >= 2:
        return random_tensor(dtype, [*shape[::-1]], seed).transpose(0, -1)
    if layout == "stepped" and shape:
        return random_tensor(dtype, [shape[0] * 2, *shape[1:]], seed)[::2]
    if layout == "expanded" and shape:
        return random_tensor(dtype, [1, *shape[1:]], seed).expand(shape)
    return random_tensor(dtype, shape, seed)


leaves = st.one_of(
    tensors(),
    INT64,
    st.floats(allow_nan=False),
)


def nested(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return leaves
    children = nested(depth - 1)
    return st.one_of(
        leaves,
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
    )


optional_int = st.none() | INT64
slices = st.builds(slice, optional_int, optional_int, optional_int)
flat_slices = slices | st.lists(slices, max_size=3).map(tuple)

fields = st.one_of(
    st.builds(mm.BatchedField, keep_on_cpu=st.booleans()),
    st.builds(
        mm.FlatField,
        slices=st.lists(flat_slices, max_size=4),
        dim=st.integers(0, 2**63 - 1),
        keep_on_cpu=st.booleans(),
    ),
    st.builds(mm.SharedField, batch_size=st.integers(0, 2**63 - 1), keep_on_cpu=st.booleans()),
)

elems = st.builds(mm.MultiModalFieldElem, st.none() | nested(3), fields)
keys = st.text(max_size=6)
items = st.dictionaries(keys, elems, max_size=3).map(mm.MultiModalKwargsItem)
item_lists = st.lists(st.none() | items, max_size=3)
all_items = st.dictionaries(keys, item_lists, max_size=3).map(mm.MultiModalKwargsItems)


@SETTINGS
@given(all_items)
def test_arbitrary_items_round_trip_exactly(value: mm.MultiModalKwargsItems) -> None:
    assert_items_equal(mm.decode(mm.encode(value), mm.MultiModalKwargsItems), value)
    buffer = bytes(mm.encode_bytes(value))
    assert_items_equal(mm.decode_bytes(buffer, mm.MultiModalKwargsItems, copy=True), value)


@st.composite
def batches(
    draw: st.DrawFn,
) -> tuple[dict[str, mm.NestedTensors], dict[str, mm.MultiModalFieldConfig]]:
    """A processor batch: keys split into the same number of items, one tensor each."""
    n = draw(st.integers(1, 5))
    batch: dict[str, mm.NestedTensors] = {}
    config: dict[str, mm.MultiModalFieldConfig] = {}
    for index in range(draw(st.integers(1, 4))):
        key = f"key{index}"
        kind = draw(st.sampled_from(["batched", "flat", "shared"]))
        dtype = draw(dtypes)
        keep = draw(st.booleans())
        seed = draw(seeds)
        if kind == "batched":
            rest = draw(st.lists(st.integers(0, 40), max_size=2))
            tensor = random_tensor(dtype, [n, *rest], seed)
            if len(rest) == 2 and draw(st.booleans()):
                tensor = random_tensor(dtype, [n, rest[1], rest[0]], seed).transpose(1, 2)
            batch[key] = tensor
            config[key] = mm.MultiModalFieldConfig.batched("image", keep_on_cpu=keep)
        elif kind == "flat":
            shape = draw(st.lists(st.integers(0, 30), min_size=1, max_size=3))
            dim = draw(st.integers(0, len(shape) - 1))
            sizes = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
            shape[dim] = sum(sizes)
            batch[key] = random_tensor(dtype, shape, seed)
            config[key] = mm.MultiModalFieldConfig.flat_from_sizes(
                "image", torch.tensor(sizes), dim, keep_on_cpu=keep
            )
        else:
            shape = draw(st.lists(st.integers(0, 30), max_size=3))
            batch[key] = random_tensor(dtype, shape, seed)
            config[key] = mm.MultiModalFieldConfig.shared("image", n, keep_on_cpu=keep)
    return batch, config


@SETTINGS
@given(batches())
def test_items_from_one_batch_reduce_to_that_batch(
    case: tuple[dict[str, mm.NestedTensors], dict[str, mm.MultiModalFieldConfig]],
) -> None:
    batch, config = case
    value = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    for decoded in (
        mm.decode(mm.encode(value), mm.MultiModalKwargsItems),
        mm.decode_bytes(mm.encode_bytes(value), mm.MultiModalKwargsItems),
    ):
        assert_items_equal(decoded, value)
        reduced = decoded.get_data()
        assert list(reduced) == list(batch)
        for key, expected in batch.items():
            assert_nested_equal(reduced[key], expected, f"get_data()[{key!r}]")
