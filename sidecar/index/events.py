"""The changed paths of file events, a mixin of ``ChangeFinder`` (``diff``): each looked at on
its own (a stat; a new or changed folder walked and compared with its indexed notes; a vanished
path takes the notes below it too), never the rest of its root; a few deletions a minute applied
at once, more wait for the root's events to go quiet or ask for a full sweep, as does a root that
changed as a whole or is offline. Its own module because it is the way in beside the full
listing (``diff_roots``); the state it works on is the ``ChangeFinder``'s own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.index.bursts import Bursts
from sidecar.index.spellings import _Sibling, _twin_names
from sidecar.index.unreadable import _at_or_below, _prefix, _unreadable, kept_by
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import FileState
from sidecar.vault.notenames import (
    CANVAS_TWIN_REASON,
    LINK_REASON,
    NOTE_SUFFIXES,
    TOO_LARGE,
    TWIN_REASON,
    is_note_name,
    twin_reason,
)
from sidecar.vault.sources import (
    Asking,
    NoteFile,
    Root,
    Skipped,
    asked,
    kind_skipped,
    link_refusal,
    name_refusal,
    real_path,
    refusal_of,
    scan,
    unreadable_skip,
)
from sidecar.vault.supervisor import RootUnreachable, StopCut, Supervisor

if TYPE_CHECKING:
    from sidecar.index.diff import Diff


# File events may delete this many notes of a root within the window at once; beyond that, a
# full sweep of the root decides (an emptied mount point sends an event per vanished file).
EVENT_DELETIONS_MAX = 4
EVENT_DELETION_WINDOW_S = 60.0


class EventPaths:
    """The file events' look of a ``ChangeFinder`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    supervisor: Supervisor
    bursts: Bursts
    excluded_by: Callable[[str], str | None]
    _skips: dict[tuple[str, str], str]
    _held: dict[str, set[str]]
    _event_deletions: dict[str, list[float]]
    _deleted: dict[str, list[float]]

    if TYPE_CHECKING:  # the change finder's own (``ChangeFinder``, ``UnreadableNotes``, ``MoveFinder``,
        # ``CaseSpellings``, ``SkipReport``)

        def _add_work(
            self, notes: Sequence[NoteFile], known: dict[str, FileState], diff: Diff, *, full: bool = False
        ) -> None: ...

        def _wait(self, root: Root, keys: Collection[str], whole: bool = False) -> None: ...

        def _unread_gone(self, root: Root, vanished: tuple[str, ...]) -> None: ...

        def _unreadable_seen(
            self, root: Root, found: Sequence[NoteFile | Skipped], looked: Sequence[str]
        ) -> None: ...

        def _event_moves(
            self,
            root: Root,
            missing: Collection[str],
            notes: Sequence[NoteFile],
            states: Collection[str],
            diff: Diff,
            *,
            deletable: Callable[[], bool],
        ) -> set[str]: ...

        def _other_spellings(
            self, root: Root, rels: Sequence[str], asking: Asking
        ) -> tuple[list[str], list[str]]: ...

        def _skipped(self, root: Root, s: Skipped) -> None: ...

    def diff_paths(self, paths: Collection[str], candidates: Sequence[Root], diff: Diff) -> list[Root]:
        """Look at changed paths only (a stat each; a new or changed folder is walked); return
        the roots that need a full sweep instead (offline, a root itself changed, many deletions)."""
        by_root: dict[Root, set[str]] = {}
        escalate: list[Root] = []
        # Longest path first: a path in the wiki belongs to the wiki, not to the vault around it.
        ordered = sorted(candidates, key=lambda r: len(str(r.path)), reverse=True)
        for raw in paths:
            path = Path(raw)
            # A folder that holds a whole root (a new agent's folder moved in, the wiki's parent):
            # that root is swept in full.
            escalate.extend(
                r for r in ordered if r.path != path and r.path.is_relative_to(path) and r not in escalate
            )
            root = next((r for r in ordered if path == r.path or path.is_relative_to(r.path)), None)
            if root is None:
                continue
            rel = path.relative_to(root.path).as_posix()
            if rel == ".":
                rel = ""
            if root.exclude and (rel == root.exclude or rel.startswith(root.exclude + "/")):
                continue  # the wiki inside the vault: its own root
            if any(p.startswith(".") for p in rel.split("/")) or (root.source == "memory" and "/" in rel):
                continue
            st = self.supervisor.status(root)
            # Offline (unreachable, not the share): a full sweep looks again. A held mass deletion
            # leaves the root readable: its changed paths are looked at (deletions stay held).
            if not rel or (st.offline and st.hold_kind != "mass"):
                if root not in escalate:
                    escalate.append(root)
                continue
            by_root.setdefault(root, set()).add(rel)
        for root, rels in by_root.items():
            if root not in escalate and not self._diff_group(root, rels, diff):
                escalate.append(root)
        return escalate

    def _diff_group(self, root: Root, rels: set[str], diff: Diff) -> bool:
        """Changed paths of one root into ``diff``; False if the root needs a full sweep instead."""
        try:
            found, gone, walked = self.supervisor.bounded(
                root, functools.partial(self._look, root, sorted(rels))
            )
        except StopCut:  # the daemon stops: nothing applied, the next start's sweep looks
            return True
        except (RootUnreachable, _RootRefused):
            # The full sweep marks it offline with the reason; a refused root (an inbox made a
            # link or another user's, a wiki linked out) is swept whole now too, as a plain
            # root's events are applied now: a refused inbox's notes leave the index at once, not
            # at the next full sweep, and none is read through the link.
            return False
        notes = [f for f in found if isinstance(f, NoteFile)]
        manifest = self.manifest
        missing: set[str] = set()
        if gone or walked:  # what lay there is no longer left out either (one pass, however many
            # went); what a walk left out now is counted again below
            wheres = tuple(str(root.path / rel) for rel in gone + walked)
            self._skips = {k: v for k, v in self._skips.items() if not _at_or_below(k, root.name, wheres)}
            # Unreadable notes that went (a walk may leave one in place: unchanged, not read again)
            self._unread_gone(root, tuple(str(root.path / rel) for rel in gone))
        for rel in gone:
            if rel.lower().endswith(NOTE_SUFFIXES):
                key = root.key_of(rel)
                if manifest.rel_of(key) in (None, rel):  # not when its key's file is a twin
                    missing.update(manifest.file_states_of([key]))
            # A vanished path may have been a folder (even one named "x.md"): its notes went
            # with it, with no event of their own when it was moved away.
            missing.update(manifest.file_states(_prefix(root, rel)))
        if walked:
            # A walked folder holds what the walk found, nothing else: a folder put in the place
            # of another of the same name (renamed away: no event for its notes) leaves the old
            # one's notes behind. Notes below what could not be read are kept, as a sweep does.
            kept = tuple(key for _, key in _unreadable(root, found))
            for rel in walked:
                missing.update(k for k in manifest.file_states(_prefix(root, rel)) if not kept_by(k, kept))
                if rel.lower().endswith(NOTE_SUFFIXES) and manifest.rel_of(key := root.key_of(rel)) == rel:
                    # A folder now where a note of its name was ("x.md" deleted, a folder "x.md"
                    # made): the note is gone, not only till the next full sweep.
                    missing.update(manifest.file_states_of([key]))
        for n in notes:
            self._skips.pop((root.name, str(n.path)), None)
        self._unreadable_seen(root, found, gone + walked)
        seen = notes
        notes, excluded = self._excluded_seen(root, notes, missing, gone=gone, walked=walked)
        kept_keys = {n.key for n in notes}
        left_out = [n for n in seen if n.key not in kept_keys]
        for s in found:
            if not isinstance(s, Skipped):
                continue
            diff.skipped[s.reason] = diff.skipped.get(s.reason, 0) + 1
            self._skipped(root, s)
            if s.reason not in _KEPT_WHEN_SKIPPED and is_note_name(s.path.name, root.source):
                # Now left out (grown too large, ...): its old text must not be found any more,
                # as a full sweep would remove it.
                with contextlib.suppress(ValueError):
                    missing.update(
                        manifest.file_states_of([root.key_of(s.path.relative_to(root.path).as_posix())])
                    )
        missing -= {n.key for n in notes}
        states = manifest.file_states_of([n.key for n in notes])
        # A move is no loss, whatever its size: a folder renamed (its old and new paths are one
        # batch of events) is applied now, each old entry with its new one; only the deletions
        # no move explains count toward the few applied at once (past them, a full sweep took
        # the rename for a loss whenever its listing outlasted the root's quiet time).
        # Whether the root's deletions may go ahead, probed once for the group (a listing of the
        # root under the probe timeout: slow on a share), when the moves or the deletions ask.
        deletable = functools.cache(functools.partial(self.supervisor.deletable, root))
        moved = self._event_moves(
            root, missing - self._held.get(root.name, set()), notes, states, diff, deletable=deletable
        )
        applied = self._event_deletions_of(root, notes, missing - moved, states, deletable)
        if applied is None:
            for key in moved:  # the full sweep of the root finds them again
                diff.moves.pop(key, None)
            return False
        diff.gone.extend(sorted(applied | moved))
        diff.excluded.update(excluded)
        diff.left_out.extend(left_out)
        diff.linked.update(n.shared for n in left_out if n.shared[1])
        self._add_work(notes, states, diff)
        return True

    def _event_deletions_of(
        self,
        root: Root,
        notes: list[NoteFile],
        missing: set[str],
        states: Collection[str],
        deletable: Callable[[], bool],
    ) -> set[str] | None:
        """The deletions file events found in ``root`` that are applied now (those that wait are
        handed to ``bursts``), or None: the root needs a full sweep instead. ``states``: the
        manifest's entries of ``notes``."""
        back = self.bursts.keys(root.name) & {n.key for n in notes}
        # A burst is made of deletions and new notes (a note that came back among them): an
        # edited note's saves (a hot note's, an editor's) do not keep its root busy.
        arrived = bool(back) or any(n.key not in states for n in notes)
        if (missing or arrived) and root.source != "memory":
            self.bursts.heard(root.name)
        if back:
            self.bursts.wait(root.name, (), back=back)
        missing = missing - self._held.get(root.name, set())  # held already: stay held, never "waiting"
        if not missing:
            return missing
        verdict = self._event_verdict(root, len(missing), arrived, deletable)
        if verdict == "sweep":
            return None
        if verdict == "wait":  # judged whole once the root's events go quiet; the rest goes on
            self._wait(root, missing)
            return set()
        return missing

    def _excluded_seen(
        self,
        root: Root,
        notes: list[NoteFile],
        missing: set[str],
        *,
        gone: Sequence[str],
        walked: Sequence[str],
    ) -> tuple[list[NoteFile], dict[str, dict[str, str]]]:
        """The notes of changed paths that no rule leaves out, and the excluded ones where the
        events looked, for ``Diff.excluded`` (a note made, moved or deleted in an excluded folder
        is a link target, or none, at once: only full sweeps recorded them, and links to such a
        note waited for the next one). An indexed one (a rule changed) is ``missing``."""
        if root.source == "memory":
            return notes, {}
        kept: list[NoteFile] = []
        rules: dict[str, str] = {}
        for n in notes:
            rule = self.excluded_by(n.key)
            if rule is None:
                kept.append(n)
            else:
                rules[n.key] = rule
        missing.update(self.manifest.file_states_of(list(rules)))
        folders = {_prefix(root, rel) for rel in [*gone, *walked]}
        files = {root.key_of(rel) for rel in gone if rel.lower().endswith(NOTE_SUFFIXES)}
        excluded: dict[str, dict[str, str]] = {scope: {} for scope in [*folders, *files]}
        for key, rule in rules.items():
            # Each folder the note lies in by its key's "/"s: a checkout of thousands of paths
            # is not every note against every path.
            below = [key[: i + 1] for i, c in enumerate(key) if c == "/" and key[: i + 1] in folders]
            for scope in below:
                excluded[scope][key] = rule
            if key in files or not below:
                excluded[key] = {key: rule}  # a changed file of its own
        return kept, excluded

    def _look(
        self, root: Root, rels: Sequence[str], asking: Asking
    ) -> tuple[list[NoteFile | Skipped], list[str], list[str]]:
        """Stat each changed path of a root: (notes and skipped files found, relative paths gone,
        folders walked whole). ``asking`` is told of each stat and listing (the supervisor gives
        up on one that hangs, as in a sweep)."""
        found: list[NoteFile | Skipped] = []
        walked: list[str] = []
        max_bytes = self.cfg.index.max_file_bytes
        refusal, base = _resolved(root, asking)
        if refusal is not None:  # an inbox made a link, a wiki linked out: its sweep decides
            raise _RootRefused(refusal)
        folders: dict[Path, bool] = {}  # folder -> a link (or no answer): each asked once a batch
        gone, todo = self._other_spellings(root, rels, asking)
        looked = set(todo) | set(rels)
        keys: dict[str, Path] = {}  # key -> the file of the note found for it
        walked_files: set[Path] = set()
        for rel in todo:  # grows by the twins of deleted notes
            path = root.path / rel
            # File events come through folder symlinks too (the watch follows them): a path
            # below one is never a note of this root, as a scan never descends into one.
            if _below_a_link(root.path, rel, folders, asking):
                continue
            try:
                st = _lstat(path, rel, asking)
            except FileNotFoundError:
                gone.append(rel)
                # "Note.MD" beside a deleted "Note.md" owns the key now, and has no event.
                twins = sorted(t for t in _twin_names(rel) if t not in looked and _lexists(root, t, asking))
                todo.extend(twins)
                looked.update(twins)
                continue
            except OSError:
                continue  # unreadable: kept as it is; the next full sweep reports it
            if stat.S_ISDIR(st.st_mode):
                if root.source != "memory":
                    try:
                        listed = list(scan(root, max_bytes, start=rel, asking=asking))
                    except OSError as exc:
                        # Not listed: nothing known of what it holds, kept as it is. Said now (a
                        # chmod 000 is an event for the folder): status showed no problem until
                        # the next full sweep, index.rescanMinutes later.
                        found.extend(_unlisted(path, exc))
                        continue
                    found.extend(listed)
                    walked.append(rel)
                    for n in listed:
                        if isinstance(n, NoteFile):
                            keys.setdefault(n.key, n.path)
                            walked_files.add(n.path)
                continue
            with asked(asking, "stat", rel):  # a link's target resolved and stat'ed
                got = _file(root, path, rel, st, base=base, max_bytes=max_bytes)
            if isinstance(got, NoteFile):
                owner = keys.setdefault(got.key, got.path)
                if owner == got.path and got.path in walked_files:
                    continue  # found by the walk of its folder already
                if owner != got.path:  # "Note.MD" and "Note.Md" left: one key, the first the note
                    got = Skipped(path, TWIN_REASON)
            if got is not None:
                found.append(got)
        return found, gone, walked

    def _event_verdict(self, root: Root, count: int, arrived: bool, deletable: Callable[[], bool]) -> str:
        """What becomes of deletions seen by events: ``apply`` (at once: only a few at a time, on a
        root that is where it was and not empty, with none waiting), ``sweep`` (a full sweep of the
        root and its guard now: it applies at once the moves it finds and what they explain, and
        lets only the loss left wait while the root is busy; the root is not what it was) or
        ``wait`` (deletions of a root whose deletions wait already, in a batch with no new note
        that could be a move's other half; or of a held root: judged whole once it is quiet,
        ``index.bursts``, not listed whole at every batch of an ``rm -r``)."""
        if root.source == "memory":
            self._applied(root, count)
            return "apply"
        ok = deletable()
        waiting = self.bursts.waiting(root.name) > 0
        if ok and not waiting and len(_recent(self._event_deletions, root)) + count <= EVENT_DELETIONS_MAX:
            self._applied(root, count)
            return "apply"
        st = self.supervisor.status(root)
        held = st.offline and st.hold_kind == "mass"
        if (held or (ok and waiting and not arrived)) and self.bursts.busy(root.name):
            return "wait"
        return "sweep"

    def _applied(self, root: Root, count: int) -> None:
        """``count`` deletions of the root applied now by file events: a few a minute go at once,
        and the next judgment counts them."""
        now = time.monotonic()
        for times in (self._event_deletions, self._deleted):
            times[root.name] = _recent(times, root) + [now] * count


# Skipped for a reason that says nothing about the note's text: its indexed text stays.
# Skips that leave the note's entry as it is: a file that cannot be read now, and a twin
# (Note.MD beside Note.md), whose key is its sibling's note.
_KEPT_WHEN_SKIPPED = frozenset({"unreadable", "unreadable folder", TWIN_REASON, CANVAS_TWIN_REASON})


class _RootRefused(Exception):  # noqa: N818 - a reason to sweep the root whole, not a failure
    """A file event's root is refused as a whole (``refusal_of``)."""


def _file(  # noqa: PLR0911 - one return per kind of file
    root: Root, path: Path, rel: str, st: os.stat_result, *, base: Path, max_bytes: int
) -> NoteFile | Skipped | None:
    """A changed path of ``root`` that is no folder: a note, a skip, or None (no note)."""
    linked = stat.S_ISLNK(st.st_mode)
    if linked:  # followed only where a scan follows it
        why = LINK_REASON if root.source == "memory" else None
        try:
            why = why or link_refusal(root, path, base)
            st = os.stat(path)
        except (OSError, RuntimeError):
            # A link to nothing, or a loop: counted as a scan counts it (not until the next
            # full sweep).
            return Skipped(path, "broken symlink") if is_note_name(path.name, root.source) else None
        if why is not None:
            return Skipped(path, why)
    if not is_note_name(path.name, root.source):
        return kind_skipped(root, path, st)
    if not stat.S_ISREG(st.st_mode):  # a pipe or device named like a note: counted, as a scan does
        return Skipped(path, "not a regular file")
    why = name_refusal(root, path.name)
    if why is not None:
        return Skipped(path, why)
    twin = twin_reason(path.name, _Sibling(path))
    if twin is not None:
        return Skipped(path, twin)
    if st.st_size > max_bytes:
        return Skipped(path, TOO_LARGE, st.st_size)
    return NoteFile.of(root.key_of(rel), root, path, rel, st, linked=linked)


def _resolved(root: Root, asking: Asking) -> tuple[str | None, Path]:
    """Why the root may not be read (``refusal_of``) and its real path: look-ups on the share,
    ``asking`` told of them as of a stat of the root."""
    with asked(asking, "stat", "."):
        refusal = refusal_of(root)
        return refusal, real_path(root.path) if refusal is None else root.path  # refused: not resolved


def _lstat(path: Path, rel: str, asking: Asking) -> os.stat_result:
    """The lstat of a changed path, ``asking`` told of it (a hung share is given up on there)."""
    asking.ask("stat", rel)
    try:
        return os.lstat(path)
    finally:
        asking.answered()


def _unlisted(folder: Path, exc: OSError) -> list[Skipped]:
    """What a folder whose listing failed is: unreadable (no permission, an I/O error), its
    path too long, or nothing when it was renamed, removed or replaced by a file since its stat
    (a sync tool's flap; the event of its going or of what took its place follows)."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return []
    return [unreadable_skip(folder, exc, "unreadable folder")]


def _recent(times: dict[str, list[float]], root: Root) -> list[float]:
    """The times of ``root`` in ``times`` within ``EVENT_DELETION_WINDOW_S``."""
    now = time.monotonic()
    return [t for t in times.get(root.name, []) if now - t < EVENT_DELETION_WINDOW_S]


def _lexists(root: Root, rel: str, asking: Asking) -> bool:
    """Whether a path of the root exists (a link to nothing too), ``asking`` told of the look-up."""
    with asked(asking, "stat", rel):
        return os.path.lexists(root.path / rel)


def _below_a_link(top: Path, rel: str, known: dict[Path, bool], asking: Asking) -> bool:
    """Whether a folder between ``top`` and ``rel``'s last part is a symlink (or cannot be told);
    ``known`` keeps each folder's answer for the batch (a checkout of thousands of files). Each
    look-up is asked as a stat: a hung share is given up on there, not waited for."""
    folder = top
    parts = rel.split("/")[:-1]
    for i, part in enumerate(parts):
        folder = folder / part
        if folder not in known:
            try:
                with asked(asking, "stat", "/".join(parts[: i + 1])):
                    known[folder] = stat.S_ISLNK(os.lstat(folder).st_mode)
            except FileNotFoundError:
                return False  # gone: the path's own lstat says so
            except OSError:
                known[folder] = True
        if known[folder]:
            return True
    return False
