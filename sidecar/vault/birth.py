"""A file's birth (creation) time, where the platform says it: what tells a file renamed from a new
file that was given the renamed one's freed inode number (ext4 and xfs give a freed number again at
once, so a copy restored after a loss may carry its own note's inode, mtime and size).

macOS and the BSDs have ``st_birthtime``; Linux has it only through ``statx(2)`` (``STATX_BTIME``,
Linux 4.11, glibc 2.28), which Python 3.11 does not wrap: it is called through ctypes. 0 means not
known (no such call, a filesystem that keeps no birth time, an error): never evidence. Imports
nothing of the project.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_INO = 0x100
_STATX_BTIME = 0x800


class _Time(ctypes.Structure):
    _fields_ = (("sec", ctypes.c_int64), ("nsec", ctypes.c_uint32), ("_pad", ctypes.c_int32))


class _Statx(ctypes.Structure):
    """``struct statx`` of <linux/stat.h> (256 bytes; the fields after the times are not read)."""

    _fields_ = (
        ("mask", ctypes.c_uint32),
        ("blksize", ctypes.c_uint32),
        ("attributes", ctypes.c_uint64),
        ("nlink", ctypes.c_uint32),
        ("uid", ctypes.c_uint32),
        ("gid", ctypes.c_uint32),
        ("mode", ctypes.c_uint16),
        ("_pad0", ctypes.c_uint16),
        ("ino", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("blocks", ctypes.c_uint64),
        ("attributes_mask", ctypes.c_uint64),
        ("atime", _Time),
        ("btime", _Time),
        ("ctime", _Time),
        ("mtime", _Time),
        ("_rest", ctypes.c_uint64 * 18),
    )


def _libc_statx() -> Callable[..., int] | None:
    """glibc's ``statx`` (None: not Linux, no glibc 2.28, or no C library to ask)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).statx
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Statx))
    fn.restype = ctypes.c_int
    return cast("Callable[..., int]", fn)


_STATX = _libc_statx()


def birth_ns(path: Path | str, ino: int) -> int:
    """The birth time (ns) of the file at ``path`` if it is still inode ``ino`` (unsigned, as
    ``st_ino``; a file put in its place since it was looked at has its own), else 0; 0 where the
    platform or filesystem does not say it. A symlink itself is not followed (never a note's file)."""
    if _STATX is not None:
        buf = _Statx()
        flags = _AT_SYMLINK_NOFOLLOW
        if _STATX(_AT_FDCWD, os.fsencode(path), flags, _STATX_INO | _STATX_BTIME, ctypes.byref(buf)):
            return 0
        if not buf.mask & _STATX_BTIME or not buf.mask & _STATX_INO or buf.ino != ino:
            return 0
        return buf.btime.sec * 10**9 + buf.btime.nsec or 0
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    born = getattr(st, "st_birthtime", None)  # macOS, BSD (Windows: no note's file is compared)
    if born is None or st.st_ino != ino:
        return 0
    return round(float(born) * 10**9)
