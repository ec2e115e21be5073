"""Where a tensor's memory lies: in this process's mapping of a Ray object store, or not.

Ray's plasma store is a file (``/dev/shm/plasma…``, deleted once mapped) that every
worker of a node maps; a tensor decoded zero-copy from a stored object points into that
mapping. Each node has its own store file, so the file's inode tells the stores apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmcodec.payloads import iter_tensors
from mmcodec.runtime.tensors import DEFAULT_INLINE_THRESHOLD


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    inode: int


def store_mappings() -> list[Mapping]:
    """This process's mappings of object store files, from ``/proc/self/maps``."""
    found: list[Mapping] = []
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "/plasma" in fields[5]:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                found.append(Mapping(start, end, int(fields[4])))
    return found


def store_inodes() -> set[int]:
    return {m.inode for m in store_mappings()}


def in_store(tensor: torch.Tensor, mappings: list[Mapping]) -> bool:
    """Whether all of ``tensor``'s bytes lie in one of the store mappings."""
    start = tensor.data_ptr()
    end = start + tensor.nbytes
    return any(m.start <= start and end <= m.end for m in mappings)


def payload_tensors(value: object) -> list[torch.Tensor]:
    """The tensors of ``value`` that travel as frames of their own: every tensor of at
    least the inline threshold (smaller ones travel inside the header, and decode as views
    of it or, when misaligned there, as copies)."""
    return [t for t in iter_tensors(value) if t.nbytes >= DEFAULT_INLINE_THRESHOLD]


def payloads_in_store(value: object) -> bool:
    """Whether every payload tensor of ``value`` views a store mapped here, and, so that
    the check never passes vacuously, at least one tensor does."""
    mappings = store_mappings()
    every = all(in_store(t, mappings) for t in payload_tensors(value))
    return every and any(in_store(t, mappings) for t in iter_tensors(value))
