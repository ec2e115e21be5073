"""msgspec's validation errors are reported at schema paths, inside mappings too.

msgspec writes ``$[...]`` for "some value of this dict"; the runtime finds which entry
fails and names its key, so a bad field variant deep in an item reads as
``$['image'][1]['pixel_values'].field.dim``.
"""

from __future__ import annotations

import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import builtins as runtime_builtins


def items_with(field: mm.BaseMultiModalField) -> mm.MultiModalKwargsItems:
    good = mm.MultiModalFieldElem(torch.zeros(2), mm.BatchedField())
    bad = mm.MultiModalFieldElem(torch.ones(2), field)
    return mm.MultiModalKwargsItems(
        {
            "audio": [mm.MultiModalKwargsItem({"feats": good})],
            "image": [
                mm.MultiModalKwargsItem({"pixel_values": good}),
                mm.MultiModalKwargsItem({"grid": good, "pixel_values": bad}),
            ],
        }
    )


@pytest.mark.parametrize(
    ("field", "path", "message"),
    [
        (
            mm.FlatField([slice(0, 2)], dim=-1),
            "$['image'][1]['pixel_values'].field.dim",
            "Expected `int` >= 0",
        ),
        (
            mm.SharedField(-3),
            "$['image'][1]['pixel_values'].field.batch_size",
            "Expected `int` >= 0",
        ),
    ],
)
def test_validation_errors_in_mapping_values_name_the_keys(
    field: mm.BaseMultiModalField, path: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The encoder applies the constraints too; switch that off to forge the message.
    monkeypatch.setattr(runtime_builtins, "constrained", lambda value, **_: value)
    frames = mm.encode(items_with(field))
    with pytest.raises(mm.DecodeError) as info:
        mm.decode(frames, mm.MultiModalKwargsItems)
    assert (info.value.path, info.value.message) == (path, message)


def test_the_encoder_names_the_same_path() -> None:
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(items_with(mm.SharedField(-3)))
    assert info.value.path == "$['image'][1]['pixel_values'].field.batch_size"
