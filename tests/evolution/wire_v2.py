"""Messages of wire version 2, as main's encoder wrote them before column lists (wire
version 3), kept as files so that every later decoder is held to them.

Each ``messages_v2/NAME.mmcb`` is the ``encode_bytes`` buffer of ``MESSAGES[NAME]``'s
value, written at commit 85fe65f (the last encoder that wrote version 2 only);
``messages_v2/sharing.json`` records, per message, which decoded objects that decoder
returned as one object (see :func:`sharing`). ``python -m tests.evolution.wire_v2``
wrote them; it refuses to overwrite them with messages of any other version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import torch

from mmcodec import payloads
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from tests.security.samples import SAMPLES

HERE = Path(__file__).parent / "messages_v2"
SHARING = HERE / "sharing.json"
VERSION = 2


def _absent_items() -> mm.MultiModalKwargsItems:
    """Items with None between them (cached by the receiver), sharing their keys."""
    g = torch.Generator().manual_seed(7)
    grid = mm.BatchedField()
    items: list[mm.MultiModalKwargsItem | None] = []
    for i in range(5):
        if i in (0, 2):
            items.append(None)
            continue
        items.append(
            mm.MultiModalKwargsItem(
                {
                    "pixel_values": mm.MultiModalFieldElem(
                        torch.randn(2, 3, generator=g), mm.BatchedField()
                    ),
                    "grid": mm.MultiModalFieldElem(torch.tensor([1, i, i]), grid),
                }
            )
        )
    return mm.MultiModalKwargsItems({"image": items})


def _shared_element() -> mm.MultiModalKwargsItems:
    """One element in every item (a shared token id), beside per-item ones."""
    token = mm.MultiModalFieldElem(torch.tensor(151655), mm.SharedField(3))
    items: list[mm.MultiModalKwargsItem | None] = [
        mm.MultiModalKwargsItem(
            {
                "audio": mm.MultiModalFieldElem(torch.full((4,), float(i)), mm.BatchedField()),
                "token": token,
            }
        )
        for i in range(3)
    ]
    return mm.MultiModalKwargsItems({"audio": items})


def _mixed_keys() -> mm.MultiModalKwargsItems:
    """Items whose keys differ: rows in every version."""
    a = mm.MultiModalKwargsItem({"x": mm.MultiModalFieldElem(torch.zeros(2), mm.BatchedField())})
    b = mm.MultiModalKwargsItem({"y": mm.MultiModalFieldElem(torch.ones(2), mm.BatchedField())})
    return mm.MultiModalKwargsItems({"image": [a, b], "video": [None, None]})


MESSAGES: dict[str, tuple[type[Any], Callable[[], Any]]] = {
    "64-small-items": (mm.MultiModalKwargsItems, lambda: payloads.small_items(0)),
    **{
        f"sample-{name}": SAMPLES[name]
        for name in ("kwargs_items", "nested_item", "feature_spec", "runs_and_dtypes")
    },
    "absent-items": (mm.MultiModalKwargsItems, _absent_items),
    "shared-element": (mm.MultiModalKwargsItems, _shared_element),
    "mixed-keys": (mm.MultiModalKwargsItems, _mixed_keys),
}
"""Name -> (its schema type, what builds the value it was written from)."""


def sharing(value: Any) -> list[int]:
    """Which parts of a decoded value are one object: every element, field variant and
    tensor storage of the value, in walk order, as the number of the first part that is
    the same object (tensors: the same memory and layout)."""
    first: dict[Any, int] = {}
    out: list[int] = []
    for identity in _parts(value):
        out.append(first.setdefault(identity, len(first)))
    return out


def _parts(value: Any) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        yield ("tensor", value.data_ptr(), tuple(value.shape), tuple(value.stride()))
    elif isinstance(value, mm.MultiModalFieldElem):
        yield ("object", id(value))
        yield ("object", id(value.field))
        yield from _parts(value.data)
    elif isinstance(value, dict):
        for key in value:
            yield from _parts(value[key])
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _parts(item)
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield from _parts(getattr(value, name))
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from _parts(getattr(value, name))


def write() -> None:
    """Write every message and the sharing of its decode (only as version 2)."""
    shared: dict[str, list[int]] = {}
    for name, (tp, make) in MESSAGES.items():
        buffer = bytes(mm.encode_bytes(make(), type=tp))
        version = msgspec.msgpack.decode(framing.split(buffer, mm.DEFAULT_LIMITS)[0])[1]
        if version != VERSION:
            raise SystemExit(f"{name}: this encoder writes wire version {version}, not {VERSION}")
        (HERE / f"{name}.mmcb").write_bytes(buffer)
        shared[name] = sharing(mm.decode_bytes(buffer, tp))
    lines = [f"  {json.dumps(name)}: {json.dumps(parts)}" for name, parts in shared.items()]
    SHARING.write_text("{\n" + ",\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    write()
