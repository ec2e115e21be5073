"""Enums through the codec generated from ``tests/schemas/enums.yaml`` (a golden file).

An enum value travels as its member's value and comes back as the member: a generated
``StrEnum``/``IntEnum``, or the application's own ``Enum`` for a bound one. The sender
accepts members only (a plain value equal to one is an ``EncodeError`` with its path); the
receiver accepts the schema's values only (anything else is a ``DecodeError`` with its
path, found by msgspec while it parses).
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.golden.common as common
import tests.golden.enums as e
from mmcodec.codegen.cli import main
from mmcodec.runtime import builtins as b
from mmcodec.runtime.codec import codec_of
from mmcodec.runtime.inspect import describe
from tests.bound_classes import Priority


def _item(**changes: Any) -> e.Item:
    fields: dict[str, Any] = {
        "modality": e.Modality.AUDIO,
        "levels": [e.Level.LOW, e.Level.UNSET],
        "by_modality": {e.Modality.VIDEO: 2, e.Modality.IMAGE: 1},
        "pair": (e.Modality.IMAGE, e.Level.HIGH),
        "priorities": (Priority.HIGH, Priority.LOW),
    }
    return e.Item(**{**fields, **changes})


def test_the_generated_classes_are_str_and_int_enums_with_the_schema_members() -> None:
    assert issubclass(e.Modality, enum.StrEnum) and issubclass(e.Level, enum.IntEnum)
    assert {m.name: m.value for m in e.Modality} == {
        "IMAGE": "image",
        "AUDIO": "audio",
        "VIDEO": "video",
    }
    assert [(m.name, m.value) for m in e.Level] == [("LOW", 0), ("HIGH", 10), ("UNSET", -1)]
    assert e.Priority is Priority  # bound: the application's own class
    assert e.NAMED_TYPES["Modality"] is e.Modality and e.NAMED_TYPES["Priority"] is Priority


def test_defaults_are_members() -> None:
    item = _item()
    assert item.mode is e.Modality.IMAGE
    assert item.urgent is Priority.HIGH
    assert item.unit is common.Unit.PIXEL
    assert item.maybe is None


CASES: list[tuple[str, Any, Any]] = [
    ("item", e.Item, _item(maybe=e.Level.HIGH, mode=e.Modality.VIDEO, urgent=None)),
    ("item-defaults", e.Item, _item()),
    ("str-enum-root", e.Modality, e.Modality.VIDEO),
    ("int-enum-root", e.Level, e.Level.UNSET),
    ("bound-enum-root", Priority, Priority.LOW),
    ("setting-level", e.Setting, e.Level.HIGH),
    ("setting-int", e.Setting, 10),
    ("setting-modality", e.Setting, e.Modality.IMAGE),
    ("mapping", e.LevelNames, e.LevelNames({e.Level.UNSET: "unset", e.Level.LOW: "low"})),
]


@pytest.mark.parametrize(("type_", "value"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_round_trip(type_: Any, value: Any) -> None:
    explicit = type_ if type_ is e.Setting else None
    for back in (
        e.decode(e.encode(value, type=explicit), type_),
        e.decode_bytes(e.encode_bytes(value, type=explicit), type_),
    ):
        assert b.values_equal(back, value)
        assert type(back) is type(value)  # a member stays a member; 10 stays an int


def test_members_come_back_as_members_everywhere() -> None:
    back = e.decode(e.encode(_item()), e.Item)
    assert type(back.modality) is e.Modality
    assert [type(x) for x in back.levels] == [e.Level, e.Level]
    assert [type(k) for k in back.by_modality] == [e.Modality, e.Modality]
    assert [type(x) for x in back.pair] == [e.Modality, e.Level]
    assert back.priorities == (Priority.HIGH, Priority.LOW)
    assert type(back.unit) is common.Unit


def test_a_member_travels_as_its_value() -> None:
    header = msgspec.msgpack.decode(e.encode(_item())[0])
    assert header[-1][:5] == ["audio", [0, -1], {"video": 2, "image": 1}, ["image", 10], [2, 1]]


# -- the sender: members only -------------------------------------------------------------

ENCODE_ERRORS = [
    ({"modality": "audio"}, "$.modality: expected a Modality member, got str 'audio'"),
    ({"levels": [e.Level.LOW, 0]}, "$.levels[1]: expected a Level member, got int 0"),
    ({"levels": [True]}, "$.levels[0]: expected a Level member, got bool True"),
    (
        {"by_modality": {"video": 1}},
        "$.by_modality['video'] (key): expected a Modality member, got str 'video'",
    ),
    (
        {"pair": (e.Modality.IMAGE, e.Modality.AUDIO)},
        "$.pair[1]: expected a Level member, got Modality <Modality.AUDIO: 'audio'>",
    ),
    ({"priorities": (1,)}, "$.priorities[0]: expected a Priority member, got int 1"),
    ({"maybe": 10}, "$.maybe: expected a Level member, got int 10"),
    ({"unit": None}, "$.unit: expected a Unit member, got NoneType"),
    ({"urgent": "x" * 100}, "$.urgent: expected a Priority member, got str '" + "x" * 56 + "..."),
]


@pytest.mark.parametrize(("changes", "message"), ENCODE_ERRORS)
def test_a_value_that_is_not_a_member_is_an_encode_error_with_its_path(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(e.EncodeError) as caught:
        e.encode(_item(**changes))
    assert str(caught.value) == message


def test_a_union_picks_the_enum_variant_by_class() -> None:
    header = msgspec.msgpack.decode(e.encode(e.Level.HIGH, type=e.Setting)[0])
    assert header[-1] == [0, 10]  # tag 0: Level, not tag 1: int
    assert msgspec.msgpack.decode(e.encode(10, type=e.Setting)[0])[-1] == [1, 10]
    with pytest.raises(e.EncodeError, match="expected one of Level, int, Modality, got str"):
        e.encode("image", type=e.Setting)


# -- the receiver: the schema's values only --------------------------------------------


def _tampered(index: int, value: Any, item: e.Item | None = None) -> list[bytes]:
    """A valid message whose Item field ``index`` holds ``value`` on the wire."""
    header = msgspec.msgpack.decode(e.encode(item or _item())[0])
    header[-1][index] = value
    return [msgspec.msgpack.encode(header)]


DECODE_ERRORS = [
    (0, "AUDIO", "$.modality: Invalid enum value 'AUDIO'"),
    (0, 1, "$.modality: Expected `str`, got `int`"),
    (1, [0, 11], "$.levels[1]: Invalid enum value 11"),
    (1, [True], "$.levels[0]: Expected `int`, got `bool`"),
    (1, [0, "0"], "$.levels[1]: Expected `int`, got `str`"),
    (1, [2**64 - 1], "$.levels[0]: Invalid enum value 18446744073709551615"),
    (2, {"audio": 1, "music": 2}, "$.by_modality['music'] (key): Invalid enum value 'music'"),
    (3, ["image", 3], "$.pair[1]: Invalid enum value 3"),
    (4, [2, 3], "$.priorities[1]: Invalid enum value 3"),
    (5, -2, "$.maybe: Invalid enum value -2"),
    (8, "cm", "$.unit: Invalid enum value 'cm'"),
]


@pytest.mark.parametrize(("index", "value", "message"), DECODE_ERRORS)
def test_a_value_outside_the_enum_is_a_decode_error_with_its_path(
    index: int, value: Any, message: str
) -> None:
    with pytest.raises(e.DecodeError) as caught:
        e.decode(_tampered(index, value), e.Item)
    assert str(caught.value) == message


def test_a_bad_value_of_a_root_or_union_enum_is_a_decode_error() -> None:
    header = msgspec.msgpack.decode(e.encode(e.Level.LOW)[0])
    header[-1] = 5
    with pytest.raises(e.DecodeError, match=r"^\$: Invalid enum value 5$"):
        e.decode([msgspec.msgpack.encode(header)], e.Level)
    header = msgspec.msgpack.decode(e.encode(e.Modality.AUDIO, type=e.Setting)[0])
    header[-1] = [2, "sound"]
    with pytest.raises(e.DecodeError, match=r"^\$\.value: Invalid enum value 'sound'$"):
        e.decode([msgspec.msgpack.encode(header)], e.Setting)
    header = msgspec.msgpack.decode(e.encode(e.LevelNames({e.Level.LOW: "x"}))[0])
    header[-1] = {"0": "x"}
    with pytest.raises(e.DecodeError, match=r"^\$\['0'\] \(key\): Expected `int`, got `str`$"):
        e.decode([msgspec.msgpack.encode(header)], e.LevelNames)


MEMBERS = {
    "modality": st.sampled_from(list(e.Modality)),
    "levels": st.lists(st.sampled_from(list(e.Level)), max_size=5),
    "by_modality": st.dictionaries(st.sampled_from(list(e.Modality)), st.integers(-9, 9)),
    "pair": st.tuples(st.sampled_from(list(e.Modality)), st.sampled_from(list(e.Level))),
    "priorities": st.lists(st.sampled_from(list(Priority)), max_size=3).map(tuple),
    "maybe": st.none() | st.sampled_from(list(e.Level)),
    "mode": st.sampled_from(list(e.Modality)),
    "urgent": st.none() | st.sampled_from(list(Priority)),
    "unit": st.sampled_from(list(common.Unit)),
}


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries(MEMBERS))
def test_round_trip_of_any_members(fields: dict[str, Any]) -> None:
    item = e.Item(**fields)
    back = e.decode(e.encode(item), e.Item)
    assert back == item
    assert all(type(x) is e.Level for x in back.levels)


WIRE_VALUES = (
    st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text(max_size=8)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.binary(max_size=4)
    | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=2)
)
FIELD_KINDS: dict[int, type[enum.Enum]] = {
    0: e.Modality,
    5: e.Level,
    6: e.Modality,
    7: Priority,
    8: common.Unit,
}
"""Item fields that hold one enum value (or None, for the optional ones)."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(FIELD_KINDS)), WIRE_VALUES)
def test_hostile_enum_values_decode_to_a_member_or_a_decode_error(index: int, value: Any) -> None:
    """Whatever a sender puts where an enum goes: the member of that value, or a
    DecodeError naming the field; never another exception, never a plain value."""
    kind = FIELD_KINDS[index]
    values = {m.value: m for m in kind}
    valid = type(value) is type(next(iter(values))) and value in values
    name = msgspec.structs.fields(e.Item)[index].name
    try:
        back = e.decode(_tampered(index, value), e.Item)
    except e.DecodeError as error:
        assert str(error).startswith(f"$.{name}: ")
        assert not valid and not (value is None and index in (5, 7))
        return
    got = getattr(back, name)
    if value is None:
        assert got is None and index in (5, 7)
    else:
        assert valid and got is values[value]


# -- bound enums -------------------------------------------------------------------------


class Shifted(enum.Enum):
    LOW = 1
    HIGH = 3


class Larger(enum.IntEnum):
    LOW = 1
    HIGH = 2
    EXTRA = 3


class Renamed(enum.Enum):
    LOW = 1
    TOP = 2


class StrValues(enum.Enum):
    LOW = "1"
    HIGH = "2"


@pytest.mark.parametrize(
    ("cls", "problem"),
    [
        (Shifted, "HIGH is 3, the schema says 2"),
        (Larger, "EXTRA = 3 is not in the schema"),
        (Renamed, "HIGH = 2 is missing; TOP = 2 is not in the schema"),
        (StrValues, "LOW is '1', the schema says 1; HIGH is '2', the schema says 2"),
    ],
)
def test_a_bound_enum_with_other_members_is_refused_on_import(cls: Any, problem: str) -> None:
    with pytest.raises(TypeError) as caught:
        b.check_enum(cls, "Priority", {"LOW": 1, "HIGH": 2})
    where = f"{cls.__module__}.{cls.__qualname__}"
    assert str(caught.value) == (
        f"{where}, bound to schema type 'Priority', has other members than the schema: {problem}"
    )
    b.check_enum(Priority, "Priority", {"LOW": 1, "HIGH": 2})  # the real one passes
    with pytest.raises(TypeError, match=r"is an enum, but it is bound to builtins\.int, not an"):
        b.check_enum(int, "Priority", {"LOW": 1})


def test_a_generated_module_refuses_a_bound_class_that_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "prio.yaml").write_text(
        "schema: prio\nversion: 1\ntypes:\n  Priority:\n"
        "    bind: tests.bound_classes.Priority\n    enum: {LOW: 1, HIGH: 2, ASAP: 3}\n"
    )
    argv = ["--root", str(tmp_path), "generate", "--out", "prio_pkg"]
    assert main(argv) == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match=r"ASAP = 3 is missing$"):
        importlib.import_module("prio_pkg.prio")
    sys.modules.pop("prio_pkg", None)


# -- tools -------------------------------------------------------------------------------


def test_inspect_shows_enum_values_as_json() -> None:
    """``mmcodec inspect`` reads a message with the module's wire types: an enum is shown
    as the value that travelled, generated or bound (a plain Enum member is no JSON)."""
    description = describe(e.encode(_item()), codec_of(e))
    fields = json.loads(json.dumps(description))["body"]["fields"]
    assert (fields["modality"], fields["levels"], fields["mode"]) == ("audio", [0, -1], "image")
    assert (fields["priorities"], fields["urgent"], fields["unit"]) == ({"$tuple": [2, 1]}, 2, "px")


def test_a_bindings_file_binds_an_enum_to_an_existing_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second binding of the same wire: the schema's enum there is the app's Priority."""
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "jobs.yaml").write_text(
        "schema: jobs\nversion: 1\ntypes:\n"
        "  Priority:\n    enum: {LOW: 1, HIGH: 2}\n"
        "  Job:\n    struct:\n      priority: {type: Priority, default: LOW}\n"
    )
    (tmp_path / "schema" / "jobs.app.yaml").write_text(
        "bindings: jobs_app\nschema: jobs.yaml\n"
        "bind: {Priority: tests.bound_classes.Priority, Job: generated}\n"
    )
    assert main(["--root", str(tmp_path), "generate", "--out", "jobs_pkg"]) == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        generated = importlib.import_module("jobs_pkg.jobs")
        bound = importlib.import_module("jobs_pkg.jobs_app")
        assert bound.Priority is Priority and generated.Priority is not Priority
        assert bound.Job().priority is Priority.LOW
        # One wire: a message from either module decodes with the other.
        frames = generated.encode(generated.Job(priority=generated.Priority.HIGH))
        assert bound.decode(frames, bound.Job).priority is Priority.HIGH
        back = generated.decode(bound.encode(bound.Job(priority=Priority.HIGH)), generated.Job)
        assert back.priority is generated.Priority.HIGH
    finally:
        for name in [n for n in sys.modules if n.partition(".")[0] == "jobs_pkg"]:
            del sys.modules[name]
