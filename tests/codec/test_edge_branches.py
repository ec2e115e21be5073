"""Edge branches of the runtime that the round-trip tests do not take: each error the
encoder and decoder promise for them, exactly, and what the sender accepts as it is."""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tests.golden.features as f
from mmcodec.runtime.equality import tensors_equal
from mmcodec.runtime.errors import DecodeError, EncodeError
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.nesting import SAFE_NESTING, refuse_deep_nesting

CODEC = f._CODEC


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
    decoded = f.decode(f.encode(f.Sample(value=value)), f.Sample)  # type: ignore[arg-type]
    assert type(decoded.value) is float
    assert decoded.value == value


def test_an_int_beyond_64_bits_in_a_float_field_is_refused() -> None:
    with pytest.raises(EncodeError) as info:
        f.encode(f.Sample(value=2**64))  # type: ignore[arg-type]
    assert info.value.path == "$.value"


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        (f.Sample(value="x"), "$.value", "expected a float, got str"),  # type: ignore[arg-type]
        (_builtins(raw="x"), "$.raw", "expected bytes, got str"),
        (_constrained(score=2.0), "$.score", "expected a value <= 1.0, got 2.0"),
        (
            f.Containers(
                ints=[],
                pair=(1,),
                triple=(1.0, True, None),
                many=(),
                by_name={},  # type: ignore[arg-type]
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
