"""The message pipeline every generated module shares: envelope, payloads, frames.

A generated module describes its schema with one :class:`SchemaCodec` (its name,
major version and, per named type, the wire struct and the two rebuild functions);
this module does everything that does not depend on the schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, NoReturn

import msgspec

from mmcodec.runtime import framing
from mmcodec.runtime.errors import DecodeError, EncodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits
from mmcodec.runtime.nesting import refuse_deep_nesting
from mmcodec.runtime.paths import (
    Key,
    counts_elements,
    locate_validation_error,
    locate_wire_steps,
)
from mmcodec.runtime.tensors import (
    DEFAULT_INLINE_THRESHOLD,
    EAGER_TENSORS,
    DecodeContext,
    DiagnoseContext,
    DryContext,
    EncodeContext,
    Frame,
    LocateContext,
    RunError,
    TensorEncodeError,
    build_tensors,
    check_refs,
    check_runs,
    plan_payloads,
)
from mmcodec.runtime.wire import (
    MAGIC,
    ROWS_WIRE_VERSION,
    WIRE_VERSION,
    Envelope,
    EnvelopeHead,
    TensorRun,
    check_format,
    typed_envelope,
)


@dataclass(frozen=True, slots=True)
class NamedType:
    """What the runtime needs to know about one named type of a schema."""

    name: str
    python_type: Any
    """The domain class (or, for a union, the object users pass as ``type``)."""
    wire_type: Any
    to_wire: Callable[[Any, EncodeContext], Any]
    from_wire: Callable[[Any, DecodeContext], Any]
    decoder: msgspec.msgpack.Decoder[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder", msgspec.msgpack.Decoder(self.wire_type))


class _EnvelopeOut(msgspec.Struct, array_like=True, gc=False):
    """The encoder's view of :class:`Envelope`: the body is a wire struct, not raw bytes."""

    magic: str
    wire_version: int
    schema: str
    major: int
    root: str
    tensors: list[TensorRun]
    refs: list[int]
    body: Any


_HEAD_DECODER = msgspec.msgpack.Decoder(EnvelopeHead)
_IN_BODY = re.compile(
    rf"^(?P<message>.*) - at `\$\[{len(msgspec.structs.fields(Envelope)) - 1}\](?P<rest>.*)`$",
    re.DOTALL,
)
"""A one-pass decode's error that lies in the body (the envelope's last entry)."""
_ENVELOPE_DECODER = msgspec.msgpack.Decoder(Envelope)
_ENCODER = msgspec.msgpack.Encoder()


def _check_frames(header_bytes: int, frames: list[Frame], limits: Limits) -> None:
    """The frame limits a receiver applies (framing.as_byte_views), applied before sending."""
    if header_bytes > limits.max_header_bytes:
        raise EncodeError(
            f"header of {header_bytes} bytes exceeds the receiver's limit of "
            f"{limits.max_header_bytes} (max_header_bytes)"
        )
    if len(frames) + 1 > limits.max_frames:
        raise EncodeError(
            f"{len(frames) + 1} frames exceed the receiver's limit of {limits.max_frames} "
            "(max_frames)"
        )
    total = header_bytes
    for frame in frames:
        total += frame.nbytes
    if total > limits.max_total_bytes:
        raise EncodeError(
            f"{total} bytes exceed the receiver's limit of {limits.max_total_bytes} "
            "(max_total_bytes)"
        )


def _check_container_lengths(header: bytes, named: NamedType, max_elements: int) -> None:
    """Fail, naming the value, if a container of the body holds more than ``max_elements``."""
    body = msgspec.msgpack.decode(header)[-1]
    stack: list[tuple[Any, tuple[int | Key, ...]]] = [(body, ())]
    while stack:
        value, steps = stack.pop()
        if isinstance(value, list):
            items: Any = enumerate(value)
        elif isinstance(value, dict):
            items = ((Key(key), item) for key, item in value.items())
        else:
            continue
        # Structs travel as arrays too: only containers count (as the receiver counts).
        if len(value) > max_elements and counts_elements(named.wire_type, body, list(steps)):
            path = locate_wire_steps(named.wire_type, body, list(steps))
            raise EncodeError(
                f"{len(value)} elements exceed the receiver's limit of {max_elements} "
                "(max_elements)",
                path.removeprefix("$"),
            )
        stack.extend((item, (*steps, key)) for key, item in items if isinstance(item, (list, dict)))


class SchemaCodec:
    """Encode and decode the named types of one schema. Holds no per-call state."""

    def __init__(self, schema: str, major: int, types: Sequence[NamedType]) -> None:
        self.schema = schema
        self.major = major
        self.types: tuple[NamedType, ...] = tuple(types)
        """The schema's named types, in the generated module's order (for tools)."""
        self._by_python_type = {t.python_type: t for t in types}
        self._decoding = {
            t.python_type: (
                t,
                msgspec.msgpack.Decoder(typed_envelope(schema, major, t.name, t.wire_type)),
            )
            for t in types
        }
        """Per type, itself and a decoder of a whole header holding one (identity and body,
        in one pass): one lookup per decode."""
        self._named_types = MappingProxyType({t.name: t.python_type for t in types})

    @property
    def named_types(self) -> Mapping[str, Any]:
        """Every named type by its schema name, in schema order (read-only)."""
        return self._named_types

    # -- encoding ---------------------------------------------------------------------

    def encode(
        self,
        obj: Any,
        *,
        type: Any = None,
        inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
        limits: Limits = DEFAULT_LIMITS,
    ) -> list[Frame]:
        """Encode ``obj``; an EncodeError (with the path) for what a receiver with ``limits``
        would reject: the sender checks every limit it can, with the receiver's defaults."""
        named = self._named_for_encode(obj, type)
        ctx = EncodeContext(limits.max_depth)
        try:
            body = named.to_wire(obj, ctx)
            runs, refs, frames = plan_payloads(ctx.tensors, inline_threshold, limits, ctx.hints)
        except TensorEncodeError as e:
            # Rebuild once more, failing at the bad tensor, to name the value that holds it.
            named.to_wire(obj, LocateContext(e, ctx.tensors[e.ref], limits.max_depth))
            raise EncodeError(e.message) from None  # pragma: no cover - the rebuild raised
        except RecursionError:
            raise EncodeError("value nested too deeply to encode") from None
        version = WIRE_VERSION if ctx.columns_used else ROWS_WIRE_VERSION
        envelope = _EnvelopeOut(
            MAGIC, version, self.schema, self.major, named.name, runs, refs, body
        )
        try:
            header = _ENCODER.encode(envelope)
        except (TypeError, ValueError, OverflowError) as e:  # e.g. an int beyond 64 bits
            raise EncodeError(f"cannot encode header: {e}") from None
        if len(header) > limits.max_elements:
            # Only a header this large can hold a container a receiver finds too long.
            # Columns hold no container longer than the rows they stand for, and rows
            # name the value: check the body as rows.
            if ctx.columns_used:
                rows = named.to_wire(obj, EncodeContext(limits.max_depth, columns=False))
                envelope.body = rows
                _check_container_lengths(_ENCODER.encode(envelope), named, limits.max_elements)
            else:
                _check_container_lengths(header, named, limits.max_elements)
        _check_frames(len(header), frames, limits)
        return [memoryview(header), *frames]

    def encode_bytes(
        self, obj: Any, *, type: Any = None, limits: Limits = DEFAULT_LIMITS
    ) -> bytearray:
        """Encode into one buffer: a frame table, then payloads 64-byte aligned."""
        buffer = framing.join(self.encode(obj, type=type, limits=limits))
        if len(buffer) > limits.max_total_bytes:
            raise EncodeError(
                f"buffer of {len(buffer)} bytes exceeds the receiver's limit of "
                f"{limits.max_total_bytes} (max_total_bytes)"
            )
        return buffer

    def _named_for_encode(self, obj: Any, explicit: Any) -> NamedType:
        if explicit is not None:
            named = self._by_python_type.get(explicit)
            if named is None:
                raise TypeError(f"{explicit!r} is not a type of schema {self.schema!r}")
            return named
        for cls in type(obj).__mro__:
            named = self._by_python_type.get(cls)
            if named is not None:
                return named
        raise EncodeError(
            f"{type(obj).__name__} is not a type of schema {self.schema!r}; "
            "pass type= to say which one it is"
        )

    # -- decoding ---------------------------------------------------------------------

    def decode(
        self,
        frames: Sequence[Any],
        type: Any,
        *,
        copy: bool = False,
        limits: Limits = DEFAULT_LIMITS,
    ) -> Any:
        decoding = self._decoding.get(type)
        if decoding is None:
            raise TypeError(f"{type!r} is not a type of schema {self.schema!r}")
        named, envelope_decoder = decoding
        try:
            views = framing.as_byte_views(frames, limits)
            return self._decode_views(views, named, envelope_decoder, copy, limits)
        except DecodeError:
            raise
        except RecursionError:
            raise DecodeError("message nested too deeply") from None
        except Exception as e:  # the contract: nothing but DecodeError escapes
            # e.__class__, not type(e): the parameter ``type`` shadows the builtin here.
            raise DecodeError(f"rejected ({e.__class__.__name__}: {e})") from e

    def decode_bytes(
        self,
        buffer: Any,
        type: Any,
        *,
        copy: bool = False,
        limits: Limits = DEFAULT_LIMITS,
    ) -> Any:
        try:
            frames = framing.split(buffer, limits)
        except DecodeError:
            raise
        except Exception as e:
            raise DecodeError(f"rejected buffer ({e.__class__.__name__}: {e})") from e
        return self.decode(frames, type, copy=copy, limits=limits)

    def _decode_views(
        self,
        views: list[memoryview],
        named: NamedType,
        envelope_decoder: msgspec.msgpack.Decoder[Any],
        copy: bool,
        limits: Limits,
    ) -> Any:
        header = views[0]
        refuse_deep_nesting(header)  # before msgspec recurses, whatever the recursion limit
        try:
            # Checks the message's identity too (typed_envelope): no _check_head here.
            envelope = envelope_decoder.decode(header)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:  # the latter: a str not UTF-8
            self._explain_bad_header(header, named, e)
        body = envelope.body
        refs = envelope.refs
        try:
            layouts, total = check_runs(envelope.tensors, views, limits)
        except RunError as e:
            # Rebuild once more, with the bad run standing in for its tensors, to name
            # the first value that uses it.
            named.from_wire(body, DiagnoseContext(e, refs, limits, len(header)))
            raise DecodeError(f"{e.message}, used by no value") from None
        check_refs(refs, layouts, total, limits)
        reached = None
        if total > EAGER_TENSORS:
            # Learn which tensors the body uses before building any (see DryContext).
            dry = DryContext(layouts, refs, total, limits, len(header))
            named.from_wire(body, dry)
            reached = dry.reached
        tensors = build_tensors(layouts, copy, reached)
        if refs:
            tensors = [tensors[ref] for ref in refs]
        return named.from_wire(body, DecodeContext(tensors, limits, len(header)))

    def _explain_bad_header(
        self, header: memoryview, named: NamedType, error: Exception
    ) -> NoReturn:
        """Say why a header failed the one-pass decode (``error``): identity first, then
        the envelope, then the body, whose error the one-pass decode already found."""
        try:
            head = _HEAD_DECODER.decode(header)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            raise DecodeError(f"frame 0 is not an mmcodec header ({e})") from None
        self._check_head(head, named)
        try:
            envelope = _ENVELOPE_DECODER.decode(header)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            raise DecodeError(f"malformed envelope: {e}") from None
        in_body = _IN_BODY.match(str(error))
        if isinstance(error, msgspec.ValidationError) and in_body is not None:
            # The error a decode of the body alone gives, the body as the root: not
            # decoding the body again keeps the failure path as cheap as the decode.
            text = f"{in_body['message']} - at `${in_body['rest']}`"
        else:
            try:
                named.decoder.decode(envelope.body)
            except msgspec.ValidationError as e:
                text = str(e)
            except (msgspec.DecodeError, UnicodeDecodeError) as e:
                raise DecodeError(f"malformed message body: {e}") from None
            else:  # pragma: no cover - each part decodes alone but not together
                raise DecodeError("malformed header")
        path, message = locate_validation_error(text, named.wire_type, envelope.body)
        raise DecodeError(message, path.removeprefix("$")) from None

    def _check_head(self, head: EnvelopeHead, named: NamedType) -> None:
        check_format(head)
        if head.schema != self.schema or head.major != self.major:
            raise DecodeError(
                f"message is from schema {head.schema!r} major version {head.major}; "
                f"this decoder reads schema {self.schema!r} major version {self.major}"
            )
        if head.root != named.name:
            raise DecodeError(f"message holds a {head.root}, not a {named.name}")


def codec_of(module: ModuleType) -> SchemaCodec:
    """The :class:`SchemaCodec` of a generated module (its ``_CODEC``), for tools.

    Raises TypeError for a module that mmcodec did not generate.
    """
    codec = getattr(module, "_CODEC", None)
    if not isinstance(codec, SchemaCodec):
        raise TypeError(f"{module.__name__} is not a module generated by mmcodec")
    return codec
