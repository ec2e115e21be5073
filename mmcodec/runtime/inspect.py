"""A captured message, described for people: what ``mmcodec inspect`` prints.

:func:`describe` turns frames into a JSON-ready tree: the frames, the envelope, the
tensor runs, the refs table (as runs of entries), one entry per tensor, and the body.
:func:`~mmcodec.runtime.inspect_text.render_text` lays that tree out as indented text,
the way ``protoc --decode_raw`` does.

Without a schema codec the body is shown by position, as msgpack (an int there may be
a number, a tensor reference or a back-reference: only the schema knows; a column list
is the map it travels as). With the
:class:`~mmcodec.runtime.codec.SchemaCodec` of the generated module that wrote the
message, the body is decoded with that module's wire types: fields and types by the
schema's names, tensors, back-references marked with the path of the value they repeat.

With a codec, the whole real decode runs first, so a message this describes is one the
decoder accepts, and any other raises :class:`DecodeError` with the decoder's own
message. Without one, the frames, the envelope, every tensor run and the refs table go
through the decoder's checks (:mod:`mmcodec.runtime.runs`), and the body is checked as
msgpack only (bounded in depth and size, extension types rejected). Nothing here imports
anything a message names, nor torch: a message shown by position needs none.

Bounded: the tree holds at most about ``max_output`` characters of text. Past that, each
list, mapping and struct still open ends with an ``{"$omitted": n}`` node and
``truncated`` is true; nothing past the budget is visited. Paths are spelled out only
where shown, once per value; long strings are cut to their first characters. So work
and memory follow the message's size (the decode's own bounds) plus the budget's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from mmcodec.runtime import framing, runs
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.inspect_body import (
    ROOT,
    Budget,
    RawBody,
    SchemaNames,
    TensorTable,
    TypedBody,
    bounded,
    check_raw,
)
from mmcodec.runtime.inspect_text import render_text
from mmcodec.runtime.inspect_values import first_values
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits
from mmcodec.runtime.nesting import refuse_deep_nesting
from mmcodec.runtime.wire import Envelope, EnvelopeHead, TensorRun, check_format

if TYPE_CHECKING:
    from mmcodec.runtime.codec import SchemaCodec

__all__ = ["DEFAULT_MAX_OUTPUT", "describe", "render_text"]

DEFAULT_MAX_OUTPUT = 1 << 20
"""Characters of text (about as many of indented JSON) a description holds at most."""

_VALUE_CHARS = 24
"""About the characters one tensor value takes when printed."""
_HEAD = msgspec.msgpack.Decoder(EnvelopeHead)
_ENVELOPE = msgspec.msgpack.Decoder(Envelope)


def _refuse_extension(code: int, data: memoryview) -> Any:
    raise DecodeError(f"msgpack extension type {code} in the message body")


_RAW_BODY = msgspec.msgpack.Decoder(ext_hook=_refuse_extension)


def describe(
    frames: Sequence[Any],
    codec: SchemaCodec | None = None,
    *,
    limits: Limits = DEFAULT_LIMITS,
    values: int = 0,
    max_output: int = DEFAULT_MAX_OUTPUT,
) -> dict[str, Any]:
    """The message in ``frames`` as a JSON-ready tree; raises only DecodeError.

    ``codec`` names fields and types (it must serve the message's schema and major
    version); ``values`` > 0 adds the first that many values of each tensor;
    ``max_output`` bounds the tree (in characters of text, see the module's docstring).

    The tree has ``frames``, ``envelope``, ``runs``, ``refs`` (the refs table as runs:
    ``{"first", "count", "step"}`` stands for ``count`` entries ``first``, ``first +
    step``, ...; empty when references are positions), ``tensors`` (one entry per
    tensor of the runs, numbered in run order), ``body_type`` (None without a codec),
    ``body`` and ``truncated``. A tensor entry's ``values`` stop where the budget does
    (``values_omitted`` says how many more were asked for). Body nodes are JSON scalars,
    lists, or objects with one ``$`` key saying what they are: ``{"$struct": name,
    "fields": {...}}``, ``{"$dict": [[key, value], ...], "$type"?}``, ``{"$tuple": [...]}``,
    ``{"$tensor": number, "dtype", "shape", "again"?: first path}``, ``{"$ref": type,
    "index", "to": path}`` (a back-reference), ``{"$slice": [start, stop, step]}``,
    ``{"$bytes": length, "hex": leading bytes}``, ``{"$str": leading characters,
    "length"}`` (a long string) and ``{"$omitted": count}`` (entries past the budget; in
    a struct's fields, the ``"$omitted"`` key). Non-finite floats are the strings
    ``"nan"``, ``"inf"``, ``"-inf"``.

    A list that travelled as a column list (wire version 3) is ``{"$columns": item type,
    "count", "present", "absent": [{"first", "count"}, ...], "columns": [...]}``: the
    absent (None) items' positions as runs of consecutive ones, then per key its column,
    ``{"key", "$values": type, "values": [...]}`` or ``{"key", "$fields": type, "fields":
    {field: [...]}}``, each list one node per present item, in item order (a field
    column that a message of an older schema lacks is ``{"$default": present}``: every
    item takes the field's default). Paths in
    ``to`` and ``again`` are those of rows (``$['image'][3]['pixel_values'].data``).
    """
    try:
        views = framing.as_byte_views(frames, limits)
        return _describe(views, codec, limits, values, Budget(max_output))
    except DecodeError:
        raise
    except RecursionError:
        raise DecodeError("message nested too deeply") from None
    except Exception as e:  # the decoder's contract, kept here too
        raise DecodeError(f"rejected ({e.__class__.__name__}: {e})") from e


def _describe(
    views: list[memoryview],
    codec: SchemaCodec | None,
    limits: Limits,
    values: int,
    budget: Budget,
) -> dict[str, Any]:
    envelope = _envelope(views[0])
    named = None
    if codec is not None:
        if envelope.schema != codec.schema or envelope.major != codec.major:
            raise DecodeError(
                f"message is from schema {envelope.schema!r} major version {envelope.major}; "
                f"the module reads schema {codec.schema!r} major version {codec.major}"
            )
        named = next((t for t in codec.types if t.name == envelope.root), None)
        if named is None:
            raise DecodeError(f"schema {codec.schema!r} has no type {envelope.root!r}")
        # The whole real decode: whatever it rejects, inspect rejects with its message.
        codec.decode(views, named.python_type, limits=limits)
    layouts, total = runs.check_runs(envelope.tensors, views, limits)
    runs.check_refs(envelope.refs, layouts, total, limits)
    if codec is None or named is None:
        raw = _raw_body(envelope.body)
        check_raw(raw, limits)  # all of it, before only a part may be shown

        def make_body() -> Any:
            return RawBody(budget).node(raw, 1)

    else:
        wire = named.decoder.decode(envelope.body)  # the real decode accepted it
        shapes = [(run.dtype, list(run.shape), run.count) for run in envelope.tensors]
        names = SchemaNames((t.name, t.wire_type) for t in codec.types)
        typed = TypedBody(names, TensorTable(envelope.refs, shapes), budget)
        wire_type = named.wire_type

        def make_body() -> Any:
            return typed.node(wire, wire_type, ROOT, 1)

    described: dict[str, Any] = {
        "frames": bounded(
            budget, len(views), enumerate(views), lambda entry: _frame_entry(entry, budget)
        ),
        "envelope": {
            "wire_version": envelope.wire_version,
            "schema": envelope.schema,
            "major": envelope.major,
            "root": envelope.root,
        },
        "runs": bounded(
            budget,
            len(layouts),
            enumerate(zip(envelope.tensors, layouts, strict=True)),
            lambda entry: _run_entry(entry, budget),
        ),
        "refs": _ref_runs(envelope.refs, budget),
        "tensors": bounded(
            budget, total, _positions(layouts), lambda at: _tensor_entry(at, values, budget)
        ),
        "body_type": None if named is None else named.name,
    }
    described["body"] = budget.omitted(1) if budget.exhausted else make_body()
    described["truncated"] = budget.spent_out
    return described


def _envelope(header: memoryview) -> Envelope:
    """The envelope with its body left raw; the codec's messages for a bad one."""
    refuse_deep_nesting(header)
    try:
        head = _HEAD.decode(header)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"frame 0 is not an mmcodec header ({e})") from None
    check_format(head)
    try:
        return _ENVELOPE.decode(header)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed envelope: {e}") from None


def _raw_body(body: msgspec.Raw) -> Any:
    try:
        return _RAW_BODY.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed message body: {e}") from None


def _frame_entry(entry: tuple[int, memoryview], budget: Budget) -> dict[str, Any]:
    number, view = entry
    budget.spend(0, 16)
    return {"frame": number, "bytes": view.nbytes, "role": "header" if number == 0 else "payload"}


def _run_entry(
    entry: tuple[int, tuple[TensorRun, runs.RunLayout]], budget: Budget
) -> dict[str, Any]:
    number, (run, (dtype, shape, count, _, _)) = entry
    out: dict[str, Any] = {
        "run": number,
        "dtype": dtype.name,
        "shape": list(shape),
        "count": count,
        "bytes": dtype.itemsize * math.prod(shape) * count,
    }
    if type(run.data) is int:
        out.update(frame=run.data, offset=run.offset)
    else:
        out.update(inline=True)
    budget.spend(1, 48 + 8 * len(shape))
    return out


def _ref_runs(refs: list[int], budget: Budget) -> list[dict[str, int]]:
    """The refs table as runs of equal (step 0) or consecutive (step 1) entries."""
    out: list[dict[str, int]] = []
    n = len(refs)
    i = 0
    while i < n:
        if budget.exhausted:
            out.append(budget.omitted(n - i))
            break
        first = refs[i]
        j = i + 1
        step = 0
        if j < n and refs[j] - first in (0, 1):
            step = refs[j] - first
            previous = refs[j]
            j += 1
            while j < n and refs[j] - previous == step:
                previous = refs[j]
                j += 1
        out.append({"first": first, "count": j - i, "step": step})
        budget.spend(1, 24)
        i = j
    return out


_Position = tuple[int, int, int, runs.RunLayout]
"""A tensor of the runs: (its number, its run, its index in the run, the run's layout)."""


def _positions(layouts: list[runs.RunLayout]) -> Iterator[_Position]:
    """Every tensor of the runs, in order."""
    tensor = 0
    for number, layout in enumerate(layouts):
        for index in range(layout[2]):
            yield tensor, number, index, layout
            tensor += 1


def _tensor_entry(at: _Position, values: int, budget: Budget) -> dict[str, Any]:
    tensor, run, index, (dtype, shape, _, buffer, offset) = at
    entry: dict[str, Any] = {
        "tensor": tensor,
        "run": run,
        "index": index,
        "dtype": dtype.name,
        "shape": list(shape),
    }
    text = 40 + 8 * len(shape)
    if values > 0:
        numel = math.prod(shape)
        start = offset + index * numel * dtype.itemsize
        # As many as the budget has room for: --tensors N is the user's, N can be large.
        n = min(values, max(1, budget.left // _VALUE_CHARS))
        entry["values"] = first_values(dtype, buffer, start, numel, n)
        text += _VALUE_CHARS * len(entry["values"])
        left_out = min(values, numel) - len(entry["values"])
        if left_out > 0:
            entry["values_omitted"] = left_out
            budget.spent_out = True
    budget.spend(1, text)
    return entry
