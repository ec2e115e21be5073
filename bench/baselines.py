"""The codecs mmcodec is measured against: how engines move multimodal inputs today.

Every baseline has a ``name``, ``encode(obj) -> list[Frame]`` and ``decode(frames) -> obj``,
where ``frames`` are bytes-like objects as a transport delivers them (ZMQ parts, for one).

**Pickle is allowed here only, as a baseline to compare against.** Unpickling untrusted bytes
runs arbitrary code (several serving-engine CVEs); nothing in ``mmcodec/`` or ``generated/``
may use it, and nothing outside ``bench/`` may import this module for anything but
measurement.

What the baselines show (for "64 small items": 34,824 payload bytes, 130 distinct tensors;
round trips measured on the 2-core VM):

- :class:`PickleInBand` / :class:`PickleOutOfBand`: one 2,240,164-byte frame, ~20 ms. A
  tensor view pickles its *whole* storage, once per view (the 64 views of one 32 KB batch
  storage cost 2 MB: storages are not memoized across views); torch tensors never produce
  out-of-band ``PickleBuffer`` objects, so protocol 5's ``buffer_callback`` is never
  called. Decoded items no longer share storage. The worst case is a flat field: the
  16-image Qwen2.5-VL request (151 MB of tensors) pickles to 2.42 GB in ~10-15 s.
- :class:`TorchSave`: one 49,821-byte zip, ~12 ms. ``torch.save`` writes each storage once
  and rebuilds views of it (and shared tensors as one object), but sends every storage whole
  even when one item of many is saved. Loading with ``weights_only=True`` refuses the domain
  classes even when allowlisted ("Can only SETITEMS for dict...": items are dict
  subclasses), so the baseline lowers them to builtins first.
- :class:`MsgspecHooks`: 83,339 bytes in 129 frames, ~3 ms, in vLLM's ``serial_utils``
  style (each element a ``{"modality", "key", "data", "field"}`` map): no dedup (a shared
  tensor travels once per item), tuples come back as lists, tensors are guessed from a
  leading string.
"""

from __future__ import annotations

import importlib
import io
import pickle
import warnings
from collections.abc import Sequence
from typing import Any, Final, Protocol, TypeAlias

import torch
from msgspec import msgpack

from mmcodec.domain.multimodal import (
    BaseMultiModalField,
    BatchedField,
    FlatField,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    NestedTensors,
    SharedField,
)

__all__ = [
    "BASELINES",
    "Baseline",
    "Frame",
    "MsgspecHooks",
    "PickleInBand",
    "PickleOutOfBand",
    "TorchSave",
    "vllm_msgpack",
]

Frame: TypeAlias = bytes | bytearray | memoryview
"""A bytes-like frame: what ``encode`` returns and a transport hands to ``decode``."""


class Baseline(Protocol):
    """A codec under comparison."""

    @property
    def name(self) -> str:
        """A stable, human-readable name for reports."""
        ...

    def encode(self, obj: Any) -> list[Frame]:
        """Encode ``obj`` into frames (zero-copy frames may reference ``obj``'s tensors)."""
        ...

    def decode(self, frames: Sequence[Frame]) -> Any:
        """Rebuild the object from frames produced by ``encode``."""
        ...


class PickleInBand:
    """``pickle.dumps(obj, protocol=5)`` as one frame; ``pickle.loads`` to decode.

    The payload of every tensor is copied into the pickle, and every view carries its whole
    storage (see the module docstring).
    """

    name: Final = "pickle"

    def encode(self, obj: Any) -> list[Frame]:
        return [pickle.dumps(obj, protocol=5)]

    def decode(self, frames: Sequence[Frame]) -> Any:
        (frame,) = frames
        return pickle.loads(frame)  # unsafe on untrusted input: a baseline only


class PickleOutOfBand:
    """Pickle protocol 5 with ``buffer_callback``: out-of-band buffers become extra frames.

    Done the plain way (no conversion of tensors to numpy first), torch tensors produce no
    ``PickleBuffer`` at all: ``Tensor.__reduce_ex__`` serializes storages to bytes in band.
    So for these payloads the output is the same single frame as :class:`PickleInBand`;
    the baseline shows that protocol 5 alone does not make torch pickling zero-copy.
    """

    name: Final = "pickle oob"

    def encode(self, obj: Any) -> list[Frame]:
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        return [header, *(b.raw() for b in buffers)]

    def decode(self, frames: Sequence[Frame]) -> Any:
        return pickle.loads(frames[0], buffers=frames[1:])  # a baseline only


class TorchSave:
    """``torch.save`` into one in-memory zip; ``torch.load(weights_only=True)`` to decode.

    ``weights_only=True`` (the safe loader) refuses the domain classes even when allowlisted
    (they are dict subclasses, and it only sets items on plain dicts), and allowlisting
    ``slice`` would mutate torch's process-wide allowlist. So encode lowers the items to
    builtins first: ``{modality: [None | {key: (data, field)}]}`` with fields as
    ``("batched", keep_on_cpu)``, ``("flat", slices, dim, keep_on_cpu)`` or
    ``("shared", batch_size, keep_on_cpu)`` and slices as ``(start, stop, step)``; decode
    rebuilds them. That is lossless: pickle keeps tuples, and torch's storage dedup brings
    views of one storage and shared tensors back as such.
    """

    name: Final = "torch.save"

    def encode(self, obj: MultiModalKwargsItems) -> list[Frame]:
        buf = io.BytesIO()
        torch.save(_lower_items(obj), buf)
        return [buf.getbuffer()]

    def decode(self, frames: Sequence[Frame]) -> MultiModalKwargsItems:
        (frame,) = frames
        tree = torch.load(io.BytesIO(frame), weights_only=True)
        return _raise_items(tree)


_Lowered: TypeAlias = Any


def _lower_items(items: MultiModalKwargsItems) -> _Lowered:
    return {
        modality: [
            None
            if item is None
            else {key: (elem.data, _lower_field(elem.field)) for key, elem in item.items()}
            for item in item_list
        ]
        for modality, item_list in items.items()
    }


def _lower_field(field: BaseMultiModalField) -> _Lowered:
    if isinstance(field, BatchedField):
        return ("batched", field.keep_on_cpu)
    if isinstance(field, FlatField):
        specs = [_lower_slice_spec(s) for s in field.slices]
        slices = tuple(specs) if isinstance(field.slices, tuple) else specs
        return ("flat", slices, field.dim, field.keep_on_cpu)
    if isinstance(field, SharedField):
        return ("shared", field.batch_size, field.keep_on_cpu)
    raise TypeError(f"unsupported field type {type(field).__name__}")


def _lower_slice_spec(spec: slice | tuple[slice, ...] | list[slice]) -> _Lowered:
    if isinstance(spec, slice):
        return (spec.start, spec.stop, spec.step)
    return tuple((s.start, s.stop, s.step) for s in spec)


def _raise_items(tree: _Lowered) -> MultiModalKwargsItems:
    return MultiModalKwargsItems(
        {
            modality: [
                None
                if item is None
                else MultiModalKwargsItem(
                    {
                        key: MultiModalFieldElem(data, _raise_field(field))
                        for key, (data, field) in item.items()
                    }
                )
                for item in item_list
            ]
            for modality, item_list in tree.items()
        }
    )


def _raise_field(lowered: _Lowered) -> BaseMultiModalField:
    kind, *params = lowered
    if kind == "batched":
        return BatchedField(*params)
    if kind == "flat":
        specs, dim, keep_on_cpu = params
        # A plain slice lowers to a triple of int | None; a tuple of slices to a tuple of them.
        raised: list[Any] = [
            tuple(slice(*s) for s in spec) if spec and isinstance(spec[0], tuple) else slice(*spec)
            for spec in specs
        ]
        return FlatField(tuple(raised) if isinstance(specs, tuple) else raised, dim, keep_on_cpu)
    if kind == "shared":
        return SharedField(*params)
    raise ValueError(f"unknown field kind {kind!r}")


_EXT_RAW_VIEW: Final = 3
"""The msgpack extension code of an inline tensor payload."""


class MsgspecHooks:
    """A hand-written msgspec msgpack codec with hooks, in the style of vLLM's ``serial_utils``.

    Wire shape, all untyped msgpack, as vLLM's ``MsgpackEncoder`` lays out multimodal items:
    ``{modality: [None | [elem, ...]]}`` where each element of an item is a map
    ``{"modality": str, "key": str, "data": nested, "field": [variant_name, *params]}`` (the
    item is rebuilt from its elements' ``key``); a tensor is
    ``[dtype_name, shape, frame_index | Ext(3, raw bytes)]``, inline when under
    ``inline_threshold`` bytes (256, as vLLM) and otherwise a frame that views the tensor's
    memory (zero-copy for contiguous tensors: ``.view(torch.uint8).numpy().data``); a slice
    is ``[start, stop, step]`` (through ``enc_hook``); other nested data are plain msgpack
    arrays, ints and floats. The tree is built in Python, as vLLM's ``_encode_mm_items``
    does, because msgspec encodes dict subclasses itself and never calls ``enc_hook`` for them.

    Decoding is untyped and guesses: a list whose first element is a string is a tensor;
    ``getattr(torch, dtype_name)`` finds the dtype; a flat field's slice specs are slices
    where the first element is not a list. It is lossy in the ways today's codecs are:

    - tuples (in data, and a ``dim > 0`` flat field's tuple slice specs) come back as lists;
    - a shared tensor travels once per item and comes back as one tensor per item, and
      views of one storage come back as independent tensors;
    - large tensors are ``torch.frombuffer`` views of the frames; inline ones are copied.

    Like vLLM's encoder it stashes the frame list on ``self`` while encoding, so one instance
    must not encode from two threads at once (a failure mode mmcodec avoids).
    """

    name: Final = "msgspec hooks"

    def __init__(self, inline_threshold: int = 256) -> None:
        self.inline_threshold = inline_threshold
        self._encoder = msgpack.Encoder(enc_hook=self._enc_hook)
        self._decoder = msgpack.Decoder(ext_hook=self._ext_hook)
        self._frames: list[Frame] | None = None

    # -- encode ---------------------------------------------------------------------------

    def encode(self, obj: MultiModalKwargsItems) -> list[Frame]:
        frames: list[Frame] = [b""]
        self._frames = frames
        try:
            tree = {
                modality: [
                    None if item is None else self._encode_item(modality, item)
                    for item in item_list
                ]
                for modality, item_list in obj.items()
            }
            frames[0] = self._encoder.encode(tree)
        finally:
            self._frames = None
        return frames

    def _encode_item(self, modality: str, item: MultiModalKwargsItem) -> list[dict[str, Any]]:
        return [
            {
                "modality": modality,
                "key": key,
                "data": None if elem.data is None else self._encode_nested(elem.data),
                "field": self._encode_field(elem.field),
            }
            for key, elem in item.items()
        ]

    def _encode_nested(self, nt: NestedTensors) -> Any:
        if isinstance(nt, torch.Tensor):
            return self._encode_tensor(nt)
        if isinstance(nt, (int, float)):
            return nt
        return [self._encode_nested(x) for x in nt]

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, slice):
            return [obj.start, obj.stop, obj.step]
        if isinstance(obj, torch.Tensor):
            return self._encode_tensor(obj)
        raise TypeError(f"cannot encode {type(obj).__name__}")

    def _encode_tensor(self, t: torch.Tensor) -> list[Any]:
        frames = self._frames
        assert frames is not None, "tensors are only encoded inside encode()"
        # One flat byte view: no copy when contiguous, and bf16 survives (numpy has no bf16).
        raw = t.flatten().contiguous().view(torch.uint8).numpy().data
        data: int | msgpack.Ext
        if t.nbytes < self.inline_threshold:
            data = msgpack.Ext(_EXT_RAW_VIEW, raw)
        else:
            data = len(frames)
            frames.append(raw)
        return [str(t.dtype).removeprefix("torch."), list(t.shape), data]

    @staticmethod
    def _encode_field(field: BaseMultiModalField) -> list[Any]:
        if isinstance(field, BatchedField):
            return ["batched", field.keep_on_cpu]
        if isinstance(field, FlatField):
            return ["flat", field.slices, field.dim, field.keep_on_cpu]
        if isinstance(field, SharedField):
            return ["shared", field.batch_size, field.keep_on_cpu]
        raise TypeError(f"unsupported field type {type(field).__name__}")

    # -- decode ---------------------------------------------------------------------------

    def decode(self, frames: Sequence[Frame]) -> MultiModalKwargsItems:
        tree = self._decoder.decode(frames[0])
        if not isinstance(tree, dict):
            raise TypeError(f"expected a map of modalities, got {type(tree).__name__}")
        with warnings.catch_warnings():
            # torch warns when it wraps a read-only frame (bytes from a transport).
            warnings.simplefilter("ignore", UserWarning)
            return MultiModalKwargsItems(
                {
                    modality: [
                        None if elems is None else self._decode_item(elems, frames)
                        for elems in item_list
                    ]
                    for modality, item_list in tree.items()
                }
            )

    @staticmethod
    def _ext_hook(code: int, data: memoryview) -> Any:
        if code == _EXT_RAW_VIEW:
            return bytearray(data)  # a writable copy, decoupled from the message buffer
        raise TypeError(f"unsupported msgpack extension code {code}")

    def _decode_item(
        self, elems: list[dict[str, Any]], frames: Sequence[Frame]
    ) -> MultiModalKwargsItem:
        out = MultiModalKwargsItem()
        for elem in elems:
            data = elem["data"]
            decoded = None if data is None else self._decode_nested(data, frames)
            out[elem["key"]] = MultiModalFieldElem(decoded, self._decode_field(elem["field"]))
        return out

    def _decode_nested(self, obj: Any, frames: Sequence[Frame]) -> NestedTensors:
        if isinstance(obj, (int, float)):
            return obj
        if not isinstance(obj, list):
            raise TypeError(f"unexpected nested data {type(obj).__name__}")
        if obj and isinstance(obj[0], str):  # the guess: a leading dtype name means a tensor
            return self._decode_tensor(obj, frames)
        return [self._decode_nested(x, frames) for x in obj]

    @staticmethod
    def _decode_tensor(obj: list[Any], frames: Sequence[Frame]) -> torch.Tensor:
        dtype_name, shape, data = obj
        dtype = getattr(torch, dtype_name)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"not a dtype: {dtype_name!r}")
        buffer = frames[data] if isinstance(data, int) else data
        if not len(buffer):  # torch.frombuffer rejects empty buffers
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).view(shape)

    def _decode_field(self, obj: list[Any]) -> BaseMultiModalField:
        kind, *params = obj
        if kind == "batched":
            return BatchedField(*params)
        if kind == "flat":
            slices, dim, keep_on_cpu = params
            return FlatField(self._decode_slices(slices), dim, keep_on_cpu)
        if kind == "shared":
            return SharedField(*params)
        raise TypeError(f"unknown field variant {kind!r}")

    def _decode_slices(self, obj: list[Any]) -> Any:
        if obj and not isinstance(obj[0], list):
            return slice(*obj)
        return [self._decode_slices(x) for x in obj]


class _VllmMsgpack:
    """vLLM's own ``MsgpackEncoder``/``MsgpackDecoder`` (only when vLLM is importable).

    It encodes vLLM's classes, not mmcodec's: payloads must be built with
    ``vllm.multimodal.inputs`` to use it. Untested here (vLLM is not installed).
    """

    name: Final = "vllm msgpack"

    def __init__(self, serial_utils: Any, root_type: Any) -> None:
        self._encoder = serial_utils.MsgpackEncoder()
        self._decoder = serial_utils.MsgpackDecoder(root_type)

    def encode(self, obj: Any) -> list[Frame]:
        return list(self._encoder.encode(obj))

    def decode(self, frames: Sequence[Frame]) -> Any:
        return self._decoder.decode(frames)


def vllm_msgpack() -> Baseline | None:
    """vLLM's msgpack codec as a baseline, or None when ``import vllm`` fails (as here)."""
    try:
        serial_utils = importlib.import_module("vllm.v1.serial_utils")
        inputs = importlib.import_module("vllm.multimodal.inputs")
    except ImportError:
        return None
    return _VllmMsgpack(serial_utils, inputs.MultiModalKwargsItems)


BASELINES: Final[list[Baseline]] = [PickleInBand(), PickleOutOfBand(), TorchSave(), MsgspecHooks()]
"""The baselines in report order. vLLM's own codec is not listed: it needs vLLM's classes."""
