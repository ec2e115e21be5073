"""Tensors <-> payloads: the encoder's layout planner and the decoder's validated views.

Encoding collects every tensor a message references (deduplicated by identity),
then plans payloads: views of one storage with the same dtype and shape, laid back
to back, become one *run*; the byte ranges a storage contributes become one frame
that references the storage's memory (no copy). Payloads under the inline
threshold travel inside the header instead.

Decoding checks every run against the table and the frames before it builds
anything, then builds each run with one numpy view and one torch call.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mmcodec.runtime.dtypes import BY_NAME, BY_TORCH, DtypeInfo
from mmcodec.runtime.errors import DecodeError, EncodeError
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.wire import TensorRun

Frame = memoryview
"""What :func:`plan_payloads` hands out: a view that keeps its tensor's storage alive."""

DEFAULT_INLINE_THRESHOLD = 1024
"""Payloads (per storage region) below this many bytes travel inside the header.

Chosen by measurement (``make bench``, "inline threshold" table): below ~1 KiB the
cost of an extra frame (a frame-table entry, a ZMQ part, a numpy view over it)
exceeds the cost of copying the bytes into the header and back out.
"""

_MAX_DIM = (1 << 63) - 1

_STRIDED = torch.strided


def _prime_readonly_warning() -> None:
    # torch warns once per process when it wraps a read-only buffer. Decoded tensors
    # view read-only frames by design (see the README's mutability contract), so the
    # warning carries no information: spend its one shot here, where it is silenced.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.from_numpy(np.frombuffer(b"\0" * 8, dtype=np.uint8))


_prime_readonly_warning()


class EncodeContext:
    """Per-call encoder state: the tensors referenced so far, deduplicated by identity."""

    __slots__ = ("_ids", "max_depth", "tensors")

    def __init__(self, max_depth: int) -> None:
        self.tensors: list[torch.Tensor] = []
        self._ids: dict[int, int] = {}
        self.max_depth = max_depth

    def ref(self, value: object) -> int:
        """Register a tensor and return its reference (the same one for the same object)."""
        ref = self._ids.get(id(value))
        if ref is None:
            if not isinstance(value, torch.Tensor):
                raise EncodeError(f"expected a tensor, got {type(value).__name__}")
            ref = len(self.tensors)
            self._ids[id(value)] = ref  # the list below keeps the object, so its id stays unique
            self.tensors.append(value)
        return ref


def _normalize(t: torch.Tensor) -> tuple[torch.Tensor, DtypeInfo]:
    """Make a tensor a contiguous CPU strided tensor with a wire dtype, or explain why not."""
    if t.layout is not _STRIDED:
        raise EncodeError(f"{t.layout} tensors are not supported; convert to dense first")
    if t.is_quantized:
        raise EncodeError(f"quantized tensors ({t.dtype}) are not supported")
    info = BY_TORCH.get(t.dtype)
    if info is None:
        raise EncodeError(f"dtype {t.dtype} has no stable byte layout and cannot be encoded")
    if t.is_meta:
        raise EncodeError("meta tensors hold no data and cannot be encoded")
    if t.requires_grad:
        t = t.detach()
    if not t.is_cpu:
        t = t.to("cpu")  # once per distinct tensor: the planner sees each object once
    if not t.is_contiguous():
        t = t.contiguous()
    return t, info


class _Placed:
    """One distinct tensor as the planner sees it."""

    __slots__ = ("info", "nbytes", "ref", "shape", "start", "tensor")

    def __init__(
        self, ref: int, tensor: torch.Tensor, info: DtypeInfo, start: int, nbytes: int
    ) -> None:
        self.ref = ref
        self.tensor = tensor
        self.info = info
        self.start = start
        self.nbytes = nbytes
        self.shape = tuple(tensor.shape)


def plan_payloads(
    tensors: Sequence[torch.Tensor], inline_threshold: int
) -> tuple[list[TensorRun], list[int], list[Frame]]:
    """Lay tensors out as runs and frames. Returns (runs, refs, frames after the header)."""
    # Group by (storage, dtype, shape): candidates for one run.
    groups: dict[tuple[Any, ...], list[_Placed]] = {}
    storages: dict[tuple[int, int], torch.Tensor] = {}
    for ref, t in enumerate(tensors):
        info = BY_TORCH.get(t.dtype)
        if (
            info is None
            or t.layout is not _STRIDED
            or not t.is_cpu
            or t.requires_grad
            or not t.is_contiguous()
        ):
            try:
                t, info = _normalize(t)
            except EncodeError as e:
                raise e.at(f"<tensor {ref}>") from None
        storage = t.untyped_storage()
        base = storage.data_ptr()
        storage_key = (base, storage.nbytes())
        storages.setdefault(storage_key, t)
        nbytes = t.numel() * info.itemsize
        start = t.data_ptr() - base if nbytes else 0
        placed = _Placed(ref, t, info, start, nbytes)
        groups.setdefault((storage_key, info.name, placed.shape), []).append(placed)

    # Split each group into runs of back-to-back tensors; equal placement = one tensor.
    runs_by_storage: dict[tuple[int, int], list[list[_Placed]]] = {}
    ordered_runs: list[list[_Placed]] = []
    position_of_ref = [0] * len(tensors)
    for (storage_key, _, _), members in groups.items():
        members.sort(key=lambda p: p.start)
        run: list[_Placed] = []
        for p in members:
            if run and p.start == run[-1].start:  # the same bytes, another tensor object
                position_of_ref[p.ref] = -1 - run[-1].ref  # resolved below
                continue
            if run and (p.nbytes == 0 or p.start != run[-1].start + run[-1].nbytes):
                ordered_runs.append(run)
                runs_by_storage.setdefault(storage_key, []).append(run)
                run = []
            run.append(p)
        ordered_runs.append(run)
        runs_by_storage.setdefault(storage_key, []).append(run)

    # Number tensors in run order, so that the decoder can build them run by run.
    position = 0
    for run in ordered_runs:
        for p in run:
            position_of_ref[p.ref] = position
            position += 1
    for ref, pos in enumerate(position_of_ref):
        if pos < 0:
            position_of_ref[ref] = position_of_ref[-1 - pos]

    # One frame per contiguous byte range of a storage; small ranges go inline.
    placement: dict[int, tuple[int | memoryview, int]] = {}  # id(run) -> (data, offset)
    frames: list[Frame] = []
    for storage_key, storage_runs in runs_by_storage.items():
        owner = storages[storage_key]
        spans = sorted(
            ((r[0].start, r[-1].start + r[-1].nbytes, r) for r in storage_runs),
            key=lambda s: s[0],
        )
        merged: list[tuple[int, int, list[list[_Placed]]]] = []
        for start, end, r in spans:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end), [*merged[-1][2], r])
            else:
                merged.append((start, end, [r]))
        for start, end, members_runs in merged:
            region = _byte_view(owner, start, end - start)
            if end - start < inline_threshold:
                for r in members_runs:
                    a = r[0].start - start
                    b = r[-1].start + r[-1].nbytes - start
                    placement[id(r)] = (memoryview(region[a:b].tobytes()), 0)
            else:
                frames.append(memoryview(region))  # type: ignore[arg-type]
                for r in members_runs:
                    placement[id(r)] = (len(frames), r[0].start - start)

    wire_runs = []
    for r in ordered_runs:
        data, offset = placement[id(r)]
        first = r[0]
        wire_runs.append(TensorRun(first.info.name, list(first.shape), data, offset, len(r)))
    identity = all(pos == ref for ref, pos in enumerate(position_of_ref))
    return wire_runs, [] if identity else position_of_ref, frames


def _byte_view(owner: torch.Tensor, start: int, length: int) -> np.ndarray[Any, Any]:
    """A uint8 numpy view of ``length`` bytes of ``owner``'s storage; it keeps the storage."""
    if length == 0:
        return np.empty(0, dtype=np.uint8)
    raw = torch.empty(0, dtype=torch.uint8)
    raw.set_(owner.untyped_storage(), start, (length,), (1,))
    array: np.ndarray[Any, Any] = raw.numpy()
    return array


class DecodeContext:
    """Per-call decoder state: the message's tensors and the caller's limits."""

    __slots__ = ("limits", "tensors")

    def __init__(self, tensors: list[torch.Tensor], limits: Limits) -> None:
        self.tensors = tensors
        self.limits = limits

    def tensor(self, ref: int) -> torch.Tensor:
        try:
            return self.tensors[ref]
        except IndexError:
            raise DecodeError(f"tensor {ref} out of range ({len(self.tensors)} tensors)") from None


class RunError(Exception):
    """A run failed validation; the positions of the tensors it would have produced."""

    def __init__(self, message: str, count: int) -> None:
        super().__init__(message)
        self.message = message
        self.count = count
        self.first = 0
        self.last = 0


class DiagnoseContext(DecodeContext):
    """Re-runs a rebuild to learn the path of the first value that uses a bad run."""

    __slots__ = ("error", "refs")

    def __init__(self, error: RunError, refs: list[int], limits: Limits) -> None:
        super().__init__([], limits)
        self.error = error
        self.refs = refs

    def tensor(self, ref: int) -> torch.Tensor:
        position = self.refs[ref] if self.refs and 0 <= ref < len(self.refs) else ref
        if self.error.first <= position <= self.error.last:
            raise DecodeError(self.error.message)
        return _PLACEHOLDER


_PLACEHOLDER = torch.empty(0)


def build_tensors(
    runs: list[TensorRun],
    refs: list[int],
    frames: Sequence[memoryview],
    limits: Limits,
    copy: bool,
) -> list[torch.Tensor]:
    """Validate every run against the frames, then build the tensors they hold.

    ``frames`` are byte-format memoryviews, the header first. Raises ``RunError``
    for a bad run (so the caller can find the path of a value that uses it) and
    :class:`DecodeError` for problems that belong to the message as a whole.
    """
    n_frames = len(frames)
    used = [False] * n_frames
    out: list[torch.Tensor] = []
    max_elements = limits.max_elements

    def room_for(first: int) -> int:
        return max_elements - first

    for index, run in enumerate(runs):
        first = len(out)
        try:
            built = _build_run(run, frames, used, limits, copy, room_for(first))
        except RunError as e:
            e.first = first
            # A run whose count is itself bad claims every position after it.
            e.last = first + e.count - 1 if 1 <= e.count <= room_for(first) else 1 << 63
            e.message = f"{e.message} (tensor run {index})"
            raise
        if type(built) is list:
            out.extend(built)
        else:
            out.append(built)  # type: ignore[arg-type]
    for number in range(1, n_frames):
        if not used[number]:
            raise DecodeError(f"frame {number} is not referenced by any tensor")
    if not refs:
        return out
    n = len(out)
    for ref in refs:
        if not 0 <= ref < n:
            raise DecodeError(f"tensor reference table points at tensor {ref} ({n} tensors)")
    return [out[ref] for ref in refs]


def _build_run(
    run: TensorRun,
    frames: Sequence[memoryview],
    used: list[bool],
    limits: Limits,
    copy: bool,
    room: int,
) -> torch.Tensor | list[torch.Tensor]:
    count = run.count
    info = BY_NAME.get(run.dtype)
    if info is None:
        raise RunError(f"unknown dtype {run.dtype!r}", count)
    if not 1 <= count <= limits.max_elements or count > room:
        raise RunError(f"tensor count {count} outside 1..{min(room, limits.max_elements)}", count)
    shape = run.shape
    if len(shape) > limits.max_ndim:
        raise RunError(f"{len(shape)} dimensions exceed the limit of {limits.max_ndim}", count)
    numel = 1
    for dim in shape:
        if not 0 <= dim <= _MAX_DIM:
            raise RunError(f"shape entry {dim} is not a non-negative int64", count)
        numel *= dim  # Python ints: no overflow; the length check below bounds it
    nbytes = numel * info.itemsize * count
    data = run.data
    if type(data) is int:
        if not 1 <= data < len(frames):
            raise RunError(f"frame {data} out of range ({len(frames)} frames)", count)
        buffer = frames[data]
        used[data] = True
        offset = run.offset
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise RunError(
                f"payload of {nbytes} bytes at offset {offset} overruns frame {data} "
                f"({buffer.nbytes} bytes)",
                count,
            )
    else:
        buffer = data  # type: ignore[assignment]
        offset = 0
        if run.offset != 0 or buffer.nbytes != nbytes:
            raise RunError(
                f"inline payload holds {buffer.nbytes} bytes, shape {list(shape)} of "
                f"{info.name} needs {nbytes}",
                count,
            )
    if info.name == "bool" and nbytes and _has_non_boolean_byte(buffer, offset, nbytes):
        raise RunError("bool payload holds a byte other than 0 and 1", count)

    array_shape = tuple(shape) if count == 1 else (count, *shape)
    array = np.ndarray(array_shape, info.numpy_carrier, buffer, offset)
    if copy or not array.flags.aligned:
        array = array.copy()  # copy=True, or a transport that handed us unaligned bytes
    tensor = torch.from_numpy(array)
    if info.needs_view:
        tensor = tensor.view(info.torch_dtype)
    if count == 1:
        return tensor
    return list(tensor.unbind(0))


def _has_non_boolean_byte(buffer: memoryview, offset: int, nbytes: int) -> bool:
    raw = np.frombuffer(buffer, dtype=np.uint8, count=nbytes, offset=offset)
    return bool((raw > 1).any())
