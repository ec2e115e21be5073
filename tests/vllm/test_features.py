"""``MultiModalFeatureSpec``, the per-request unit vLLM's engine core receives."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import vllm.multimodal.inputs as vi

from mmcodec.generated import multimodal as mm
from mmcodec.generated import multimodal_vllm as mv
from mmcodec.payloads import qwen2_5_vl
from tests.vllm.strict import assert_same


def _spec(with_data: bool, is_embed: torch.Tensor | None, mm_hash: str | None) -> Any:
    item = qwen2_5_vl(0, api=vi)["image"][0] if with_data else None
    position = vi.PlaceholderRange(offset=3, length=6, is_embed=is_embed)
    return vi.MultiModalFeatureSpec(
        data=item, modality="image", identifier="lora1:abc", mm_position=position, mm_hash=mm_hash
    )


MASK = torch.tensor([False, True, True, False, True, True])
CASES = {
    "with data and is_embed": (True, MASK, "abc"),
    "with data, no is_embed": (True, None, None),
    "cached (no data), is_embed": (False, MASK, "abc"),
    "cached, nothing optional": (False, None, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_feature_spec_round_trips_strictly(name: str) -> None:
    spec = _spec(*CASES[name])
    decoded = mv.decode(mv.encode(spec), vi.MultiModalFeatureSpec)
    assert type(decoded) is vi.MultiModalFeatureSpec
    assert type(decoded.mm_position) is vi.PlaceholderRange
    assert_same(decoded, spec)
    # vLLM's own methods work on the decoded range (cached_property on a frozen dataclass).
    assert decoded.mm_position.get_num_embeds() == spec.mm_position.get_num_embeds()
    assert decoded.mm_position.extract_embeds_range() == spec.mm_position.extract_embeds_range()


@pytest.mark.parametrize("name", list(CASES))
def test_feature_spec_crosses_bindings(name: str) -> None:
    spec = _spec(*CASES[name])
    ours = mm.decode(mv.encode(spec), mm.MultiModalFeatureSpec)
    assert type(ours) is mm.MultiModalFeatureSpec
    assert_same(ours, spec, cross=True)
    back = mv.decode_bytes(mm.encode_bytes(ours), vi.MultiModalFeatureSpec)
    assert_same(back, spec)


def test_a_negative_offset_is_refused_by_the_encoder() -> None:
    bad = vi.MultiModalFeatureSpec(
        data=None, modality="image", identifier="x", mm_position=vi.PlaceholderRange(-1, 2)
    )
    with pytest.raises(mv.EncodeError, match=r"^\$\.mm_position\.offset: expected a value >= 0"):
        mv.encode(bad)


def test_plain_dataclasses_are_built_by_assignment_and_frozen_ones_by_their_init() -> None:
    # vLLM's MultiModalFieldElem and MultiModalFeatureSpec are plain dataclasses: the decoder
    # assigns their fields, as their __init__ does. Its frozen field classes are called.
    assert mv._MultiModalFieldElem_by_assignment is True
    assert mv._MultiModalFeatureSpec_by_assignment is True
    assert not any(
        (
            mv._BatchedField_by_assignment,
            mv._FlatField_by_assignment,
            mv._SharedField_by_assignment,
            mv._PlaceholderRange_by_assignment,
        )
    )
    spec = _spec(*CASES["with data and is_embed"])
    decoded = mv.decode(mv.encode(spec), vi.MultiModalFeatureSpec)
    rebuilt = vi.MultiModalFeatureSpec(**vars(decoded))
    assert list(vars(decoded)) == list(vars(rebuilt))  # the same attributes, laid out alike
    elem = next(iter(decoded.data.values()))
    assert list(vars(elem)) == list(vars(vi.MultiModalFieldElem(elem.data, elem.field)))
    assert_same(decoded, spec)
