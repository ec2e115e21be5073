"""Bounds on what untrusted input may cost, each enforced before anything is allocated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-call limits. Every field bounds work or memory an attacker could ask for.

    The decoder (and the encoder, for the receiver's sake) applies all but the last;
    ``max_reduce_ratio`` bounds what the domain classes build from decoded values
    (``get_data``, ``reduce_data``). The defaults fit the largest realistic multimodal
    requests (a 16-image video request is ~200 MB and a few hundred tensors) with a
    wide margin.
    """

    max_frames: int = 4096
    """Frames per message, frame 0 (the header) included."""
    max_total_bytes: int = 4 << 30
    """Sum of all frame lengths (4 GiB)."""
    max_header_bytes: int = 64 << 20
    """Length of frame 0, the msgpack header (64 MiB)."""
    max_depth: int = 32
    """Nesting depth of nested tensors (lists and tuples of lists ...)."""
    max_elements: int = 1 << 20
    """Elements in any one container, and tensors per message (empty ones included).

    Independently of this limit, a message holds at most one tensor per byte of its
    header: every tensor is referenced from the header at least once."""
    max_tensors: int = 1 << 16
    """Tensors per message, empty ones included (65,536).

    A tensor costs the receiver ~0.6-1 KB of memory however few bytes it takes on the wire
    (an empty one takes none, and its reference 1-5 header bytes): this bounds that part
    of a message's cost to ~60 MB. Realistic messages hold a few hundred."""
    max_ndim: int = 16
    """Dimensions of one tensor."""
    max_reduce_ratio: int = 16
    """A reduce (``get_data``, ``reduce_data``) builds at most this many times the bytes its
    elements hold: their tensors' memory, each byte counted once however many references
    share it, and 8 bytes per entry of each distinct list (mmcodec/domain/reduce_bound.py).

    Stacking or concatenating distinct tensors builds 1x; zero-padding ragged elements and
    repeating one item in a batch build more. Not a decode limit: decoding never reduces."""


DEFAULT_LIMITS = Limits()
