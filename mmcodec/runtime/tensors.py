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

import bisect
import ctypes
import itertools
import operator
import sys
import threading
import warnings
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from mmcodec.runtime.dtypes import BY_NAME, BY_TORCH, DtypeInfo
from mmcodec.runtime.errors import DecodeError, EncodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits
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
_Tensor = torch.Tensor
_is = operator.is_
_repeat = itertools.repeat


def _prime_readonly_warning() -> None:
    # torch warns once per process when it wraps a read-only buffer. Decoded tensors
    # view read-only frames by design (docs/codec.md#memory-who-owns-what), so the
    # warning carries no information: spend its one shot here, where it is silenced.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.from_numpy(np.frombuffer(b"\0" * 8, dtype=np.uint8))
        # Likewise torch warns once when it first allocates a complex32 tensor, which
        # the encoder does when it makes a non-contiguous complex32 tensor contiguous.
        torch.empty(0, dtype=torch.complex32)


_prime_readonly_warning()


_TABLES_LOCK = threading.Lock()
_tables_reserved = 0


def reserve_tables(count: int) -> int:
    """Reserve ``count`` per-message tables; return the index of the first.

    A generated module calls this once, at import, for the types whose values can travel
    once (unions, shared structs): their tables are ``ctx.tables[index]``, a list index
    instead of a dict lookup on every value. Indices are unique across modules, because
    a module's rebuild functions also run with the contexts of modules that import it.
    A context has a table for every index reserved when it is made: the modules whose
    functions it reaches were imported, with the module that makes it, before.
    """
    global _tables_reserved
    with _TABLES_LOCK:  # imports of two modules can run in two threads
        first = _tables_reserved
        _tables_reserved += count
    return first


class _Tables:
    """The per-message tables of a context. Each context's ``__init__`` sets ``tables`` to
    ``[None] * _tables_reserved`` (inline: a call to a shared ``__init__`` costs more)."""

    __slots__ = ("_shared", "tables")
    tables: list[Any]
    """Per reserved table: None until the message's first value of its type."""
    _new_table: ClassVar[type]

    @property
    def shared(self) -> Any:
        """Per type name, its table: what modules generated for runtime API level 1 use."""
        try:
            return self._shared
        except AttributeError:
            self._shared: Any = defaultdict(self._new_table)
            return self._shared


class EncodeContext(_Tables):
    """Per-call encoder state: the tensors referenced so far, deduplicated by identity.

    Its tables map id(value) to the back-reference (to the value's index among its type's
    values sent so far) that later occurrences send instead of the value. Each type numbers
    its own values, so a back-reference can never name a value of another type. Ids are
    stable: the object being encoded keeps every value alive.
    """

    __slots__ = ("columns", "columns_used", "hints", "ids", "max_depth", "tensors")
    _new_table = dict

    def __init__(self, max_depth: int, columns: bool = True) -> None:
        self.tables = [None] * _tables_reserved
        self.tensors: list[torch.Tensor] = []
        self.ids: dict[int, int] = {}
        """id(tensor) -> its reference; the list of tensors keeps every id unique."""
        self.max_depth = max_depth
        self.columns = columns
        """Whether item lists may travel as columns (see mmcodec.runtime.columns)."""
        self.columns_used = False
        """Whether one did: the message then needs wire version 3."""
        self.hints: list[tuple[int, int]] = []
        """(first reference, count) of tensors registered together (:meth:`fresh_refs`):
        a column of a batch's views, which the planner tries as one run first."""

    def ref(self, value: object) -> int:
        """Register a tensor and return its reference (the same one for the same object)."""
        ref = self.ids.get(id(value))
        if ref is None:
            # type() first: isinstance() against torch.Tensor goes through its metaclass.
            if type(value) is not _Tensor and not isinstance(value, torch.Tensor):
                raise EncodeError(f"expected a tensor, got {type(value).__name__}")
            ref = len(self.tensors)
            self.ids[id(value)] = ref  # the list below keeps the object, so its id stays unique
            self.tensors.append(value)
        return ref

    def fresh_refs(self, values: Sequence[object]) -> list[Any] | None:
        """Register ``values`` as consecutive references, if they are distinct tensors
        (exactly ``torch.Tensor``) none of which is registered yet; their references, or
        None (and nothing registered). C-level passes instead of a call per tensor."""
        if not all(map(_is, map(type, values), _repeat(_Tensor))):
            return None
        ids = list(map(id, values))
        known = self.ids
        if not known.keys().isdisjoint(ids):
            return None
        before, first = len(known), len(self.tensors)
        refs = range(first, first + len(ids))
        known.update(zip(ids, refs, strict=True))
        if len(known) != before + len(ids):  # one tensor twice: undo, they go one by one
            for key in ids:
                known.pop(key, None)
            return None
        self.tensors.extend(values)  # type: ignore[arg-type]
        self.hints.append((first, len(ids)))
        return list(refs)


class TensorEncodeError(EncodeError):
    """The planner rejected tensor ``ref``; the codec re-runs the rebuild to find its path."""

    def __init__(self, message: str, ref: int) -> None:
        super().__init__(message)
        self.ref = ref


class LocateContext(EncodeContext):
    """Re-runs an encode as rows and fails where ``tensor`` (the one the planner refused)
    is first referenced; the rebuild's error handling adds its path."""

    __slots__ = ("error", "tensor")

    def __init__(self, error: TensorEncodeError, tensor: object, max_depth: int) -> None:
        super().__init__(max_depth, columns=False)  # rows: every reference has its own path
        self.error = error
        self.tensor = tensor

    def ref(self, value: object) -> int:
        if value is self.tensor:
            raise EncodeError(self.error.message)
        return super().ref(value)


def _normalize(t: torch.Tensor) -> tuple[torch.Tensor, DtypeInfo]:
    """Make a tensor a contiguous CPU strided tensor with a wire dtype, or explain why not."""
    if t.is_nested:  # torch.nested, whose default layout claims to be strided
        raise EncodeError("nested tensors (torch.nested) are not supported; send a list of tensors")
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


def plan_payloads(
    tensors: Sequence[torch.Tensor],
    inline_threshold: int,
    limits: Limits = DEFAULT_LIMITS,
    hints: Sequence[tuple[int, int]] = (),
) -> tuple[list[TensorRun], list[int], list[Frame]]:
    """Lay tensors out as runs and frames. Returns (runs, refs, frames after the header).

    What a receiver with ``limits`` checks of the tensors, this checks first (as a
    :class:`TensorEncodeError` naming the tensor): their number, their dimensions, and
    that bool payloads hold only 0 and 1. Per run, not per tensor, where it can.

    This runs once per distinct tensor, so it reads each tensor's metadata once and
    keeps per-tensor work to plain tuples (torch attribute reads cost ~50 ns each).
    ``hints`` are (first reference, count) of tensors registered together, a column of a
    batch's views (:meth:`EncodeContext.fresh_refs`): each is tried as one run first, its
    metadata read in C-level passes.
    """
    most, name = limits.max_tensors, "max_tensors"
    if limits.max_elements < most:  # not min(): its argument parsing costs more
        most, name = limits.max_elements, "max_elements"
    if len(tensors) > most:
        raise TensorEncodeError(
            f"a message of more than {most} tensors exceeds the receiver's limit ({name})",
            most,
        )
    # 1. Each tensor as a contiguous CPU tensor of a wire dtype, where its bytes lie; each
    #    hinted column as one unit when every one of them is a batch's back-to-back views.
    placed = _with_units(tensors, hints, limits.max_ndim) if hints else None
    if placed is not None:
        if _apart(placed):
            return _one_run_per_unit(placed, inline_threshold, limits.max_ndim)
        placed = _each_tensor(placed, tensors)
    else:
        placed = []
        _place(tensors, 0, len(tensors), placed)
        if _apart(placed):
            return _one_run_per_unit(placed, inline_threshold, limits.max_ndim)

    # 2. Group by (storage address, dtype): the candidates for runs.
    groups: dict[tuple[int, str], list[tuple[int, int, torch.Tensor, torch.Size]]] = {}
    for address, _, ref, t, info, shape, _ in placed:
        # Where the storage starts, without untyped_storage(), which makes a Python object.
        # (An int for the CPU tensors placed here: only symbolic tracing gives a SymInt.)
        base: int = address - t.storage_offset() * info.itemsize  # type: ignore[assignment]
        key = (base, info.name)
        members = groups.get(key)
        if members is None:
            groups[key] = [(address - base, ref, t, shape)]
        else:
            members.append((address - base, ref, t, shape))

    # 3. Split each group into runs of back-to-back tensors; equal placement = one tensor.
    runs: list[_Run] = []
    alias: dict[int, int] = {}  # ref -> ref of the tensor with the same bytes and layout
    for (address, name), members in groups.items():
        members.sort()  # by start, then ref (unique): tensors are never compared
        info = BY_NAME[name]
        run = _Run(address, info, members[0])
        last_start, last_ref = members[0][0], members[0][1]
        for member in members[1:]:
            start = member[0]
            if start == last_start + run.nbytes and member[3] == run.shape and run.nbytes:
                run.members.append(member)  # the next tensor of a batch: the common case
                run.end += run.nbytes
            elif start == last_start and member[3] == run.shape:
                alias[member[1]] = last_ref  # the same bytes and layout (or both empty)
                continue
            else:
                runs.append(run)
                run = _Run(address, info, member)
            last_start, last_ref = start, member[1]
        runs.append(run)

    # 4. Number tensors in run order, so that the decoder can build them run by run.
    position_of_ref = [0] * len(tensors)
    position = 0
    identity = not alias
    for run in runs:
        for _, ref, _, _ in run.members:
            position_of_ref[ref] = position
            identity = identity and ref == position
            position += 1
    for ref, same in alias.items():
        position_of_ref[ref] = position_of_ref[same]

    # 5. One frame per contiguous byte range of a storage; small ranges go inline.
    frames: list[Frame] = []
    by_storage: dict[int, list[_Run]] = {}
    for run in runs:
        by_storage.setdefault(run.address, []).append(run)
    for storage_runs in by_storage.values():
        storage_runs.sort(key=_run_start)
        region = [storage_runs[0]]
        end = storage_runs[0].end
        for run in storage_runs[1:]:
            if run.start <= end:  # overlapping or touching: the same region
                region.append(run)
                end = max(end, run.end)
            else:
                _place_region(region, inline_threshold, frames)
                region, end = [run], run.end
        _place_region(region, inline_threshold, frames)

    max_ndim = limits.max_ndim
    for run in runs:
        if len(run.shape) > max_ndim or run.info is _BOOL:
            _check_leaf(run.members, run.info, max_ndim)
    wire_runs = [
        TensorRun(run.info.name, list(run.shape), run.data, run.offset, len(run.members))
        for run in runs
    ]
    return wire_runs, [] if identity else position_of_ref, frames


_Placed = tuple[int, int, int, torch.Tensor, DtypeInfo, torch.Size, int]
"""A unit as the planner sees it: (address, bytes, first reference, first tensor, dtype,
shape of one tensor, count): one tensor, or a hinted column of ``count`` back-to-back
tensors of one storage (references ``first`` to ``first + count - 1``)."""


def _place(tensors: Sequence[torch.Tensor], start: int, end: int, placed: list[_Placed]) -> None:
    """Append tensors ``start`` to ``end - 1`` as units of one."""
    for ref in range(start, end):
        t = tensors[ref]
        info = BY_TORCH.get(t.dtype)
        try:
            if info is not None and t.is_cpu and t.is_contiguous():
                placed.append((t.data_ptr(), t.nbytes, ref, t, info, t.shape, 1))
                continue
        except (RuntimeError, NotImplementedError):
            pass  # sparse and nested layouts raise: _normalize says what is wrong
        try:
            t, info = _normalize(t)
        except EncodeError as e:
            raise TensorEncodeError(e.message, ref) from None
        placed.append((t.data_ptr(), t.nbytes, ref, t, info, t.shape, 1))


_IS_CPU = operator.attrgetter("is_cpu")
_DTYPE = operator.attrgetter("dtype")
_SHAPE = operator.attrgetter("shape")
_IS_CONTIGUOUS = torch.Tensor.is_contiguous
_DATA_PTR = torch.Tensor.data_ptr


def _with_units(
    tensors: Sequence[torch.Tensor], hints: Sequence[tuple[int, int]], max_ndim: int
) -> list[_Placed] | None:
    """The tensors placed with each hinted column as one unit, or None as soon as one is
    not (a unit pays only when every column is one: see :func:`_apart`)."""
    units: list[_Placed] = []
    for first, count in hints:
        unit = _column_unit(tensors, first, count, max_ndim)
        if unit is None:
            return None
        units.append(unit)
    placed: list[_Placed] = []
    start = 0
    for unit in units:
        _place(tensors, start, unit[2], placed)
        placed.append(unit)
        start = unit[2] + unit[6]
    _place(tensors, start, len(tensors), placed)
    return placed


def _column_unit(
    tensors: Sequence[torch.Tensor], first: int, count: int, max_ndim: int
) -> _Placed | None:
    """Tensors ``first`` to ``first + count - 1`` as one unit, if they are contiguous CPU
    tensors of one wire dtype (not bool: its bytes are checked per tensor) and one shape,
    back to back in this order inside one storage; else None (they are placed one by one).

    The checks of :func:`_place`, each in one C-level pass over the column.
    """
    column = tensors[first : first + count]
    head = column[0]
    dtype, shape = head.dtype, head.shape
    info = BY_TORCH.get(dtype)
    if info is None or info is _BOOL or len(shape) > max_ndim:
        return None
    try:  # the last tensor first: a flat field's views differ in shape (~0.3 us a read)
        last = column[-1]
        if last.shape != shape or last.data_ptr() - head.data_ptr() != (count - 1) * (
            info.itemsize * _numel(shape)
        ):
            return None
        if list(map(_SHAPE, column)).count(shape) != count:
            return None
        if list(map(_DTYPE, column)).count(dtype) != count:
            return None
        if not (all(map(_IS_CPU, column)) and all(map(_IS_CONTIGUOUS, column))):
            return None
        addresses = list(map(_DATA_PTR, column))
    except (RuntimeError, NotImplementedError):
        return None
    nbytes = info.itemsize * _numel(shape)
    address = addresses[0]
    end = address + count * nbytes
    if not nbytes or addresses != list(range(address, end, nbytes)):
        return None
    # Storages can lie back to back: the frame must be inside the one that keeps it alive.
    storage = head.untyped_storage()
    base = storage.data_ptr()
    if address < base or end > base + storage.nbytes():
        return None
    return address, end - address, first, head, info, shape, count


def _each_tensor(placed: list[_Placed], tensors: Sequence[torch.Tensor]) -> list[_Placed]:
    """The units with each column split into its tensors (for the general layout)."""
    out: list[_Placed] = []
    for unit in placed:
        address, nbytes, first, _, info, shape, count = unit
        if count == 1:
            out.append(unit)
            continue
        size = nbytes // count
        for index in range(count):
            ref = first + index
            out.append((address + index * size, size, ref, tensors[ref], info, shape, 1))
    return out


def _apart(placed: list[_Placed]) -> bool:
    """Whether no two units' bytes overlap or touch (nor sit at one address, as empty
    tensors can): then nothing can be merged or sent once, whatever the storages."""
    if len(placed) == 1:
        return True
    ordered = sorted(placed, key=_address)
    end = -1
    for address, nbytes, _, _, _, _, _ in ordered:
        if address <= end or not nbytes:
            return False
        end = address + nbytes
    return True


_address = operator.itemgetter(0)


def _one_run_per_unit(
    placed: list[_Placed], inline_threshold: int, max_ndim: int
) -> tuple[list[TensorRun], list[int], list[Frame]]:
    """The common case: no unit's bytes touch another's.

    The general path's layout for such units (one run and one region each), numbered
    in reference order so that no refs table travels, with none of its bookkeeping and
    no storage lookups: this is most of the fixed cost of a message.
    """
    runs: list[TensorRun] = []
    frames: list[Frame] = []
    for address, nbytes, ref, tensor, info, shape, count in placed:
        if len(shape) > max_ndim or info is _BOOL:
            _check_leaf([(0, ref, tensor, shape)], info, max_ndim)  # units of one: see above
        if nbytes < inline_threshold:
            runs.append(TensorRun(info.name, list(shape), _copy_bytes(address, nbytes), 0, count))
        else:
            frames.append(_view_bytes(tensor, address, nbytes))
            runs.append(TensorRun(info.name, list(shape), len(frames), 0, count))
    return runs, [], frames


_BOOL = BY_NAME["bool"]


def _check_leaf(
    members: list[tuple[int, int, torch.Tensor, torch.Size]], info: DtypeInfo, max_ndim: int
) -> None:
    """Fail, naming the first bad tensor of a run, where a receiver's decoder would."""
    shape = members[0][3]
    if len(shape) > max_ndim:
        raise TensorEncodeError(
            f"{len(shape)} dimensions exceed the receiver's limit of {max_ndim} (max_ndim)",
            min(member[1] for member in members),
        )
    bad = [ref for _, ref, tensor, _ in members if _has_non_boolean_tensor(tensor)]
    if bad:  # possible: torch lets any byte be viewed as a bool
        raise TensorEncodeError("bool tensor holds a byte other than 0 and 1", min(bad))


def _has_non_boolean_tensor(tensor: torch.Tensor) -> bool:
    """Whether a contiguous CPU bool tensor holds a byte other than 0 and 1.

    numpy's SIMD maximum over the bytes, as the decoder checks them: torch's
    ``view(uint8).gt(1).any()`` allocates a temporary and costs about 30x more.
    """
    nbytes = tensor.nbytes
    if not nbytes:
        return False
    raw = np.frombuffer(_view_bytes(tensor, tensor.data_ptr(), nbytes), dtype=np.uint8)
    return bool(raw.max() > 1)


class _Run:
    """Back-to-back tensors of one storage, dtype and shape: one ``TensorRun``."""

    __slots__ = ("address", "data", "end", "info", "members", "nbytes", "offset", "shape", "start")

    def __init__(
        self, address: int, info: DtypeInfo, first: tuple[int, int, torch.Tensor, torch.Size]
    ) -> None:
        self.address = address
        self.info = info
        self.shape = first[3]
        self.nbytes = info.itemsize * _numel(self.shape)
        """Bytes of one tensor of the run."""
        self.members = [first]
        self.start = first[0]
        self.end = self.start + self.nbytes
        """Where the run's bytes end (the planner adds a tensor's bytes as it adds one)."""
        self.data: int | memoryview = 0
        self.offset = 0


_run_start = operator.attrgetter("start")


def _numel(shape: torch.Size) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _place_region(region: list[_Run], inline_threshold: int, frames: list[Frame]) -> None:
    """Make one storage region a frame (or inline it) and point its runs into it."""
    start = region[0].start
    end = max(run.end for run in region)
    if end == start:  # only empty tensors
        for run in region:
            run.data = memoryview(b"")
            run.offset = 0
        return
    owner = _owner(region, end)
    if end - start < inline_threshold:
        for run in region:
            run.data = _inline_bytes(owner, run.start, run.end - run.start)
        return
    frames.append(_byte_view(owner, start, end - start))
    for run in region:
        run.data = len(frames)
        run.offset = run.start - start


def _owner(region: list[_Run], end: int) -> torch.Tensor:
    """A tensor whose storage holds all of the region (storages can share an address)."""
    for run in region:
        for _, _, tensor, _ in run.members:
            if tensor.untyped_storage().nbytes() >= end:
                return tensor
    # Not reached: the run that ends last holds a tensor whose own storage reaches its end.
    raise EncodeError(  # pragma: no cover - see above
        "tensors share memory in a way the encoder cannot lay out"
    )


def _inline_bytes(owner: torch.Tensor, start: int, length: int) -> memoryview:
    """A copy of ``length`` bytes of ``owner``'s storage from ``start`` (in bounds: the
    caller planned the range inside the storage, and ``owner`` keeps it alive meanwhile)."""
    return _copy_bytes(owner.untyped_storage().data_ptr() + start, length)


def _copy_bytes(address: int, length: int) -> memoryview:
    """A copy of ``length`` bytes at ``address`` (which the caller keeps alive).

    A slice of a ``c_char`` array is a copy, as ``bytes``: about half the cost of
    ``ctypes.string_at``, a foreign-function call.
    """
    if not length:
        return memoryview(b"")
    copy: bytes = _AddressSpace.from_address(address)[:length]  # type: ignore[assignment]
    return memoryview(copy)


def _byte_view(owner: torch.Tensor, start: int, length: int) -> Frame:
    """``length`` bytes of ``owner``'s storage from ``start``, zero-copy; the view keeps
    the storage alive."""
    storage = owner.untyped_storage()
    return _view_bytes(storage, storage.data_ptr() + start, length)


def _view_bytes(owner: torch.Tensor | torch.UntypedStorage, address: int, length: int) -> Frame:
    """``length`` bytes at ``address`` inside ``owner``'s memory, zero-copy; the view keeps
    ``owner`` (and so the memory) alive.

    ctypes wraps the address as an array, sliced at once to ``length`` bytes: under half
    the cost of numpy's array interface and a fifth of any torch route (``Tensor.numpy``),
    which goes through the operator dispatcher. One array type of the largest size serves
    every length: ctypes keeps every array type it makes, so a type per length would leak.
    """
    if length == 0:
        return memoryview(b"")
    memory = _AddressSpace.from_address(address)
    memory.owner = owner  # ctypes objects take attributes; every view of it keeps owner
    return memoryview(memory)[:length].cast("B")


class _AddressSpace(ctypes.Array[ctypes.c_char]):
    """Bytes from an address onwards, as far as any tensor can reach: only ever sliced."""

    __slots__ = ("owner",)  # no per-frame __dict__
    _type_ = ctypes.c_char
    _length_ = 1 << 62
    owner: torch.Tensor | torch.UntypedStorage


class DecodeContext(_Tables):
    """Per-call decoder state: the message's tensors and the caller's limits.

    Its tables hold, per type, the values rebuilt so far, in the order they were first sent.
    """

    __slots__ = ("header_size", "limits", "tensors")
    _new_table = list

    def __init__(
        self, tensors: list[torch.Tensor], limits: Limits, header_size: int = sys.maxsize
    ) -> None:
        self.tables = [None] * _tables_reserved
        self.tensors = tensors
        self.limits = limits
        self.header_size = header_size
        """The header's length in bytes: a column list's items may not outnumber them."""

    @staticmethod
    def bad_back_reference(values: list[Any], index: int, union: str) -> DecodeError:
        return DecodeError(f"back-reference to {union} value {index}, but {len(values)} were sent")

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

    __slots__ = ()

    def __init__(
        self, error: RunError, refs: list[int], limits: Limits, header_size: int = sys.maxsize
    ) -> None:
        super().__init__(_Diagnose(error, refs), limits, header_size)  # type: ignore[arg-type]


class _Diagnose:
    """Stands in for the tensor list: indexing a tensor of the bad run raises its error."""

    def __init__(self, error: RunError, refs: list[int]) -> None:
        self.error = error
        self.refs = refs

    def __getitem__(self, ref: int) -> torch.Tensor:
        position = self.refs[ref] if self.refs and 0 <= ref < len(self.refs) else ref
        if self.error.first <= position <= self.error.last:
            raise DecodeError(self.error.message)
        return _PLACEHOLDER

    def __len__(self) -> int:  # pragma: no cover - only asked after an IndexError, never raised
        return len(self.refs) if self.refs else self.error.last + 1


_PLACEHOLDER = torch.empty(0)


class DryContext(DecodeContext):
    """A rebuild with stand-ins (of the right dtype and shape) that records which tensors
    the body uses, before any is built.

    A large message builds only those: tensors that no value of the body reaches (declared
    by a header padded to afford them, or held by fields this older decoder does not know)
    cost nothing. :attr:`reached` holds, per position among the runs' tensors, 1 if used.
    """

    __slots__ = ()

    def __init__(
        self,
        layouts: list[Layout],
        refs: list[int],
        total: int,
        limits: Limits,
        header_size: int = sys.maxsize,
    ) -> None:
        super().__init__(_Reach(layouts, refs, total), limits, header_size)  # type: ignore[arg-type]

    @property
    def reached(self) -> bytearray:
        return self.tensors.reached  # type: ignore[attr-defined, no-any-return]


class _Reach:
    """Stands in for the tensor list: returns a stand-in and records the position used."""

    def __init__(self, layouts: list[Layout], refs: list[int], total: int) -> None:
        self.positions: list[int] | range = refs or range(total)
        self.starts: list[int] = []  # per run, the position of its first tensor
        self.stand_ins: list[torch.Tensor] = []  # per run (not per tensor: memory)
        start = 0
        for info, shape, count, _, _ in layouts:
            self.starts.append(start)
            start += count
            self.stand_ins.append(torch.zeros((), dtype=info.torch_dtype).expand(shape))
        self.reached = bytearray(total)

    def __getitem__(self, ref: int) -> torch.Tensor:
        position = self.positions[ref]  # IndexError: the caller reports the bad reference
        self.reached[position] = 1
        return self.stand_ins[bisect.bisect_right(self.starts, position) - 1]

    def __len__(self) -> int:
        return len(self.positions)


Layout = tuple[DtypeInfo, tuple[int, ...], int, memoryview, int]
"""A run that passed every check, as what building its tensors needs and nothing else:
(dtype, shape of one tensor, tensor count, buffer, byte offset). A plain tuple: a message's
fixed cost is mostly per-object Python work, and a tuple is the cheapest record there is."""


EAGER_TENSORS = 1024
"""Messages of at most this many tensors build them all; larger ones first rebuild their body
with a :class:`DryContext` and build only the tensors it uses. So a message holds at most 1,024
tensors (about 1 MB, a few ms) that no value uses, and never more than one per header byte."""


def check_runs(
    runs: list[TensorRun], frames: Sequence[memoryview], limits: Limits
) -> tuple[list[Layout], int]:
    """Validate every run against the frames, building nothing. Returns (layouts, tensors).

    ``frames`` are byte-format memoryviews, the header first. Raises ``RunError``
    for a bad run (so the caller can find the path of a value that uses it) and
    :class:`DecodeError` for problems that belong to the message as a whole.
    """
    n_frames = len(frames)
    layouts: list[Layout] = []
    total = 0
    # Every tensor is referenced from the header by at least one byte (a bare int in the
    # body, or an entry of the refs table), so a header of n bytes holds at most n
    # tensors: a few bytes cannot ask for a million empty tensors. That every one is
    # in fact referenced is checked before (or, for small messages, while) they are used.
    # (Comparisons, not min(): a builtin's argument parsing costs more than the check.)
    max_tensors = limits.max_tensors
    if limits.max_elements < max_tensors:
        max_tensors = limits.max_elements
    if frames[0].nbytes < max_tensors:
        max_tensors = frames[0].nbytes
    # Frames 1..unused-1 are used so far: encoders number frames in the order runs use
    # them, so one comparison per run proves that every frame is used.
    unused = 1
    for index, run in enumerate(runs):
        room = max_tensors - total
        try:
            layout = _check_run(run, frames, limits, room)
        except RunError as e:
            e.first = total
            # A run whose count is itself bad claims every position after it.
            e.last = total + e.count - 1 if 1 <= e.count <= room else 1 << 63
            e.message = f"{e.message} (tensor run {index})"
            raise
        layouts.append(layout)
        total += layout[2]
        data = run.data
        if type(data) is int and data == unused:
            unused += 1
    if unused < n_frames:
        _check_frames_used(runs, n_frames)
    return layouts, total


def _check_frames_used(runs: list[TensorRun], n_frames: int) -> None:
    """Fail for the first payload frame that no run uses (runs that use frames out of
    order, or skip one, take this path)."""
    used = [False] * n_frames
    for run in runs:
        if type(run.data) is int:
            used[run.data] = True  # in range: every run passed _check_run
    if not all(used[1:]):
        raise DecodeError(f"frame {used.index(False, 1)} is not referenced by any tensor")


def check_refs(refs: list[int], layouts: list[Layout], total: int, limits: Limits) -> int:
    """Check the reference table; return the number of tensor references the body may use."""
    if not refs:
        return total
    if len(refs) > limits.max_elements:
        raise DecodeError(
            f"tensor reference table of {len(refs)} entries exceeds the limit of "
            f"{limits.max_elements}"
        )
    if min(refs) < 0 or max(refs) >= total:  # two C loops instead of one check per entry
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


def _run_of(layouts: list[Layout], position: int) -> int:
    end = 0
    for index, layout in enumerate(layouts):
        end += layout[2]
        if position < end:
            return index
    return len(layouts)  # pragma: no cover - positions are in range


def build_tensors(
    layouts: list[Layout], copy: bool, reached: bytearray | None = None
) -> list[torch.Tensor]:
    """The tensors of checked runs: one numpy view and one torch call per run.

    With ``reached`` (see :class:`DryContext`), only the tensors at positions marked there
    are built; the others' places hold a placeholder that no value of the body uses.
    """
    out: list[torch.Tensor] = []
    for layout in layouts:
        info, shape, count, buffer, offset = layout
        if reached is not None:
            start = len(out)
            if reached.count(1, start, start + count) < count:
                _build_some(layout, copy, reached, start, out)
                continue
        if count == 1:
            out.append(_build(info, shape, buffer, offset, copy))
        else:
            out.extend(_build(info, (count, *shape), buffer, offset, copy).unbind(0))
    return out


def _build(
    info: DtypeInfo, shape: tuple[int, ...], buffer: memoryview, offset: int, copy: bool
) -> torch.Tensor:
    array = np.ndarray(shape, info.numpy_carrier, buffer, offset)
    if copy or not array.flags.aligned or (info.name in _OVER_ALIGNED and _misaligned(array, info)):
        array = array.copy()  # copy=True, or a transport that handed us unaligned bytes
    tensor = torch.from_numpy(array)
    if info.needs_view:
        tensor = tensor.view(info.torch_dtype)
    return tensor


def _build_some(
    layout: Layout, copy: bool, reached: bytearray, start: int, out: list[torch.Tensor]
) -> None:
    """A run the body uses only in part: one view per tensor used, a placeholder for the rest."""
    info, shape, count, buffer, offset = layout
    nbytes = info.itemsize
    for dim in shape:
        nbytes *= dim
    end = start + count
    position = reached.find(1, start, end)
    while position >= 0:
        out.extend(itertools.repeat(_PLACEHOLDER, position - len(out)))
        out.append(_build(info, shape, buffer, offset + (position - start) * nbytes, copy))
        position = reached.find(1, position + 1, end)
    out.extend(itertools.repeat(_PLACEHOLDER, end - len(out)))


def _check_run(run: TensorRun, frames: Sequence[memoryview], limits: Limits, room: int) -> Layout:
    count = run.count
    info = BY_NAME.get(run.dtype)
    if info is None:
        raise RunError(f"unknown dtype {run.dtype!r}", count)
    if not 1 <= count <= room:  # room is at most max_elements
        raise RunError(
            f"tensor count {count} outside 1..{room} (a message holds at most "
            "max_tensors and max_elements tensors, and one per byte of its header)",
            count,
        )
    shape = run.shape
    if len(shape) > limits.max_ndim:
        raise RunError(f"{len(shape)} dimensions exceed the limit of {limits.max_ndim}", count)
    nbytes = info.itemsize * count
    for dim in shape:
        if not 0 <= dim <= _MAX_DIM:
            raise RunError(f"shape entry {dim} is not a non-negative int64", count)
        nbytes *= dim  # Python ints: no overflow; the checks below bound it
    if nbytes > _MAX_DIM or (not nbytes and _extent(info, count, shape) > _MAX_DIM):
        raise RunError(f"shape {list(shape)} of {info.name} spans 2**63 bytes or more", count)
    data = run.data
    if type(data) is int:
        if not 1 <= data < len(frames):
            raise RunError(f"frame {data} out of range ({len(frames)} frames)", count)
        buffer = frames[data]
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
    if info is _BOOL and nbytes and _has_non_boolean_byte(buffer, offset, nbytes):
        raise RunError("bool payload holds a byte other than 0 and 1", count)
    return info, tuple(shape), count, buffer, offset


def _extent(info: DtypeInfo, count: int, shape: list[int]) -> int:
    """The bytes a shape with a zero in it would span without its zeros: numpy refuses a
    shape whose extent reaches 2**63, bytes or not."""
    extent = info.itemsize * count
    for dim in shape:
        if dim:
            extent *= dim
    return extent


_OVER_ALIGNED = frozenset({"complex64", "complex128"})
"""dtypes whose torch alignment (8, 16) exceeds numpy's (4, 8): ``flags.aligned`` is not enough.

Inline payloads view the header at any offset; a misaligned complex tensor can crash torch.
"""


def _misaligned(array: np.ndarray[Any, Any], info: DtypeInfo) -> bool:
    return bool(array.ctypes.data % info.itemsize)


def _has_non_boolean_byte(buffer: memoryview, offset: int, nbytes: int) -> bool:
    raw = np.frombuffer(buffer, dtype=np.uint8, count=nbytes, offset=offset)
    return bool(raw.max() > 1)  # a SIMD reduction, no temporary: ~6x faster than (raw > 1).any()
