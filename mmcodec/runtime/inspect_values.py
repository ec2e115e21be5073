"""The first values of a tensor payload as JSON values, read with numpy, without torch.

``mmcodec inspect --tensors N`` shows them; a message shown by position needs no torch at
all. numpy has no bfloat16, complex32 or float8: their bytes are decoded here, exactly
(``tests/codegen/test_inspect_without_torch.py`` compares every float8 byte and random bfloat16
and complex32 payloads with torch's own conversion). numpy is imported on first use.
"""

from __future__ import annotations

import math
from typing import Any

from mmcodec.runtime.wire_dtypes import WireDtype


def first_values(
    dtype: WireDtype, buffer: memoryview, offset: int, numel: int, n: int
) -> list[Any]:
    """The first ``n`` of the ``numel`` values at ``offset`` (row-major), as JSON values:
    bools, ints, floats (non-finite ones as the strings "nan", "inf", "-inf"), and
    ``[re, im]`` pairs for complex dtypes. The caller checked that the payload fits."""
    import numpy as np

    # A signalling NaN (any payload may hold one) raises the invalid flag when it is widened
    # to float64: numpy warns, and warnings are errors for some callers. It shows as "nan".
    with np.errstate(invalid="ignore"):
        return _first_values(np, dtype, buffer, offset, min(n, numel))


def _first_values(
    np: Any, dtype: WireDtype, buffer: memoryview, offset: int, count: int
) -> list[Any]:
    name = dtype.name
    if name == "complex32":  # two float16s per value
        halves = np.frombuffer(buffer, np.float16, 2 * count, offset).astype(np.float64)
        return [[json_float(re), json_float(im)] for re, im in halves.reshape(-1, 2).tolist()]
    raw = np.frombuffer(buffer, np.dtype(dtype.carrier), count, offset)
    if name in ("complex64", "complex128"):
        pairs = np.stack([raw.real, raw.imag], axis=-1).astype(np.float64).tolist()
        return [[json_float(re), json_float(im)] for re, im in pairs]
    if name == "bfloat16":  # the high half of a float32
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    elif name.startswith("float8"):
        raw = np.array(_float8_table(name))[raw]
    if raw.dtype.kind == "f":
        return [json_float(v) for v in raw.astype(np.float64).tolist()]
    values: list[Any] = raw.tolist()
    return values


def json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


_FLOAT8 = {
    # name: (exponent bits, mantissa bits, exponent bias, encoding of specials)
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
}
_tables: dict[str, list[float]] = {}


def _float8_table(name: str) -> list[float]:
    """The value of each of the 256 bytes of a float8 format."""
    table = _tables.get(name)
    if table is None:
        table = _tables[name] = [_float8_value(name, byte) for byte in range(256)]
    return table


def _float8_value(name: str, byte: int) -> float:
    if name == "float8_e8m0fnu":  # an unsigned power of two; all ones is NaN
        return math.nan if byte == 0xFF else math.ldexp(1.0, byte - 127)
    exponent_bits, mantissa_bits, bias, specials = _FLOAT8[name]
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = byte & ((1 << mantissa_bits) - 1)
    top = (1 << exponent_bits) - 1
    if specials == "fnuz" and byte == 0x80:  # the only NaN; no negative zero, no infinity
        return math.nan
    if specials == "fn" and exponent == top and mantissa == (1 << mantissa_bits) - 1:
        return math.nan  # no infinity
    if specials == "ieee" and exponent == top:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:  # subnormal
        return sign * math.ldexp(mantissa, 1 - bias - mantissa_bits)
    return sign * math.ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits)
