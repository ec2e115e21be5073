"""A message's tensor runs and reference table checked against its frames, without torch.

The checks of docs/security.md's step 4, building nothing: what ``mmcodec inspect`` applies
to a message it shows without a schema module, where torch need not be installed. The
decoder applies the same checks on its hot path, with torch's dtype table
(:func:`mmcodec.runtime.tensors.check_runs` and ``check_refs``);
``tests/codegen/test_inspect_without_torch.py`` holds both to the same verdicts and messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.wire import TensorRun
from mmcodec.runtime.wire_dtypes import WIRE_DTYPES, WireDtype

_MAX_DIM = (1 << 63) - 1


RunLayout = tuple[WireDtype, tuple[int, ...], int, memoryview, int]
"""A run that passed every check: (dtype, shape of one tensor, tensor count, buffer, byte
offset), as :data:`mmcodec.runtime.tensors.Layout` with the wire's dtype."""


class RunError(DecodeError):
    """A run failed validation (the message names the run)."""


def check_runs(
    runs: list[TensorRun], frames: Sequence[memoryview], limits: Limits
) -> tuple[list[RunLayout], int]:
    """Validate every run against the frames, building nothing. Returns (layouts, tensors).

    ``frames`` are byte-format memoryviews, the header first.
    """
    n_frames = len(frames)
    layouts: list[RunLayout] = []
    total = 0
    # A header of n bytes references at most n tensors (see tensors.check_runs).
    max_tensors = min(limits.max_tensors, limits.max_elements, frames[0].nbytes)
    unused = 1
    for index, run in enumerate(runs):
        try:
            layout = _check_run(run, frames, limits, max_tensors - total)
        except RunError as e:
            raise RunError(f"{e.message} (tensor run {index})") from None
        layouts.append(layout)
        total += layout[2]
        if type(run.data) is int and run.data == unused:
            unused += 1
    if unused < n_frames:
        used = [False] * n_frames
        for run in runs:
            if type(run.data) is int:
                used[run.data] = True  # in range: every run passed _check_run
        if not all(used[1:]):
            raise DecodeError(f"frame {used.index(False, 1)} is not referenced by any tensor")
    return layouts, total


def check_refs(refs: list[int], layouts: list[RunLayout], total: int, limits: Limits) -> int:
    """Check the reference table; return the number of tensor references the body may use."""
    if not refs:
        return total
    if len(refs) > limits.max_elements:
        raise DecodeError(
            f"tensor reference table of {len(refs)} entries exceeds the limit of "
            f"{limits.max_elements}"
        )
    if min(refs) < 0 or max(refs) >= total:
        bad = next(ref for ref in refs if not 0 <= ref < total)
        raise DecodeError(f"tensor reference table points at tensor {bad} ({total} tensors)")
    if len(set(refs)) != total:
        seen = set(refs)
        missing = next(position for position in range(total) if position not in seen)
        raise DecodeError(
            f"no entry of the tensor reference table points at tensor {missing} "
            f"(tensor run {_run_of(layouts, missing)})"
        )
    return len(refs)


def _run_of(layouts: list[RunLayout], position: int) -> int:
    end = 0
    for index, layout in enumerate(layouts):
        end += layout[2]
        if position < end:
            return index
    return len(layouts)  # pragma: no cover - positions are in range


def _check_run(
    run: TensorRun, frames: Sequence[memoryview], limits: Limits, room: int
) -> RunLayout:
    count = run.count
    info = WIRE_DTYPES.get(run.dtype)
    if info is None:
        raise RunError(f"unknown dtype {run.dtype!r}")
    if not 1 <= count <= room:
        raise RunError(
            f"tensor count {count} outside 1..{room} (a message holds at most "
            "max_tensors and max_elements tensors, and one per byte of its header)"
        )
    shape = run.shape
    if len(shape) > limits.max_ndim:
        raise RunError(f"{len(shape)} dimensions exceed the limit of {limits.max_ndim}")
    nbytes = info.itemsize * count
    for dim in shape:
        if not 0 <= dim <= _MAX_DIM:
            raise RunError(f"shape entry {dim} is not a non-negative int64")
        nbytes *= dim  # Python ints: no overflow; the checks below bound it
    if nbytes > _MAX_DIM or (not nbytes and _extent(info, count, shape) > _MAX_DIM):
        raise RunError(f"shape {list(shape)} of {info.name} spans 2**63 bytes or more")
    data = run.data
    if type(data) is int:
        if not 1 <= data < len(frames):
            raise RunError(f"frame {data} out of range ({len(frames)} frames)")
        buffer = frames[data]
        offset = run.offset
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise RunError(
                f"payload of {nbytes} bytes at offset {offset} overruns frame {data} "
                f"({buffer.nbytes} bytes)"
            )
    else:
        buffer = data  # type: ignore[assignment]
        offset = 0
        if run.offset != 0 or buffer.nbytes != nbytes:
            raise RunError(
                f"inline payload holds {buffer.nbytes} bytes, shape {list(shape)} of "
                f"{info.name} needs {nbytes}"
            )
    if info.name == "bool" and nbytes and _has_non_boolean_byte(buffer, offset, nbytes):
        raise RunError("bool payload holds a byte other than 0 and 1")
    return info, tuple(shape), count, buffer, offset


def _extent(info: WireDtype, count: int, shape: list[int]) -> int:
    """The bytes a shape with a zero in it would span without its zeros (numpy refuses a
    shape whose extent reaches 2**63, bytes or not; the decoder builds with numpy)."""
    extent = info.itemsize * count
    for dim in shape:
        if dim:
            extent *= dim
    return extent


_CHUNK = 1 << 20


def _has_non_boolean_byte(buffer: memoryview, offset: int, nbytes: int) -> bool:
    """Whether any byte is neither 0 nor 1: ``bytes.translate`` deletes those two in C, a
    chunk at a time (no numpy to import, at most 1 MiB copied at once)."""
    end = offset + nbytes
    for start in range(offset, end, _CHUNK):
        if bytes(buffer[start : min(start + _CHUNK, end)]).translate(None, b"\0\1"):
            return True
    return False
