"""Hand-written hostile column lists (wire version 3): each refused by the Python decoder
with its path and message, or accepted where the layout allows it (a newer sender's extra
columns), and by the Rust decoder alike (:func:`test_rust_decides_every_case_as_python_does`;
``tests/rust/test_hostile_replay.py`` records these decodes too).

Each case starts from the ``column_list`` sample, whose ``image`` list (17 items of four
keys, the third None: 16 present, the fewest that travel as columns) is a column list:
``pixels``, ``grid`` and ``mixed`` as fields columns, ``token`` (one element in every item)
as a values column; it changes one thing in the decoded header and encodes it again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.limits import DEFAULT_LIMITS
from tests.rust.cargo import run
from tests.security.samples import HEAD_BODY, HEAD_WIRE, column_list, header, with_header

Change = Callable[[dict[str, Any], list[Any]], Any]

PIXELS, GRID, TOKEN = 0, 1, 2
"""Positions of columns in the sample's ``image`` column list."""


@pytest.fixture(scope="module")
def sample() -> tuple[list[Any], list[Any]]:
    """The sample's frames and its header, decoded untyped."""
    frames = list(mm.encode(column_list()))
    return frames, header(frames)


def changed(sample: tuple[list[Any], list[Any]], change: Change) -> list[bytes]:
    frames, envelope = sample
    envelope = copy.deepcopy(envelope)
    change(envelope[HEAD_BODY]["image"], envelope)
    return with_header(envelope, frames)


def test_the_sample_is_a_column_list_in_wire_version_3(
    sample: tuple[list[Any], list[Any]],
) -> None:
    _, envelope = sample
    image = envelope[HEAD_BODY]["image"]
    assert envelope[HEAD_WIRE] == 3
    assert list(image) == ["count", "keys", "columns", "absent"]
    assert (image["count"], image["absent"]) == (17, [2])
    assert [column[0] for column in image["columns"]] == [1, 1, 0, 1]
    assert mm.decode(changed(sample, lambda image, e: None), mm.MultiModalKwargsItems) == (
        column_list()
    )


def _set(key: str, value: Any) -> Change:
    return lambda image, envelope: image.__setitem__(key, value)


def _both(**entries: Any) -> Change:
    return lambda image, envelope: image.update(entries)


REFUSED: dict[str, tuple[Change, str, str]] = {
    "count above max_elements": (
        _set("count", 2**21),
        "$['image']",
        "2097152 elements exceed the limit of 1048576",
    ),
    "no keys": (_set("keys", []), "$['image']", "a column list has no keys"),
    "a key twice": (
        lambda image, e: image["keys"].__setitem__(1, image["keys"][0]),
        "$['image']",
        "a column list names a key twice",
    ),
    "a column missing": (
        lambda image, e: image["columns"].pop(),
        "$['image']",
        "a column list of 4 keys holds 3 columns",
    ),
    "absent positions decreasing": (
        _both(count=18, absent=[3, 2]),
        "$['image']",
        "absent item positions must increase and lie below the count (18)",
    ),
    "an absent position at the count": (
        _both(count=17, absent=[17]),
        "$['image']",
        "absent item positions must increase and lie below the count (17)",
    ),
    "no present item": (
        _set("absent", list(range(17))),
        "$['image']",
        "a column list has no present item",
    ),
    "a values column short": (
        lambda image, e: image["columns"][TOKEN][1].pop(),
        "$['image']['token']",
        "a column holds 15 values for 16 present items",
    ),
    "a data column short": (
        lambda image, e: image["columns"][PIXELS][1].pop(),
        "$['image']['pixels'].data",
        "a column holds 15 values for 16 present items",
    ),
    "a field column short": (
        lambda image, e: image["columns"][PIXELS][2].pop(),
        "$['image']['pixels'].field",
        "a column holds 15 values for 16 present items",
    ),
    "a field index never sent": (
        lambda image, e: image["columns"][GRID][2].__setitem__(1, 9),
        "$['image'][1]['grid'].field",
        "back-reference to BaseMultiModalField value 9, but 2 were sent",
    ),
    "a field back-reference in rows' form never sent": (
        lambda image, e: image["columns"][GRID][2].__setitem__(1, [-1, 9]),
        "$['image'][1]['grid'].field",
        "back-reference to BaseMultiModalField value 9, but 2 were sent",
    ),
    "an element index never sent": (
        # The third present item: position 3 (position 2 is absent).
        lambda image, e: image["columns"][TOKEN][1].__setitem__(2, 99),
        "$['image'][3]['token']",
        "back-reference to MultiModalFieldElem value 99, but 33 were sent",
    ),
    "a tensor reference out of range": (
        lambda image, e: image["columns"][GRID][1].__setitem__(1, 99),
        "$['image'][1]['grid'].data",
        "tensor 99 out of range (45 tensors)",
    ),
    "absent left off": (
        lambda image, e: image.pop("absent"),
        "$['image']",
        "Object missing required field `absent`",
    ),
    "an unknown entry": (
        _set("rows", []),
        "$['image']",
        "Object contains unknown field `rows`",
    ),
    "neither rows nor columns": (
        lambda image, e: e[HEAD_BODY].__setitem__("image", 5),
        "$['image']",
        "Expected `object | array`, got `int`",
    ),
    "wire version 4": (
        lambda image, e: e.__setitem__(HEAD_WIRE, 4),
        "$",
        "wire format version 4 is not supported (this decoder reads versions 2 to 3)",
    ),
}


@pytest.mark.parametrize(("change", "path", "message"), REFUSED.values(), ids=list(REFUSED))
def test_a_bad_column_list_is_refused_with_its_path(
    sample: tuple[list[Any], list[Any]], change: Change, path: str, message: str
) -> None:
    with pytest.raises(mm.DecodeError) as info:
        mm.decode(changed(sample, change), mm.MultiModalKwargsItems)
    assert (info.value.path, info.value.message) == (path, message)


# msgspec finds these while matching the header's types; the Python side then names the
# list (``$['image']``), the Rust side the value (``$['image'][1]['grid'].data``).
MISTYPED: dict[str, tuple[Change, str]] = {
    "an unknown column tag": (
        lambda image, e: image["columns"][GRID].__setitem__(0, 7),
        "Invalid value 7",
    ),
    "a fields column without its field column": (
        lambda image, e: image["columns"][GRID].pop(),
        "Expected `array` of at least length 3, got 2",
    ),
    "a negative count": (_set("count", -1), "Expected `int` >= 0"),
    "a key not a str": (
        lambda image, e: image["keys"].__setitem__(0, 5),
        "Expected `str`, got `int`",
    ),
    "a negative absent position": (_both(count=17, absent=[-1]), "Expected `int` >= 0"),
    "a field neither index nor value": (
        lambda image, e: image["columns"][GRID][2].__setitem__(1, "x"),
        "Expected `int | array`, got `str`",
    ),
    "data of the wrong type": (
        lambda image, e: image["columns"][GRID][1].__setitem__(1, "x"),
        "Expected `int | float | array | null`, got `str`",
    ),
    "a column not an array": (
        lambda image, e: image["columns"].__setitem__(GRID, 5),
        "Expected `array`, got `int`",
    ),
    "a field variant's bool an int": (
        lambda image, e: image["columns"][GRID][2].__setitem__(0, [0, 5]),
        "Expected `bool`, got `int`",
    ),
}


@pytest.mark.parametrize(("change", "message"), MISTYPED.values(), ids=list(MISTYPED))
def test_a_mistyped_column_list_is_refused(
    sample: tuple[list[Any], list[Any]], change: Change, message: str
) -> None:
    with pytest.raises(mm.DecodeError) as info:
        mm.decode(changed(sample, change), mm.MultiModalKwargsItems)
    assert info.value.message == message


ACCEPTED: dict[str, Change] = {
    # A newer schema's struct may have more fields: their columns are skipped, as rows
    # skip the fields they do not know; so is what follows a values column's values.
    "a fields column with an extra column": lambda image, e: image["columns"][GRID].append([0]),
    "a values column with an extra entry": lambda image, e: image["columns"][TOKEN].append(1),
    # Entries in another order: a map's.
    "entries in another order": lambda image, e: e[HEAD_BODY].__setitem__(
        "image", dict(reversed(image.items()))
    ),
}


@pytest.mark.parametrize("change", ACCEPTED.values(), ids=list(ACCEPTED))
def test_what_the_layout_allows_decodes_to_the_same_items(
    sample: tuple[list[Any], list[Any]], change: Change
) -> None:
    assert mm.decode(changed(sample, change), mm.MultiModalKwargsItems) == column_list()


def test_rust_decides_every_case_as_python_does(
    sample: tuple[list[Any], list[Any]], tmp_path: Path
) -> None:
    """Each case through the Rust decoder (``mmcodec-conformance replay``): the same path
    and message where Python names the value, the same message where msgspec finds the
    mismatch (Rust names the value there too: docs/rust.md, "Differences"), and the same
    items decoded where the layout allows the change."""
    limits = " ".join(
        str(getattr(DEFAULT_LIMITS, name))
        for name in (
            "max_frames",
            "max_total_bytes",
            "max_header_bytes",
            "max_depth",
            "max_elements",
            "max_tensors",
            "max_ndim",
        )
    )
    cases = {
        **{f"refused {k}": c for k, (c, _, _) in REFUSED.items()},
        **{f"mistyped {k}": c for k, (c, _) in MISTYPED.items()},
        **{f"accepted {k}": c for k, c in ACCEPTED.items()},
    }
    lines = []
    for index, change in enumerate(cases.values()):
        frames = changed(sample, change)
        (tmp_path / str(index)).write_bytes(framing.join([memoryview(f) for f in frames]))
        lines.append(f"{index} frames multimodal.MultiModalKwargsItems {limits}")
    (tmp_path / "manifest.txt").write_text("\n".join(lines) + "\n")
    results = [
        json.loads(line)["result"] for line in run("replay", tmp_path / "manifest.txt").splitlines()
    ]
    rust = dict(zip(cases, results, strict=True))
    for name, (_, path, message) in REFUSED.items():
        assert rust[f"refused {name}"] == {"error": {"path": path, "message": message}}, name
    for name, (_, message) in MISTYPED.items():
        assert rust[f"mistyped {name}"]["error"]["message"] == message, name
    for name in ACCEPTED:
        assert rust[f"accepted {name}"] == {"ok": True}, name
