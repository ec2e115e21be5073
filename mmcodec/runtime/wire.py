"""Wire types shared by every schema: the envelope, tensor runs, slices, nested tensors.

Frame 0 of a message is a msgpack array (an :class:`Envelope`); tensor payloads
follow as frames 1..N. Every struct is ``array_like`` (no field names on the wire)
and ``gc=False``: decoded trees hold no cycles.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

import msgspec

from mmcodec.runtime.errors import DecodeError

MAGIC = "mmc"
WIRE_VERSION = 3
"""The newest wire format: version 2 and column lists (mmcodec.runtime.columns).

An encoder writes the oldest version that holds its message: 3 when it laid out an item
list as columns, else 2, which decoders of version 2 read too. A decoder reads both
(:data:`WIRE_VERSIONS`): the bytes of a version 2 message mean the same in version 3."""
ROWS_WIRE_VERSION = 2
"""The version of messages without column lists."""
WIRE_VERSIONS = (ROWS_WIRE_VERSION, WIRE_VERSION)
"""The versions this runtime reads."""

NonNegative = Annotated[int, msgspec.Meta(ge=0, extra={"mmcodec": "reference"})]
"""A reference by position: to a tensor, or back to a value sent earlier.

``extra`` changes nothing on the wire; it tells tools (``mmcodec inspect``) a reference
from a plain non-negative int, which generated code spells ``Annotated[int, Meta(ge=0)]``.
"""


class EnvelopeHead(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """The first five entries of every envelope, decoded (and checked) first."""

    magic: str
    wire_version: int
    schema: str
    major: int
    root: str


class TensorRun(msgspec.Struct, array_like=True, gc=False, frozen=True, forbid_unknown_fields=True):
    """``count`` tensors of one dtype and shape, laid back to back in one payload.

    A single tensor is a run of one (``[dtype, shape, data]`` with the defaults left
    off). Many same-shape views of one batch tensor travel as one run, so that both
    sides pay one allocation and one torch call for all of them.
    """

    dtype: str
    shape: list[int]
    data: int | memoryview
    """A frame index (>= 1), or the payload itself, inline, for small payloads."""
    offset: int = 0
    """Byte offset of the first tensor in its frame (0 for inline payloads)."""
    count: int = 1


class Envelope(msgspec.Struct, array_like=True, gc=False, frozen=True, forbid_unknown_fields=True):
    """A whole header. The wire version defines every entry of the envelope and of its
    tensor runs: a trailing entry is an error, not something to skip (it would be bytes
    that nothing uses; the body's own structs, which evolve, skip unknown trailing fields)."""

    magic: str
    wire_version: int
    schema: str
    major: int
    root: str
    tensors: list[TensorRun]
    refs: list[int]
    """Tensor reference -> position among the runs' tensors; empty when they coincide."""
    body: msgspec.Raw


def check_format(head: Any) -> None:
    """An envelope's magic and wire version (``head``: any object with those fields)."""
    if head.magic != MAGIC:
        raise DecodeError(f"frame 0 is not an mmcodec header (magic {head.magic!r})")
    if head.wire_version not in WIRE_VERSIONS:
        raise DecodeError(
            f"wire format version {head.wire_version} is not supported "
            f"(this decoder reads versions {ROWS_WIRE_VERSION} to {WIRE_VERSION})"
        )


def typed_envelope(schema: str, major: int, name: str, body_type: object) -> type[msgspec.Struct]:
    """An :class:`Envelope` of one message kind, its body decoded as ``body_type``, in one pass.

    Decoding the envelope with a raw body and then the body costs two scans of the
    header, and a third for :class:`EnvelopeHead`; one typed decode is the fast path
    for valid messages. Its identity entries are ``Literal``s (this format, ``schema``,
    ``major``, root ``name``), so msgspec checks them as it reads them; the decoder falls
    back to the three steps to explain a bad message, identity first.
    """
    types: dict[str, Any] = {
        "magic": Literal[MAGIC],
        "wire_version": Literal[WIRE_VERSIONS],
        "schema": Literal[schema],
        "major": Literal[major],
        "root": Literal[name],
        "body": body_type,
    }
    fields = [
        (field.name, types.get(field.name, field.type))
        for field in msgspec.structs.fields(Envelope)
    ]
    return msgspec.defstruct(
        f"Envelope_{name}",
        fields,
        array_like=True,
        gc=False,
        frozen=True,
        forbid_unknown_fields=True,
        module=__name__,
    )


class IntTagRef(msgspec.Struct, array_like=True, gc=False, frozen=True, tag=-1):
    """In a union with int tags: "the same object as shared value ``index``".

    A union value (a field variant, say) that many parents share is sent once; later
    occurrences refer back to it by the order in which shared values were first sent.
    """

    index: NonNegative


class StrTagRef(msgspec.Struct, array_like=True, gc=False, frozen=True, tag="@ref"):
    """:class:`IntTagRef` for unions with str tags."""

    index: NonNegative


class SliceWire(msgspec.Struct, array_like=True, gc=False, frozen=True):
    start: int | None
    stop: int | None
    step: int | None = None


# Nested tensors: a bare int is a tensor reference (the common case, one byte);
# leaves and containers are tagged arrays.
class IntLeaf(msgspec.Struct, array_like=True, gc=False, frozen=True, tag=0):
    value: int


class ListNode(msgspec.Struct, array_like=True, gc=False, frozen=True, tag=1):
    items: list[NestedWire]


class TupleNode(msgspec.Struct, array_like=True, gc=False, frozen=True, tag=2):
    items: list[NestedWire]


NestedWire: TypeAlias = NonNegative | float | IntLeaf | ListNode | TupleNode
