"""(c) The scale-out endpoint: a ``MultiModalKwargsItem`` as a base64 string, through mmcodec.

vLLM 0.33's ``vllm/entrypoints/scale_out/token_in_token_out/mm_serde.py`` sends an item
over JSON/HTTP as base64 of one msgpack buffer with every tensor inline. These functions
have its signatures: the string is base64 of mmcodec's single buffer
(``encode_bytes``: a frame table, payloads 64-byte aligned), which starts with
``b"MMCB"`` (so the string starts with ``"TU1DQ"``). A stock string (base64 of a msgpack
map) is decoded the way vLLM decodes it, so a routed decoder reads both; vLLM's stock
decoder given a routed string fails at the first byte (a msgpack integer, not a map).

Decoded tensors view one writable buffer decoded from the string (no second copy).
"""

from __future__ import annotations

from typing import Any, Final

import pybase64
from vllm.multimodal.inputs import MultiModalKwargsItem
from vllm.v1.serial_utils import MsgpackDecoder

from mmcodec.generated import multimodal_vllm as mv

__all__ = ["decode_mm_kwargs_item", "encode_mm_kwargs_item"]

_SINGLE_BUFFER: Final = b"MMCB"
"""How mmcodec's single buffer starts; no msgpack map (a stock string) starts so."""

_stock_decoder = MsgpackDecoder(t=MultiModalKwargsItem)


def encode_mm_kwargs_item(item: Any) -> str:
    """Serialize a ``MultiModalKwargsItem`` to a base64 string (mmcodec's single buffer)."""
    encoded: bytes = pybase64.b64encode(mv.encode_bytes(item, type=MultiModalKwargsItem))
    return encoded.decode("ascii")


def decode_mm_kwargs_item(data: str) -> Any:
    """Deserialize a string from :func:`encode_mm_kwargs_item` or from vLLM's own encoder.

    Raises ``binascii.Error`` for text that is not base64, :class:`mmcodec.DecodeError` (a
    ``ValueError``) for an mmcodec buffer that is not a valid item.
    """
    raw = pybase64.b64decode_as_bytearray(data, validate=True)
    if raw[: len(_SINGLE_BUFFER)] == _SINGLE_BUFFER:
        return mv.decode_bytes(raw, MultiModalKwargsItem)
    return _stock_decoder.decode(raw)
