"""The small hand-written runtime that generated codecs import.

It never imports generated code: generated modules hand it their wire types and
rebuild functions through :class:`mmcodec.runtime.codec.SchemaCodec`.
"""

from mmcodec.runtime.api import require_api
from mmcodec.runtime.errors import CodecError, DecodeError, EncodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "DEFAULT_LIMITS",
    "CodecError",
    "DecodeError",
    "EncodeError",
    "Limits",
    "require_api",
]
