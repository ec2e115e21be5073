"""Files that pools of layout 2 (before segments were memfds) left in ``/dev/shm``.

Those pools kept their segment in a named file, ``/dev/shm/mmcodec-<32 hex digits>``,
which a pool killed by SIGKILL could not unlink. Pools now use memfds, which leave
nothing behind; :func:`sweep` (run by every new pool) still removes such files, so an
upgrade leaves none either.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import struct
import time
from typing import Final

from mmcodec.transport._locks import LOCK_BASE, is_locked

__all__ = ["ORPHAN_AGE_S", "SEGMENT_DIR", "sweep"]

SEGMENT_DIR: Final = "/dev/shm"
ORPHAN_AGE_S: Final = 60.0
"""A file without a valid header and without an owner is removed only once it is this
old (a pool of layout 2 may be writing its header right now)."""
_NAME: Final = re.compile(r"mmcodec-[0-9a-f]{32}")
_HEADER: Final = struct.Struct("<8sIIIIQQ")  # magic, layout version, ...
_MAGIC: Final = b"mmcshm\x00\x00"
_VERSION: Final = 2
_OWNER_LOCK: Final = LOCK_BASE


def sweep(directory: str = SEGMENT_DIR) -> list[str]:
    """Remove the segment files of layout-2 pools whose process is gone; returns their names.

    Such a pool held an exclusive lock on its file's owner byte from the moment it
    created the file, and wrote the header only after taking it; the kernel drops the
    lock when the process dies (SIGKILL included). So a file with a valid header and no
    owner lock belongs to nobody and goes; a file whose owner lock is held is never
    touched. Files of other users, of another layout version, and headerless files
    younger than :data:`ORPHAN_AGE_S` are left alone. Receivers' mappings and decoded
    views of a removed file stay valid.
    """
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not _NAME.fullmatch(name):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                continue
            if is_locked(fd, _OWNER_LOCK):
                continue
            head = os.pread(fd, _HEADER.size, 0)
            if len(head) == _HEADER.size and head[:8] == _MAGIC:
                if _HEADER.unpack(head)[1] != _VERSION:
                    continue
            elif time.time() - info.st_mtime < ORPHAN_AGE_S:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            removed.append(name)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed
