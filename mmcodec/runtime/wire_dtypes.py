"""The wire's dtype names and their byte layout, without torch or numpy.

What a tool needs to read tensor payloads (``mmcodec inspect``); the decoder's table,
:data:`mmcodec.runtime.dtypes.BY_NAME`, adds torch's dtypes to these entries (only the
float8 variants the installed torch has).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WireDtype:
    name: str
    """torch's name, which is the wire's."""
    itemsize: int
    carrier: str
    """The numpy dtype that holds the bytes: the dtype itself, or an unsigned int of its
    width when numpy has no such dtype (bfloat16, complex32, the float8 variants)."""


_TABLE = [
    ("float64", 8, "float64"),
    ("float32", 4, "float32"),
    ("float16", 2, "float16"),
    ("int8", 1, "int8"),
    ("int16", 2, "int16"),
    ("int32", 4, "int32"),
    ("int64", 8, "int64"),
    ("uint8", 1, "uint8"),
    ("uint16", 2, "uint16"),
    ("uint32", 4, "uint32"),
    ("uint64", 8, "uint64"),
    ("bool", 1, "bool"),
    ("complex64", 8, "complex64"),
    ("complex128", 16, "complex128"),
    ("bfloat16", 2, "uint16"),
    ("complex32", 4, "uint32"),
    ("float8_e4m3fn", 1, "uint8"),
    ("float8_e4m3fnuz", 1, "uint8"),
    ("float8_e5m2", 1, "uint8"),
    ("float8_e5m2fnuz", 1, "uint8"),
    ("float8_e8m0fnu", 1, "uint8"),
]

WIRE_DTYPES: dict[str, WireDtype] = {
    name: WireDtype(name, itemsize, carrier) for name, itemsize, carrier in _TABLE
}
"""Every dtype name the wire defines, in the table's order."""
