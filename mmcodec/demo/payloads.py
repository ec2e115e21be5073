"""What the demo sends: the benchmark's realistic payloads, as an engine would send them.

Each payload is one message: a request's whole :class:`MultiModalKwargsItems` (modality ->
items), the unit a front end hands the engine core. One message per request rather than
one ``MultiModalFeatureSpec`` per item keeps a shared field's tensor (InternVL's
``image_token_id``, "64 small items"' shared keys) on the wire once; the per-item unit
travels too, as the ``llava feature spec`` payload: one image item with its placeholder
position and content hash, the way vLLM's ``EngineCoreRequest.mm_features`` carries it.

Both processes build every payload from its name and a seed, so the receiver verifies
what it decoded against its own copy, built independently, with the domain classes'
strict ``==`` (dtype, shape, values, list vs tuple, field variants and their parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, llava

__all__ = ["DEMO_PAYLOADS", "QUICK", "DemoPayload", "llava_feature_spec"]

LLAVA_IMAGE_TOKENS: Final = 576
"""LLaVA-1.5's 24x24 patch tokens for one 336x336 image."""


def llava_feature_spec(seed: int) -> mm.MultiModalFeatureSpec:
    """One LLaVA image as the per-item unit: its item, placeholder position and hash."""
    items = llava(seed)
    return mm.MultiModalFeatureSpec(
        data=items["image"][0],
        modality="image",
        identifier=f"llava-{seed:08x}",
        mm_position=mm.PlaceholderRange(offset=5, length=LLAVA_IMAGE_TOKENS),
        mm_hash=f"{seed * 0x9E3779B97F4A7C15 % (1 << 64):016x}",
    )


@dataclass(frozen=True, slots=True)
class DemoPayload:
    """A named payload: how to build it from a seed, and which schema type it is."""

    name: str
    build: Callable[[int], Any]
    type: Any


DEMO_PAYLOADS: Final[dict[str, DemoPayload]] = {
    **{
        name: DemoPayload(name, build, mm.MultiModalKwargsItems) for name, build in PAYLOADS.items()
    },
    "llava feature spec": DemoPayload(
        "llava feature spec", llava_feature_spec, mm.MultiModalFeatureSpec
    ),
}
"""Every payload, in the order the table lists them."""

QUICK: Final = ("llava", "whisper", "64 small items", "llava feature spec")
"""The small subset ``--quick`` sends (about 1.5 MB): for tests and a fast look."""
