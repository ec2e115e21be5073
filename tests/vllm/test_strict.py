"""The strict comparison catches what vLLM's own equality lets through.

Each case is an original and a plausible lossy decoding of it that vLLM's ``==`` accepts;
:func:`tests.vllm.strict.assert_same` must reject every one, or the round-trip tests
that rely on it would prove nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import vllm.multimodal.inputs as vi

from tests.vllm.strict import assert_same


def _item(field: Any, data: Any = None) -> Any:
    data = torch.arange(6).reshape(2, 3) if data is None else data
    return vi.MultiModalKwargsItem({"x": vi.MultiModalFieldElem(data=data, field=field)})


def _flat(slices: Any, dim: int = 0, keep_on_cpu: bool = False) -> Any:
    return vi.MultiModalFlatField(slices=slices, dim=dim, keep_on_cpu=keep_on_cpu)


def _two_items(shared: bool) -> Any:
    field = vi.MultiModalBatchedField()
    other = vi.MultiModalBatchedField() if not shared else field
    return vi.MultiModalKwargsItems(
        {"image": [_item(field), _item(other)]},
    )


CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "keep_on_cpu lost": (
        lambda: _item(vi.MultiModalBatchedField(keep_on_cpu=True)),
        lambda: _item(vi.MultiModalBatchedField()),
    ),
    "dim lost": (lambda: _item(_flat([slice(0, 2)], dim=1)), lambda: _item(_flat([slice(0, 2)]))),
    "slices changed": (lambda: _item(_flat([slice(0, 2)])), lambda: _item(_flat([slice(0, 1)]))),
    "tuple slice group as a list": (
        lambda: _item(_flat([(slice(None), slice(0, 2))], dim=1)),
        lambda: _item(_flat([[slice(None), slice(0, 2)]], dim=1)),
    ),
    "batch_size changed": (
        lambda: _item(vi.MultiModalSharedField(batch_size=4)),
        lambda: _item(vi.MultiModalSharedField(batch_size=3)),
    ),
    "tuple data as a list": (
        lambda: _item(vi.MultiModalBatchedField(), (torch.zeros(2), torch.ones(1))),
        lambda: _item(vi.MultiModalBatchedField(), [torch.zeros(2), torch.ones(1)]),
    ),
    "key order": (
        lambda: vi.MultiModalKwargsItem(
            {
                "a": vi.MultiModalFieldElem(data=torch.zeros(1), field=vi.MultiModalBatchedField()),
                "b": vi.MultiModalFieldElem(data=torch.ones(1), field=vi.MultiModalBatchedField()),
            }
        ),
        lambda: vi.MultiModalKwargsItem(
            {
                "b": vi.MultiModalFieldElem(data=torch.ones(1), field=vi.MultiModalBatchedField()),
                "a": vi.MultiModalFieldElem(data=torch.zeros(1), field=vi.MultiModalBatchedField()),
            }
        ),
    ),
    "shared field no longer shared": (lambda: _two_items(True), lambda: _two_items(False)),
    "float data as a tensor": (
        lambda: _item(vi.MultiModalBatchedField(), [torch.zeros(1), 2.0]),
        lambda: _item(vi.MultiModalBatchedField(), [torch.zeros(1), 2]),
    ),
}


# The cases vLLM's equality does tell apart (the others it lets through).
VLLM_NOTICES = {"tuple data as a list", "float data as a tensor"}


@pytest.mark.parametrize("name", list(CASES))
def test_a_lossy_decoding_is_caught(name: str) -> None:
    original, lossy = (make() for make in CASES[name])
    if name not in VLLM_NOTICES:
        assert lossy == original  # vLLM's equality is satisfied ...
    with pytest.raises(AssertionError):  # ... the strict comparison is not
        assert_same(lossy, original)


def test_an_exact_copy_passes() -> None:
    original = _two_items(True)
    assert_same(original, original)
