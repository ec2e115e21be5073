"""Edge branches of the runtime that the round-trip tests do not take: each error the
encoder and decoder promise for them, exactly, and what the sender accepts as it is."""

from __future__ import annotations

import sys

import msgspec
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tests.golden.common as common
import tests.golden.enums as en
import tests.golden.features as f
from mmcodec.runtime import framing
from mmcodec.runtime.equality import tensors_equal
from mmcodec.runtime.errors import DecodeError, EncodeError
from mmcodec.runtime.inspect import describe
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.nesting import SAFE_NESTING, refuse_deep_nesting
from mmcodec.runtime.paths import locate_validation_error
from mmcodec.runtime.tensors import EAGER_TENSORS

CODEC = f._CODEC


def _tensor_at(registry: f.Registry, key: str) -> torch.Tensor:
    value = registry[key]
    assert isinstance(value, torch.Tensor)
    return value


def _builtins(**changes: object) -> f.Builtins:
    values: dict[str, object] = {
        "i": 1,
        "f": 1.0,
        "b": True,
        "s": "",
        "raw": b"",
        "t": torch.zeros(1),
        "nt": [],
        "sl": slice(1),
    }
    values.update(changes)
    return f.Builtins(**values)  # type: ignore[arg-type]


def _constrained(**changes: object) -> f.Constrained:
    values: dict[str, object] = {
        "age": 1,
        "score": 1.0,
        "code": "AB",
        "payload": b"",
        "tags": ["a"],
        "dims": (),
        "weights": {},
    }
    values.update(changes)
    return f.Constrained(**values)  # type: ignore[arg-type]


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_an_int_is_sent_as_a_float_field(value: int) -> None:
    decoded = f.decode(f.encode(f.Sample(value=value)), f.Sample)
    assert type(decoded.value) is float
    assert decoded.value == value


def test_an_int_beyond_64_bits_in_a_float_field_is_refused() -> None:
    with pytest.raises(EncodeError) as info:
        f.encode(f.Sample(value=2**64))
    assert str(info.value) == (
        "$.value: int 18446744073709551616 does not fit in 64 bits (int64 or uint64)"
    )


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        (f.Sample(value="x"), "$.value", "expected a float, got str"),  # type: ignore[arg-type]
        (_builtins(raw="x"), "$.raw", "expected bytes, got str"),
        (_constrained(score=2.0), "$.score", "expected a value <= 1.0, got 2.0"),
        (
            f.Containers(
                ints=[],
                pair=(1,),  # type: ignore[arg-type]
                triple=(1.0, True, None),
                many=(),
                by_name={},
                by_id={},
                maybe_point=None,
                nested=[],
                maybe_list=None,
            ),
            "$.pair",
            "expected a tuple of 2 items, got 1",
        ),
    ],
    ids=["float-of-str", "bytes-of-str", "le", "tuple-length"],
)
def test_the_sender_refuses_with_the_path(value: object, path: str, message: str) -> None:
    with pytest.raises(EncodeError) as info:
        f.encode(value)
    assert (info.value.path, str(info.value)) == (path, f"{path}: {message}")


def test_an_optional_constrained_field_without_a_value_is_sent() -> None:
    value = _constrained(limit=None)
    assert f.decode(f.encode(value), f.Constrained) == value


def test_encode_with_a_type_of_another_schema_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^<class 'int'> is not a type of schema 'features'$"):
        CODEC.encode(f.Sample(value=1.0), type=int)


def _negations(depth: int) -> f.Expr:
    expr: f.Expr = f.Lit(value=1)
    for _ in range(depth):
        expr = f.Neg(operand=expr)
    return expr


def test_a_value_nested_beyond_the_recursion_limit_is_an_encode_error() -> None:
    # max_depth above Python's recursion limit: the recursion limit stops the encoder.
    deep = _negations(sys.getrecursionlimit() * 2)
    with pytest.raises(EncodeError) as info:
        CODEC.encode(deep, limits=Limits(max_depth=10**6))
    assert (info.value.path, str(info.value)) == ("$", "$: value nested too deeply to encode")


def test_the_nesting_guard_raises_before_msgspec_in_a_raised_recursion_limit() -> None:
    # The guard measures nesting without recursing, so the test process never nests deeply
    # in C: it raises before msgspec runs.
    header = b"\x91" * (SAFE_NESTING + 10) + b"\xc0"
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(SAFE_NESTING * 4)
    try:
        with pytest.raises(RecursionError, match=r"^message nested too deeply$"):
            refuse_deep_nesting(header)
        with pytest.raises(DecodeError) as info:
            CODEC.decode([header], f.Sample)
    finally:
        sys.setrecursionlimit(old)
    assert str(info.value) == "$: message nested too deeply"


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.float32, torch.complex64], ids=["bool", "float32", "complex64"]
)
def test_tensors_that_differ_are_not_equal(dtype: torch.dtype) -> None:
    a = torch.tensor([1, 0, 1]).to(dtype)
    b = torch.tensor([1, 1, 1]).to(dtype)
    assert not tensors_equal(a, b)
    assert tensors_equal(a, a.clone())


def test_a_str_that_is_not_utf_8_is_refused_by_the_header_encoder() -> None:
    with pytest.raises(EncodeError) as info:
        f.encode(f.Key(code="\ud800"))
    assert str(info.value) == (
        "$: cannot encode header: 'utf-8' codec can't encode character '\\ud800' in "
        "position 0: surrogates not allowed"
    )


@pytest.mark.parametrize("member", list(en.Modality), ids=lambda m: m.name)
def test_a_scalar_root_passes_the_container_check(member: en.Modality) -> None:
    # max_elements=1: every header is checked for long containers, an enum's body is none.
    frames = en._CODEC.encode(member, limits=Limits(max_elements=1))
    assert en.decode(frames, en.Modality) is member


def test_decode_turns_any_other_failure_into_a_decode_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The contract's net (nothing but DecodeError escapes), tried with a fault no input
    # is known to cause: the net must still name the failure.
    def fail(*args: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(framing, "as_byte_views", fail)
    with pytest.raises(DecodeError) as info:
        CODEC.decode([b""], f.Sample)
    assert str(info.value) == "$: rejected (ValueError: boom)"
    assert type(info.value.__cause__) is ValueError

    monkeypatch.setattr(framing, "split", fail)
    with pytest.raises(DecodeError) as info:
        CODEC.decode_bytes(b"", f.Sample)
    assert str(info.value) == "$: rejected buffer (ValueError: boom)"


def _header(root: str, runs: list[object], refs: list[int], body: object) -> bytes:
    return msgspec.msgpack.encode(["mmc", 2, "features", 3, root, runs, refs, body])


def test_bytes_sent_as_a_str_in_a_mapping_is_located_by_the_wire_path() -> None:
    # msgspec.convert takes a base64 str for bytes where the decoder does not, so the
    # failing entry cannot be found by validating the values again: the wire path says it.
    header = _header("Registry", [], [], {"a": [8, "aGk="]})
    with pytest.raises(DecodeError) as info:
        CODEC.decode([header], f.Registry)
    assert (info.value.path, str(info.value)) == (
        "$[...][1] (wire path)",
        "$[...][1] (wire path): Expected `bytes`, got `str`",
    )


@pytest.mark.parametrize(
    ("wire_type", "raw", "expected"),
    [
        (dict[str, tuple[int, ...]], {"a": [1], "b": [1, "x"]}, "$['b'][1]"),
        (dict[str, tuple[int, str]], {"a": [1, "s"], "b": [1, 2]}, "$['b'][1]"),
        (dict[str, dict[str, int]], {"a": {"b": 1}, "c": {"d": "x"}}, "$['c']['d']"),
        (dict[str, list[int]], [1], "$"),  # msgspec gives no path at the root
    ],
    ids=["var-tuple-values", "tuple-values", "mapping-values", "root"],
)
def test_wire_paths_through_mappings_become_schema_paths(
    wire_type: object, raw: object, expected: str
) -> None:
    body = msgspec.msgpack.encode(raw)
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.msgpack.decode(body, type=wire_type)
    path, message = locate_validation_error(str(info.value), wire_type, body)
    assert path == expected
    assert message == str(info.value).split(" - at ")[0]


def test_a_tensor_reference_past_the_tensors_is_refused_by_the_dry_run() -> None:
    # Over EAGER_TENSORS tensors: the body is first rebuilt with stand-ins (DryContext).
    count = EAGER_TENSORS + 1
    header = _header("Registry", [["int8", [], b"\0" * count, 0, count]], [], {"a": [3, 5000]})
    with pytest.raises(DecodeError) as info:
        CODEC.decode([header], f.Registry)
    assert (info.value.path, str(info.value)) == (
        "$['a']",
        f"$['a']: tensor 5000 out of range ({count} tensors)",
    )


@pytest.mark.parametrize(
    ("runs", "refs", "extra", "limits", "message"),
    [
        (
            [["int8", [], b"\0", 0, 1]],
            [],
            [b"\0" * 64],
            Limits(),
            "$: frame 1 is not referenced by any tensor",
        ),
        (
            [["int8", [], b"\0\0", 0, 2]],
            [0, 1, 0, 1],
            [],
            Limits(max_elements=3),
            "$: tensor reference table of 4 entries exceeds the limit of 3",
        ),
        (
            [["int8", [], b"\0", 0, 1], ["int8", [], b"\0\0", 0, 2]],
            [0, 1, 1],
            [],
            Limits(),
            "$: no entry of the tensor reference table points at tensor 2 (tensor run 1)",
        ),
    ],
    ids=["inline-run-and-an-unused-frame", "refs-over-max-elements", "missing-in-second-run"],
)
def test_bad_tensor_tables_are_refused(
    runs: list[object], refs: list[int], extra: list[bytes], limits: Limits, message: str
) -> None:
    header = _header("Registry", runs, refs, {"a": [3, 0]})
    with pytest.raises(DecodeError) as info:
        CODEC.decode([header, *extra], f.Registry, limits=limits)
    assert str(info.value) == message


def test_a_tensor_that_requires_grad_is_sent_detached() -> None:
    # Transposed: not contiguous, so it is normalized (a contiguous one is read in place).
    sent = torch.arange(6.0, requires_grad=True).view(2, 3).t()
    assert sent.requires_grad and not sent.is_contiguous()
    received = _tensor_at(f.decode(f.encode(f.Registry({"a": sent})), f.Registry), "a")
    assert received.requires_grad is False
    assert tensors_equal(received, sent.detach())


def test_an_empty_tensor_travels_in_an_empty_frame() -> None:
    frames = CODEC.encode(f.Registry({"a": torch.empty(0, 3)}), inline_threshold=0)
    assert [bytes(frame) for frame in frames[1:]] == [b""]
    received = _tensor_at(f.decode(frames, f.Registry), "a")
    assert (received.dtype, received.shape) == (torch.float32, torch.Size([0, 3]))


def test_a_tensor_in_two_tensor_fields_is_sent_once() -> None:
    shared = torch.ones(2)
    value = _builtins(t=shared, maybe_t=shared)
    frames = f.encode(value)
    tree = describe(frames, CODEC)
    assert [t["tensor"] for t in tree["tensors"]] == [0]
    assert tree["refs"] == []  # one reference, so references are positions
    received = f.decode(frames, f.Builtins)
    assert received.t is received.maybe_t
    assert tensors_equal(received.t, shared)


def test_a_class_that_refuses_the_decoded_values_is_named_with_the_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bound class may validate in its constructor; here common.Point is made to.
    class Point:
        def __init__(self, **fields: object) -> None:
            raise ValueError("a point must not be the origin")

    frames = f.encode(f.Drawing(origin=common.Point(x=0, y=0), shapes=[], labels=common.Labels()))
    monkeypatch.setattr(common, "Point", Point)
    with pytest.raises(DecodeError) as info:
        f.decode(frames, f.Drawing)
    assert (info.value.path, str(info.value)) == (
        "$.origin",
        "$.origin: Point rejected the decoded values (ValueError: a point must not be the origin)",
    )


def test_two_storages_at_one_address_travel_in_the_larger_one() -> None:
    # torch.frombuffer makes a storage per call: two storages start at one address, and
    # the frame must come from the one that holds all of the region (checked second here).
    buffer = bytearray(range(64))
    small = torch.frombuffer(buffer, dtype=torch.uint8, count=8)
    large = torch.frombuffer(buffer, dtype=torch.uint8)
    assert small.data_ptr() == large.data_ptr()
    assert small.untyped_storage().nbytes() == 8
    frames = CODEC.encode(f.Registry({"a": small, "b": large}), inline_threshold=0)
    assert [bytes(frame) for frame in frames[1:]] == [bytes(range(64))]
    received = f.decode(frames, f.Registry)
    a, b = _tensor_at(received, "a"), _tensor_at(received, "b")
    assert tensors_equal(a, small)
    assert tensors_equal(b, large)
    assert a.data_ptr() == b.data_ptr()
