"""Open-file-description byte locks (Linux ``F_OFD_SETLK``): liveness that the kernel keeps.

Shared memory needs to know whether a peer still holds something, and a peer may die by
SIGKILL with no goodbye. A lock held on a byte of a segment's file answers that without
pids: the kernel drops every lock of an open file description when its last descriptor
closes, which happens when the process dies, however it dies. No pid is stored, so pid
reuse and pid namespaces cannot fool the check.

OFD locks, not classic POSIX ``lockf`` locks: those belong to the process, so closing
*any* descriptor of the file drops all of them, and a process never conflicts with its
own locks (the tests, which play both sides in one process, need that conflict). An
OFD lock belongs to one ``open()``; a ``fork`` shares the description, so a forked child
keeps its parent's locks alive for as long as it keeps the descriptor.

Locks here are on bytes past any file's end (:data:`LOCK_BASE` on): they guard nothing
by themselves, they are names the kernel tracks.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from typing import Final

__all__ = ["LOCK_BASE", "is_locked", "try_lock", "unlock"]

LOCK_BASE: Final = 1 << 50
"""First lock byte. Far past the largest segment, so lock bytes never name data."""

# struct flock on Linux x86-64 and aarch64: short l_type, short l_whence, (pad),
# off_t l_start, off_t l_len, pid_t l_pid, (pad). OFD locks want l_pid = 0.
_FLOCK: Final = struct.Struct("@hhqqixxxx")
_SETLK: Final = getattr(fcntl, "F_OFD_SETLK", 37)
_GETLK: Final = getattr(fcntl, "F_OFD_GETLK", 36)
_BUSY: Final = (errno.EAGAIN, errno.EACCES)


def try_lock(fd: int, byte: int, *, exclusive: bool) -> bool:
    """Take a shared or exclusive lock on ``byte`` without waiting; False if it is held
    in a conflicting mode by another open file description."""
    kind = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
    try:
        fcntl.fcntl(fd, _SETLK, _FLOCK.pack(kind, os.SEEK_SET, byte, 1, 0))
    except OSError as e:
        if e.errno in _BUSY:
            return False
        raise
    return True


def unlock(fd: int, byte: int) -> None:
    fcntl.fcntl(fd, _SETLK, _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, byte, 1, 0))


def is_locked(fd: int, byte: int) -> bool:
    """Whether another open file description holds any lock on ``byte`` (it would block
    an exclusive lock). Takes nothing."""
    found = fcntl.fcntl(fd, _GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, byte, 1, 0))
    return bool(_FLOCK.unpack(found)[0] != fcntl.F_UNLCK)
