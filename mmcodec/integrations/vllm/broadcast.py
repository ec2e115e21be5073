"""(d) Executor -> tensor-parallel workers: a ``MultiModalKwargsItem`` pickles as mmcodec frames.

vLLM 0.33 broadcasts each ``SchedulerOutput`` (new requests carry their
``MultiModalFeatureSpec``s) with pickle protocol 5 through ``MessageQueue``
(``shm_broadcast.py``): every element, field and tensor of an item is reduced on its own,
tensors through ``_reduce_tensor`` (out of band from 1 MiB, in the stream below), and a
reader copies each out-of-band buffer before ``pickle.loads``. vLLM's pickle stays the
envelope (a plugin cannot replace it), but with :func:`route_items` an item with at least
:data:`ROUTE_FROM_BYTES` of tensors reduces to one call of :func:`rebuild_item` with its
mmcodec frames as ``PickleBuffer``s: no element, field or tensor of it is pickled, and
pickle's buffer callback sees the frames exactly as it saw the tensors (out of band from
1 MiB). Smaller items pickle as vLLM pickles them, where that measured faster.

This is ``MultiModalKwargsItem.__reduce_ex__``: it applies to every pickling of an item in
the process (a deep copy rebuilds the item through mmcodec too), and the unpickling
process needs mmcodec installed, as every vLLM process with the plugin has.
"""

from __future__ import annotations

from collections.abc import Sequence
from pickle import PickleBuffer  # a buffer wrapper; nothing here pickles or unpickles
from typing import Any, Final

import torch
from vllm.multimodal.inputs import MultiModalKwargsItem

from mmcodec.generated import multimodal_vllm as mv

__all__ = ["rebuild_item", "route_items", "unroute_items"]

_OUT_OF_BAND_PROTOCOL: Final = 5
_ATTRIBUTE: Final = "__reduce_ex__"


def rebuild_item(*frames: Any) -> Any:
    """The item in ``frames`` (what unpickling an item routed by :func:`route_items` calls)."""
    header = frames[0]
    if not isinstance(header, bytearray):  # in the stream: bytes; decoded views stay writable
        header = bytearray(header)
    return mv.decode([header, *frames[1:]], MultiModalKwargsItem)


ROUTE_FROM_BYTES: Final = 64 << 10
"""Items with fewer tensor bytes pickle as vLLM pickles them: ``make bench-vllm``'s broadcast
table measured 64 small items routed one message each at 0.69-0.85x vLLM's time (pickle
keeps what they share once per ``SchedulerOutput``; mmcodec pays its fixed cost per item),
and one 12 MB Qwen item at 1.20-1.37x (its slice bounds are 0-d tensors pickle reduces one
by one)."""


def _tensor_bytes(data: Any) -> int:
    if isinstance(data, torch.Tensor):
        return int(data.nbytes)
    if isinstance(data, (list, tuple)):
        return sum(_tensor_bytes(x) for x in data)
    return 0


def _reduce_item(item: Any, protocol: int) -> Any:
    if sum(_tensor_bytes(elem.data) for elem in item.data.values()) < ROUTE_FROM_BYTES:
        return object.__reduce_ex__(item, protocol)  # vLLM's own reduction
    frames: Sequence[memoryview] = mv.encode(item, type=MultiModalKwargsItem)
    if protocol >= _OUT_OF_BAND_PROTOCOL:
        return rebuild_item, tuple(PickleBuffer(frame) for frame in frames)
    return rebuild_item, tuple(bytearray(frame) for frame in frames)


def route_items() -> None:
    """Pickle every ``MultiModalKwargsItem`` of this process as mmcodec frames."""
    setattr(MultiModalKwargsItem, _ATTRIBUTE, _reduce_item)


def unroute_items() -> None:
    """Pickle items as vLLM does again."""
    if MultiModalKwargsItem.__dict__.get(_ATTRIBUTE) is _reduce_item:
        delattr(MultiModalKwargsItem, _ATTRIBUTE)


def routed() -> bool:
    return MultiModalKwargsItem.__dict__.get(_ATTRIBUTE) is _reduce_item
