"""The gateway example end to end: a Rust process preprocesses images, builds a
Qwen2.5-VL-style request with the crate generated from ``schema/`` and sends it over a
real ZMQ socket; this process decodes it with ``mmcodec.generated.multimodal`` and
verifies every value, every byte and that tensors view the received frames
(``mmcodec.demo.rust_gateway``, what ``make demo`` runs with 16 images)."""

from __future__ import annotations

import pytest
import torch

from mmcodec.demo import rust_gateway
from mmcodec.generated import multimodal as mm
from tests.rust.cargo import gateway


def test_a_rust_gateways_request_is_verified_value_by_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert rust_gateway.main(["--binary", str(gateway()), "--images", "3", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 feature specs verified" in out
    assert out.count("equal, same bytes, a view of the frame") == 3


def test_the_expected_request_is_a_qwen_request() -> None:
    specs = rust_gateway.expected_request(2, seed=0)
    first, second = specs
    pixels = first.data["pixel_values"].data
    assert pixels.dtype == torch.bfloat16 and pixels.shape == (72 * 72, 1176)
    assert torch.equal(first.data["image_grid_thw"].data, torch.tensor([1, 72, 72]))
    assert first.mm_position == mm.PlaceholderRange(offset=15, length=72 * 72 // 4)
    assert second.mm_position.offset == 15 + 72 * 72 // 4 + 2
    assert pixels.float().abs().max() < 3  # normalised pixels
    # One flat field, with every image's slice, shared by both items.
    assert first.data["pixel_values"].field is second.data["pixel_values"].field
