"""A pytest plugin that records every decode of the shipped schema a test run makes: the
bytes, the type, the limits and what Python's decoder made of them.

``python -m pytest -p tests.rust.record_decodes tests/security/...`` with
``MMCODEC_RECORD_DIR`` set writes, per distinct case, ``<digest>`` (the frames as one
capture buffer, or the buffer given to ``decode_bytes``) and one line of
``manifest.txt``: ``name kind type max_frames max_total_bytes max_header_bytes max_depth
max_elements max_tensors max_ndim``, and the outcome as a JSON line of ``outcomes.jsonl``.
``tests/rust/test_hostile_replay.py`` replays them against the Rust decoder. Frames that
are not contiguous bytes cannot reach a Rust decoder (its API takes byte slices): those
cases are not recorded, nor decodes a test makes while measuring allocations
(``tracemalloc``): copying their bytes would count as the decoder's.
"""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

from mmcodec.runtime import codec as _codec
from mmcodec.runtime import framing
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits

_FOLDER = Path(os.environ.get("MMCODEC_RECORD_DIR", "recorded"))
_LIMIT_FIELDS = (
    "max_frames",
    "max_total_bytes",
    "max_header_bytes",
    "max_depth",
    "max_elements",
    "max_tensors",
    "max_ndim",
)
_seen: set[str] = set()
_depth = 0


def _byte_frames(frames: Any) -> list[bytes] | None:
    try:
        views = [memoryview(f) for f in frames]
        if not views or not all(v.c_contiguous for v in views):
            return None
        return [v.cast("B").tobytes() if v.nbytes else b"" for v in views]
    except (TypeError, ValueError):
        return None


def _record(kind: str, data: bytes, tp: Any, limits: Limits, error: DecodeError | None) -> None:
    name = hashlib.sha256(kind.encode() + data + repr(limits).encode()).hexdigest()[:24]
    if name in _seen:
        return
    _seen.add(name)
    _FOLDER.mkdir(parents=True, exist_ok=True)
    (_FOLDER / name).write_bytes(data)
    numbers = " ".join(str(getattr(limits, f)) for f in _LIMIT_FIELDS)
    with (_FOLDER / "manifest.txt").open("a") as manifest:
        manifest.write(f"{name} {kind} multimodal.{tp.__name__} {numbers}\n")
    outcome = {"case": name, "ok": error is None}
    if error is not None:
        outcome.update(path=error.path, message=error.message)
    with (_FOLDER / "outcomes.jsonl").open("a") as outcomes:
        outcomes.write(json.dumps(outcome) + "\n")


def _wrap(name: str, kind: str) -> None:
    original = getattr(_codec.SchemaCodec, name)

    def recording(self: _codec.SchemaCodec, data: Any, type: Any, *args: Any, **kwargs: Any) -> Any:
        global _depth
        outer = _depth == 0 and self.schema == "multimodal"
        _depth += 1
        try:
            result = original(self, data, type, *args, **kwargs)
        except DecodeError as error:
            if outer:
                _capture(kind, data, type, kwargs.get("limits", DEFAULT_LIMITS), error)
            raise
        finally:
            _depth -= 1
        if outer:
            _capture(kind, data, type, kwargs.get("limits", DEFAULT_LIMITS), None)
        return result

    setattr(_codec.SchemaCodec, name, recording)


def _capture(kind: str, data: Any, tp: Any, limits: Limits, error: DecodeError | None) -> None:
    if not isinstance(tp, type) or tracemalloc.is_tracing():
        return  # a test measuring the decoder's allocations: recording would add to them
    if kind == "frames":
        frames = _byte_frames(data)
        if frames is None:
            return
        payload = bytes(framing.join([memoryview(f) for f in frames]))
    else:
        try:
            payload = memoryview(data).cast("B").tobytes()
        except (TypeError, ValueError):
            return
    _record(kind, payload, tp, limits, error)


def pytest_configure() -> None:
    _wrap("decode", "frames")
    _wrap("decode_bytes", "buffer")
