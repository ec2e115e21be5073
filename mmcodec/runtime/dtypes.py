"""The fixed table of dtypes that may travel, and how each is viewed from raw bytes.

Only dtypes with a stable byte layout are listed. Wire names are torch's names;
numpy carries the bytes (it builds views faster than torch does) using a numpy
dtype of the same width, and the tensor is then re-viewed as the real torch dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class DtypeInfo:
    name: str
    torch_dtype: torch.dtype
    itemsize: int
    numpy_carrier: np.dtype[np.generic]
    carrier: torch.dtype
    """The torch dtype of ``numpy_carrier``: what the tensor is viewed as to reach numpy."""
    needs_view: bool
    """True when numpy has no such dtype and the carrier tensor must be re-viewed."""


_NATIVE = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "complex64": np.complex64,
    "complex128": np.complex128,
}
_VIA_CARRIER = {
    "bfloat16": np.uint16,
    "complex32": np.uint32,
    "float8_e4m3fn": np.uint8,
    "float8_e4m3fnuz": np.uint8,
    "float8_e5m2": np.uint8,
    "float8_e5m2fnuz": np.uint8,
    "float8_e8m0fnu": np.uint8,
}


def _build_table() -> dict[str, DtypeInfo]:
    table: dict[str, DtypeInfo] = {}
    for name, carrier in [*_NATIVE.items(), *_VIA_CARRIER.items()]:
        torch_dtype = getattr(torch, name, None)
        if torch_dtype is None:  # an older torch without some float8 variant
            continue
        np_dtype = np.dtype(carrier)
        table[name] = DtypeInfo(
            name=name,
            torch_dtype=torch_dtype,
            itemsize=torch_dtype.itemsize,
            numpy_carrier=np_dtype,
            carrier=torch.from_numpy(np.empty(0, np_dtype)).dtype,
            needs_view=name in _VIA_CARRIER,
        )
    return table


BY_NAME: dict[str, DtypeInfo] = _build_table()
BY_TORCH: dict[torch.dtype, DtypeInfo] = {info.torch_dtype: info for info in BY_NAME.values()}
WIRE_NAMES: tuple[str, ...] = tuple(BY_NAME)
