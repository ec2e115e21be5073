"""How deep msgpack may nest before msgspec reads it, whatever the recursion limit.

msgspec bounds its recursion by Python's recursion limit (``RecursionError``, which every
decoder here turns into a ``DecodeError``). A process that raises the limit far above its
default (some applications set 100,000 for their own deep recursion) lets msgspec recurse
in C until the thread's stack overflows: on an 8 MiB stack a header of 40,000 nested
arrays, 40 KB, killed the process with SIGSEGV. :func:`refuse_deep_nesting` keeps that
from happening: in such a process, before a header that could nest that deep is decoded,
it measures the nesting in one pass and raises ``RecursionError`` past
:data:`SAFE_NESTING`, exactly as msgspec does under the default limit.

Under a limit of at most :data:`SAFE_NESTING`, or for a header shorter than that many
bytes (each level takes a byte at least), it does nothing but compare two numbers: the
decoders' hot path does not pay for it.
"""

from __future__ import annotations

import sys

__all__ = ["SAFE_NESTING", "nesting_exceeds", "refuse_deep_nesting"]

# Levels msgspec may recurse through on any thread's default stack: a level of a typed
# decode takes a few hundred bytes of C stack; 10,000 of them stay well inside 8 MiB
# (measured: RecursionError at 10,000 and 20,000, SIGSEGV at 40,000).
SAFE_NESTING = 10_000

# Bytes that follow a msgpack type byte before the next value: (fixed length, size of a
# length field). Containers are handled apart; 0xc1 is never used (invalid).
_FIXED = {
    0xC0: 0, 0xC2: 0, 0xC3: 0,  # nil, false, true
    0xCA: 4, 0xCB: 8,  # float 32, 64
    0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,  # uint 8..64
    0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,  # int 8..64
    0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17,  # fixext: type byte + data
}  # fmt: skip
_SIZED = {  # type byte -> (bytes of the length field, extra bytes after it)
    0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0),  # bin
    0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),  # ext: length, then a type byte
    0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),  # str
}  # fmt: skip
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # array, map


def nesting_exceeds(data: bytes | bytearray | memoryview, limit: int) -> bool:
    """Whether the first msgpack value in ``data`` nests arrays and maps deeper than ``limit``.

    One pass, constant work per value and memory per open container (at most ``limit + 1``
    of them). Input that is not msgpack, or ends early, is not this function's to judge: it
    answers for what it read, and the decoder reports the rest.
    """
    view = memoryview(data).cast("B")
    end = len(view)
    position = 0
    open_counts: list[int] = []  # values still expected by each open container
    while position < end:
        byte = view[position]
        position += 1
        if open_counts:
            open_counts[-1] -= 1
        count = 0
        if byte <= 0x7F or byte >= 0xE0:  # fixint
            pass
        elif byte <= 0x8F:  # fixmap
            count = (byte & 0x0F) * 2
        elif byte <= 0x9F:  # fixarray
            count = byte & 0x0F
        elif byte <= 0xBF:  # fixstr
            position += byte & 0x1F
        elif byte in _FIXED:
            position += _FIXED[byte]
        elif byte in _SIZED:
            width, extra = _SIZED[byte]
            length = int.from_bytes(view[position : position + width], "big")
            position += width + extra + length
        elif byte in _CONTAINERS:
            width, per_entry = _CONTAINERS[byte]
            count = int.from_bytes(view[position : position + width], "big") * per_entry
            position += width
        else:  # 0xc1: not msgpack
            return False
        if count:
            open_counts.append(count)
            if len(open_counts) > limit:
                return True
        while open_counts and open_counts[-1] == 0:
            open_counts.pop()
        if not open_counts:
            return False
    return False


def refuse_deep_nesting(header: bytes | bytearray | memoryview) -> None:
    """Raise ``RecursionError`` for a header msgspec could not decode within a safe stack.

    Only a process whose recursion limit exceeds :data:`SAFE_NESTING` pays for a look,
    and only for headers long enough to nest that deep.
    """
    if (
        len(header) > SAFE_NESTING
        and sys.getrecursionlimit() > SAFE_NESTING
        and nesting_exceeds(header, SAFE_NESTING)
    ):
        raise RecursionError("message nested too deeply")
