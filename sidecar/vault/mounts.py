"""Which filesystem a root lives on (pure parsing plus one read of the mount table).

Network filesystems (SMB/CIFS, NFS, AFP, FUSE mounts such as sshfs or rclone) deliver no file
events for edits made on other machines, so their roots are polled on a short interval.
Linux reads ``/proc/self/mountinfo``; macOS asks ``mount``. Imports nothing of the project.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

NETWORK_TYPES = frozenset(
    {
        "cifs", "smb", "smb2", "smb3", "smbfs", "nfs", "nfs4", "afpfs", "afs", "9p", "ceph", "glusterfs",
        "lustre", "gpfs", "davfs", "webdav", "fuse", "fuseblk", "sshfs", "ncpfs", "osxfuse", "macfuse",
    }
)  # fmt: skip


# Filesystems whose inode numbers are kept on disk: a file keeps its number when renamed and
# after a remount. Elsewhere a number may be the client's own, given anew at each mount or lookup
# (SMB without serverino, FAT/exFAT, most FUSE filesystems), so the same number may name another
# file later. tmpfs, ramfs and overlay are not here: their numbers last only for the life of the
# mount, the manifest outlives it, and a tmpfs vault refilled at boot gives its files the numbers
# (and reuses the device number) of the last boot's, so an excluded backup restored first had
# the ids of the notes that failed to come back.
STABLE_INODE_TYPES = frozenset(
    {
        "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs", "nilfs2",
        "ntfs3", "apfs", "hfs", "ufs",
    }
)  # fmt: skip


def stable_inodes(fs_type: str | None) -> bool:
    """Whether a file's inode number on this filesystem says which file it is (unknown: no)."""
    return bool(fs_type) and str(fs_type).lower() in STABLE_INODE_TYPES


def is_network(fs_type: str | None) -> bool:
    if not fs_type:
        return False
    fs_type = fs_type.lower()
    return fs_type in NETWORK_TYPES or fs_type.startswith(("fuse.", "fuse-", "nfs"))


_OCTAL = re.compile(r"[0-7]{3}")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...). A backslash not
    followed by three octal digits is kept as written (a user's fstab may hold ``\\2019``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and _OCTAL.fullmatch(field[i + 1 : i + 4]):
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) for every line of a Linux mountinfo table."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        mounts.append((_unescape(fields[4]), right.split()[0]))
    return mounts


def parse_mount_output(text: str) -> list[tuple[str, str]]:
    """macOS ``mount`` lines: ``//user@nas/share on /Volumes/share (smbfs, nodev, ...)``."""
    mounts = []
    for line in text.splitlines():
        _, on, rest = line.partition(" on ")
        point, paren, opts = rest.rpartition(" (")
        if on and paren:
            mounts.append((point, opts.split(",")[0].strip(" )")))
    return mounts


def fs_type_of(path: Path, mounts: list[tuple[str, str]]) -> str | None:
    """Type of the mount with the longest mount point containing ``path`` (the last one wins on ties)."""
    found = mount_of(path, mounts)
    return found[1] if found else None


def mount_of(path: Path, mounts: list[tuple[str, str]]) -> tuple[str, str] | None:
    """(mount point, type) of the mount holding ``path``: the longest mount point containing its
    real path (the last one wins on ties). Resolves the path: a hung share blocks here."""
    return mount_containing(os.path.realpath(path), mounts)


def mount_containing(target: str, mounts: list[tuple[str, str]]) -> tuple[str, str] | None:
    """``mount_of`` for a path already resolved (touches no file: a caller that must not block
    resolves it with a deadline first)."""
    best: tuple[str, str] | None = None
    for point, fs_type in mounts:
        p = point.rstrip("/") or "/"
        inside = target == p or target.startswith(p + "/") or p == "/"
        if inside and (best is None or len(p) >= len(best[0])):
            best = (p, fs_type)
    return best


def read_mounts(table: Path | None) -> list[tuple[str, str]]:
    """The mount table of this machine (or the file given, for tests and unusual systems)."""
    if table is not None:
        try:
            return parse_mountinfo(table.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return []
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["/sbin/mount"], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return []
        return parse_mount_output(out.stdout)
    try:
        return parse_mountinfo(Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []


# fstab's mount-point field for what is no mount point (swap, a comment's leftovers).
_NOT_A_POINT = frozenset({"none", "swap"})


def parse_fstab(text: str) -> list[str]:
    """The mount points an fstab names (its second field; swap and comments left out)."""
    points = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0].startswith("#") or fields[1] in _NOT_A_POINT:
            continue
        point = _unescape(fields[1])
        if point.startswith("/"):
            points.append(point.rstrip("/") or "/")
    return points


def unmounted_point_above(target: str, fstab: list[str], mounts: list[tuple[str, str]]) -> str | None:
    """The deepest mount point of ``fstab`` at or above the resolved path ``target`` that is not
    mounted now, or None. A path below one lies in the bare folder an unmounted share leaves
    (touches no file). Only points deeper than the mount holding ``target`` now count: one above
    it (an old ``noauto`` line for ``/mnt`` while autofs or a systemd unit mounts ``/mnt/nas``)
    is covered by that mount, whatever fstab says."""
    mounted = {p.rstrip("/") or "/" for p, _ in mounts}
    holding = mount_containing(target, mounts)
    floor = len(holding[0]) if holding else 0
    best: str | None = None
    for point in fstab:
        inside = target == point or target.startswith(point + "/") or point == "/"
        deeper = len(point) > floor
        if inside and deeper and point not in mounted and (best is None or len(point) > len(best)):
            best = point
    return best


def read_fstab(table: Path | None) -> list[str]:
    """The mount points of this machine's fstab (or the file given); none where there is none."""
    try:
        return parse_fstab((table or Path("/etc/fstab")).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):  # a line this parser does not foresee says nothing, not a crash
        return []
