"""Moves, not losses: the notes a sweep or a batch of file events misses, paired with where they
are now, a mixin of ``ChangeFinder`` (``diff``). A missing note is moved when a note new to the
index has its mtime and size and its name or folder (``_pair_moves``), when the same bytes are
indexed under another key that the sweep saw, or when its very file (device, inode, birth time)
lies where a rule leaves it out now. Its own module because a move is judged from the listings
and the manifest alone; the state it works on is the ``ChangeFinder``'s own.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import FileState
from sidecar.vault.mounts import stable_inodes
from sidecar.vault.sources import NoteFile, Root, stored_id
from sidecar.vault.supervisor import Supervisor

if TYPE_CHECKING:
    from sidecar.index.diff import Diff, _Listing

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.diff")


def _pair_moves(
    missing: Iterable[tuple[str, tuple[int, int]]], fresh: Iterable[NoteFile]
) -> dict[str, NoteFile]:
    """Missing keys (each with its recorded mtime and size) paired with the new notes that can
    be them moved: the same mtime and size, and the same name (its folder moved or renamed, to
    another root too) or else the same folder (the note renamed). Each new note accounts for one
    missing key. Found by lookup, not by comparing every pair: a folder of thousands of notes
    unpacked in one second shares mtime and size."""
    by_name: dict[tuple[int, int, str], list[NoteFile]] = {}
    by_folder: dict[tuple[int, int, str], list[NoteFile]] = {}
    for n in fresh:
        folder, _, name = n.key.rpartition("/")
        by_name.setdefault((n.mtime_ns, n.size, name), []).append(n)
        by_folder.setdefault((n.mtime_ns, n.size, folder), []).append(n)
    for pool in (*by_name.values(), *by_folder.values()):
        pool.reverse()  # taken from the end, in the order found
    used: set[str] = set()
    out: dict[str, NoteFile] = {}
    none: list[NoteFile] = []
    for key, (mtime_ns, size) in missing:
        folder, _, name = key.rpartition("/")
        for pool in (
            by_name.get((mtime_ns, size, name), none),
            by_folder.get((mtime_ns, size, folder), none),
        ):
            while pool and pool[-1].key in used:
                pool.pop()
            if pool:
                match = pool.pop()
                used.add(match.key)
                out[key] = match
                break
    return out


# Shares whose server keeps a file's change time (ctime) itself, to the 100 ns or finer: one equal
# to the recorded one is that file's, unwritten since, whatever inode numbers the client makes up.
_SERVER_CTIME_TYPES = frozenset({"nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs"})


def ctime_is_evidence(fs_type: str | None) -> bool:
    """Whether equal inode and ctime say a moved note's file is the one indexed: a filesystem
    whose inode numbers last on disk, or a share whose server keeps ctime. Not FAT (no change
    time: Linux reports the mtime), FUSE, tmpfs, overlay or an unknown type."""
    return stable_inodes(fs_type) or str(fs_type or "").lower() in _SERVER_CTIME_TYPES


def unchanged_move(old_key: str, st: FileState, note: NoteFile) -> bool:
    """Whether a moved note's file is the very file indexed under ``old_key``, not written since:
    the same device and inode, and the same status change time, mtime and size as recorded (any
    write changes the ctime; a folder renamed keeps its files' ctime, a file renamed gets a new
    one), its birth time too where one is recorded, under the same name in the same root (its
    title and source are its name's and root's). That is the evidence a note in place is taken as
    unchanged on (mtime, size, ctime) and the inode's besides. An old entry marked to be read
    again (mtime 0, hash '', size -1) or written by a version that kept no ctime or inode is no
    evidence, nor a memory note (read as its inbox reads it)."""
    return (
        st.state == "indexed"
        and bool(st.hash)
        and note.root.source != "memory"
        and 0 not in (st.mtime_ns, st.ctime_ns, st.ino)
        and (st.mtime_ns, st.size, st.ctime_ns, st.dev, st.ino)
        == (note.mtime_ns, note.size, note.ctime_ns, note.dev, note.ino)
        and old_key.rpartition("/")[2] == note.key.rpartition("/")[2]
        and old_key.split("/", 1)[0] == note.key.split("/", 1)[0]
        and (not st.btime_ns or note.born() == st.btime_ns)
    )


class MoveFinder:
    """The move matching of a ``ChangeFinder`` (which sets the state below)."""

    manifest: Manifest
    supervisor: Supervisor

    def _moves(
        self,
        listing: _Listing,
        listings: Sequence[_Listing],
        alien: set[str],
        diff: Diff,
        left_out: Sequence[NoteFile],
    ) -> tuple[set[str], set[str]]:
        """The missing keys of ``listing`` whose notes are elsewhere now: moves, not losses;
        and those of them that left the root (into an excluded folder, another root), which the
        guard no longer counts among the root's notes.

        A move (or rename) keeps a file's modification time and size. A missing note is moved
        when a note new to the index in this sweep (any root's listing, or a file event's) has
        its mtime and size and its name or its folder (a folder moved or renamed, a note renamed
        in place), or when the same bytes with the same mtime are indexed under another key that
        this sweep saw (a move whose new half an earlier sweep indexed). A note that a rule
        leaves out is evidence only as the very file (``_renamed_out``): an excluded backup of the
        notes (rsync -a keeps their times) looks like where a vanished share's notes went, so a
        look-alike there is no move and the loss is held. Each new file accounts
        for one missing note: an emptied share is not made good by a few look-alikes. A root
        whose folder is not the share now (``alien``) is no evidence either way."""
        manifest = self.manifest
        trusted = [x for x in listings if x.root.name not in alien]
        moved = self._renamed_out(listing, left_out)
        away = set(moved)
        prefix = listing.root.key_of("x")[:-1]
        present: dict[str, NoteFile] = {n.key: n for x in trusted for n in x.notes}
        fresh = {n.key: n for x in trusted for n in x.notes if n.key not in x.known}
        events = {n.key: n for n in diff.work if n.key not in present}
        indexed = manifest.file_states_of(list(events))
        fresh.update((k, n) for k, n in events.items() if k not in indexed)
        present.update(events)
        known = listing.known
        looked = [(k, (known[k].mtime_ns, known[k].size)) for k in listing.missing if k not in moved]
        for key, match in _pair_moves(looked, fresh.values()).items():
            moved.add(key)
            diff.moves[key] = match.key
            if not match.key.startswith(prefix):
                away.add(key)
        # The rest: the same bytes indexed under a key that this sweep saw, with that stat.
        rest = {
            key: (st.mtime_ns, st.size, st.hash)
            for key in listing.missing
            if key not in moved and (st := listing.known[key]).state == "indexed" and st.hash
        }
        if not rest:
            return moved, away
        gone = {k for x in listings for k in x.missing} | set(diff.gone)  # file events' too
        twins = manifest.keys_like(set(rest.values()))
        used: set[str] = set()
        for key, stat_ in rest.items():
            for other in twins.get(stat_, []):
                if other == key or other in gone or other in used:
                    continue
                now = present.get(other)
                if now is None or (now.mtime_ns, now.size) != stat_[:2]:
                    # Not seen in this sweep with that stat: a root not listed now (or one gone
                    # with the share, as a wiki inside an emptied vault) is no evidence; its old
                    # entries made an emptied share look moved.
                    continue
                used.add(other)
                moved.add(key)
                diff.moves[key] = other
                if not other.startswith(prefix):
                    away.add(key)
                break
        return moved, away

    def _left_out(
        self, listings: Sequence[_Listing], alien: set[str], looked: Sequence[NoteFile]
    ) -> list[NoteFile]:
        """The files a rule leaves out that this sweep saw, where a move's or a copy's file may
        lie: its listings' and the walks of file events' paths (``looked``: a wiki moved into the
        vault's excluded folder lists only the wiki); none of a root whose folder is not the share
        now (``alien``)."""
        seen = [*looked, *(n for x in listings for n in x.excluded)]
        return [n for n in seen if n.root.name not in alien]

    def _renamed_out(self, listing: _Listing, left_out: Sequence[NoteFile]) -> set[str]:
        """The missing keys of ``listing`` whose very file lies where a rule leaves it out now (a
        folder moved into an excluded one): gone from the index at once, no loss.

        Only a rename keeps a file's device, inode and birth time: a copy made before the loss (a
        backup, ``cp -p``, ``rsync -a``, a sync tool's copy-then-delete) has another inode even
        where it keeps the mtime. A copy made after it may be given the deleted note's freed inode
        number (ext4 and xfs give it again at once: a backup restored into the excluded folder had
        all its notes' numbers, mtimes and sizes), but it is born when it is made: the file's birth
        time must be the one recorded with the note (``vault.birth``), and where the platform or
        filesystem says none the notes are held as any loss. It must keep the note's name (a
        folder moved keeps every name; a sync tool's versioning renames each deleted file into
        its versions folder as ``n3~20261205-083000.md``, and ``n3 copy.md`` is no move either),
        its recorded mtime and size, and have one link (``sources.file_id``: a hard-linked backup
        shares the inode while the note is there; ``Diff.linked`` forgets the ids of a note
        seen so). The number must be one that lasts on disk (``mounts.stable_inodes``): on SMB,
        FAT, most FUSE filesystems and tmpfs it may be given anew at a remount or a boot and name
        another file. Both files are on the root's own filesystem, not on one mounted inside it.
        Where they are: ``left_out`` (``_left_out``)."""
        if not listing.missing or not self._own_inodes(listing.root):
            return set()
        found: dict[tuple[int, int], NoteFile] = {}
        by_root: dict[Root, list[NoteFile]] = {}
        for n in left_out:
            by_root.setdefault(n.root, []).append(n)
        for root, files in by_root.items():
            ident = self.supervisor.status(root).identity
            if ident is not None and self._own_inodes(root):
                dev = stored_id(ident.dev)
                found.update(((f.dev, f.ino), f) for f in files if f.ino and f.dev == dev)
        out: set[str] = set()
        nested = self._nested_mounts(listing.root)
        for key in listing.missing:
            st = listing.known[key]
            there = found.get((st.dev, st.ino)) if st.ino and st.btime_ns else None
            if (
                there is not None
                and not nested(listing.root, key)
                and not nested(there.root, there.key)
                and (there.mtime_ns, there.size) == (st.mtime_ns, st.size)
                and there.key.rpartition("/")[2] == key.rpartition("/")[2]
                and there.born() == st.btime_ns  # a statx per candidate only
            ):
                del found[(st.dev, st.ino)]  # one file, one note
                out.add(key)
        if out:
            log.info("notes_moved_out root=%s count=%d into=excluded folder", listing.root.name, len(out))
        return out

    def _excluded_copies(self, listing: _Listing, left_out: Sequence[NoteFile], moved: set[str]) -> int:
        """How many of the missing notes that are no move have a look-alike (same mtime and size)
        where a rule leaves it out: no evidence (a backup looks so), but status says it, as the
        user may know it for a move by copying (a sync tool) that ``--confirm-deletions`` ends."""
        # Each look-alike accounts for one note: a template's notes unpacked in one second share
        # mtime and size, and one excluded file of theirs is no copy of them all.
        sizes = Counter((n.mtime_ns, n.size) for n in left_out)
        count = 0
        for k in listing.missing:
            stat_of = (listing.known[k].mtime_ns, listing.known[k].size)
            if k not in moved and sizes[stat_of] > 0:
                sizes[stat_of] -= 1
                count += 1
        return count

    def _nested_mounts(self, root: Root) -> Callable[[Root, str], bool]:
        """Whether a note's folder is or was (this run) a mount point inside its root, or below
        one: a bind mount keeps device and inode numbers, so the notes of a bound folder that
        was unmounted are seen again where its source lies (in an excluded folder): no move."""
        points = self.supervisor.mount_points_seen
        if not points:
            return lambda _root, _key: False
        tops: dict[Root, tuple[str, tuple[str, ...]]] = {}

        def nested(r: Root, key: str) -> bool:
            if r not in tops:
                top = os.path.realpath(r.path)
                tops[r] = (top, tuple(p for p in points if p.startswith(top + "/")))
            top, inner = tops[r]
            if not inner:
                return False
            folder = os.path.join(top, key[len(r.key_of("x")) - 1 :].rpartition("/")[0])
            return any(folder == p or folder.startswith(p + "/") for p in inner)

        return nested

    def _own_inodes(self, root: Root) -> bool:
        """Whether a root's inode numbers say which file is which (a known filesystem, no share;
        a wiki folder moved away is on the vault's)."""
        st = self.supervisor.status(root)
        return not st.network and stable_inodes(st.fs_type)

    def _event_moves(
        self,
        root: Root,
        missing: Collection[str],
        notes: Sequence[NoteFile],
        states: Collection[str],
        diff: Diff,
        *,
        deletable: Callable[[], bool],
    ) -> set[str]:
        """The missing keys that are moves within the batch (a folder renamed: its old and new
        paths are one batch of events), of any count: each note new to the index with a missing
        note's mtime and size and its name or folder, into ``Diff.moves`` (its old entry leaves
        with its new one). ``states``: the manifest's entries of ``notes``. No move on a root whose
        deletions file events may not apply (offline, another mount, emptied): a full sweep and
        its guard decide there. One pass over each side, by (mtime, size)."""
        fresh = [n for n in notes if n.key not in states]
        if not missing or not fresh:
            return set()
        known = self.manifest.file_states_of(sorted(missing))
        pairs = _pair_moves(((k, (st.mtime_ns, st.size)) for k, st in known.items()), fresh)
        found = {key: n.key for key, n in pairs.items()}
        if not found or not deletable():
            return set()
        diff.moves.update(found)
        return set(found)
