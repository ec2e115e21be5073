"""The fixed table of dtypes that may travel, and how each is viewed from raw bytes.

Only dtypes with a stable byte layout are listed (:mod:`mmcodec.runtime.wire_dtypes`,
which needs no torch). Wire names are torch's names; numpy carries the bytes (it builds
views faster than torch does) using a numpy dtype of the same width, and the tensor is
then re-viewed as the real torch dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mmcodec.runtime.wire_dtypes import WIRE_DTYPES


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


def _build_table() -> dict[str, DtypeInfo]:
    table: dict[str, DtypeInfo] = {}
    for name, wire in WIRE_DTYPES.items():
        torch_dtype = getattr(torch, name, None)
        if torch_dtype is None:  # pragma: no cover - an older torch lacks some float8 variant
            continue
        np_dtype = np.dtype(wire.carrier)
        table[name] = DtypeInfo(
            name=name,
            torch_dtype=torch_dtype,
            itemsize=torch_dtype.itemsize,
            numpy_carrier=np_dtype,
            carrier=torch.from_numpy(np.empty(0, np_dtype)).dtype,
            needs_view=wire.carrier != name,
        )
    return table


BY_NAME: dict[str, DtypeInfo] = _build_table()
BY_TORCH: dict[torch.dtype, DtypeInfo] = {info.torch_dtype: info for info in BY_NAME.values()}
WIRE_NAMES: tuple[str, ...] = tuple(BY_NAME)
