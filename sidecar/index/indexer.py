"""Files -> chunks -> stores: sweeps, batched writes, deletions, vector backfill, reconcile.

The write protocol per batch (crash-safe, see DESIGN.md invariant 5): the manifest marks the files
``indexing``; BM25 docs are replaced and vectors of vanished chunks deleted; BM25 commits; then one
manifest transaction records the new chunks and ``indexed``. A start finds any file still marked
``indexing`` / ``deleting`` and redoes it. Chunk ids hash (key, embedded text, occurrence), so an
edit re-embeds only the chunks whose text changed. Imports sources, chunking, embedder, stores.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.config import Config
from sidecar.contracts.errors import StoreError, StoreOutdatedError
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.model.embedder import Embedder, EmbedderSlot, approx_token_count
from sidecar.notes.chunking import ParsedNote, chunk_note
from sidecar.notes.links import aliases_of, drop_links, names_of, replace_links, reresolve
from sidecar.notes.linktext import Link, extract_links
from sidecar.stores.bm25 import Bm25Doc, Bm25Index
from sidecar.stores.manifest import ChunkRecord, FileRecord, FileState, Manifest, embed_hash
from sidecar.stores.vectors import VectorStore
from sidecar.vault.ignore import IgnoreRules
from sidecar.vault.sources import (
    SLUG_RE,
    NoteFile,
    NoteUnreadable,
    Root,
    Skipped,
    agent_inbox,
    decode_note,
    is_note_name,
    read_inbox_note,
    read_note,
    roots,
    scan,
)
from sidecar.vault.supervisor import RootUnreachable, Supervisor

log = logging.getLogger(__name__)

# File events may delete this many notes of a root within the window at once; beyond that, a
# full sweep of the root decides (an emptied mount point sends an event per vanished file).
EVENT_DELETIONS_MAX = 4
EVENT_DELETION_WINDOW_S = 60.0


@dataclass
class Activity:
    """What the indexer is doing now, for health and progress bars."""

    phase: str = "starting"  # starting | scanning | indexing | embedding | idle
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.time)
    sweeps: int = 0
    first_sweep_done: bool = False
    ready_once: bool = False
    scan_skipped: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)  # rule -> notes it leaves out


_SETTLED = ("indexed", "skipped")


@dataclass
class _Diff:
    """What one sweep found: notes to (re)index, keys to delete, skip reasons."""

    work: list[NoteFile] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0


@dataclass(frozen=True)
class _Prepared:
    note: NoteFile
    hash: str
    parsed: ParsedNote | None  # None: unreadable, see skip_reason
    skip_reason: str | None = None
    links: tuple[Link, ...] = ()


def _chunk_id(key: str, embed_text: str, occurrence: int) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(key.encode())
    h.update(b"\0")
    h.update(embed_text.encode())
    h.update(b"\0%d" % occurrence)
    return h.hexdigest()


class Indexer:
    """Owns the write path. One thread calls sweep/index/delete; another may call embed_pending."""

    def __init__(self, cfg: Config, stores: Stores, slot: EmbedderSlot) -> None:
        self.cfg = cfg
        self.stores = stores
        self.slot = slot
        self.activity = Activity()
        self.vectors = Vectoring(stores)
        self.vectors.keep_seconds = cfg.index.keep_deleted_vectors_hours * 3600
        self.vectors.keep_max = cfg.index.keep_deleted_vectors_max
        self.supervisor = Supervisor(cfg, meta=stores.manifest)
        self._unreadable: dict[str, str] = {}  # root name -> what cannot be read there
        self._event_deletions: dict[str, list[float]] = {}  # root name -> times of recent ones
        self.leftover: frozenset[str] | None = None  # paths a failed sweep scanned but did not write
        self._skips_named: set[tuple[str, str]] = set()  # (path, reason) already in the log
        self.ignore = IgnoreRules(cfg.index.exclude, cfg.vault.path, cfg.index.obsidian_excludes)
        # During the first sweep of a start every link is resolved once at its end (_check_links):
        # resolving after each batch as well would redo the whole vault's names again and again.
        self._defer_links = False

    def set_excludes(self, patterns: Sequence[str], obsidian: bool) -> bool:
        """New exclusion rules (config reload); True if they differ (a sweep applies them)."""
        if (tuple(patterns), obsidian) == (self.ignore.patterns, self.ignore.obsidian):
            return False
        self.ignore = IgnoreRules(patterns, self.cfg.vault.path, obsidian)
        return True

    def excluded_by(self, key: str) -> str | None:
        """The rule that leaves this note out of the index, or None."""
        return self.ignore.match_key(key, self.cfg.vault.wiki_subfolder)

    # --- token counting ------------------------------------------------------------------

    def _count_tokens(self, texts: Sequence[str]) -> list[int]:
        model = self.slot.model
        return model.count_tokens(texts) if model is not None else approx_token_count(texts)

    # --- sweeps --------------------------------------------------------------------------

    def sweep(
        self,
        only: Collection[str] | None = None,
        progress: Callable[[Activity], None] | None = None,
        stop: threading.Event | None = None,
        confirm_deletions: Collection[str] = (),
        paths: Collection[str] = (),
    ) -> dict[str, int]:
        """Compare roots (all, or those named in ``only``) with the manifest; index what changed,
        remove what is gone. ``paths`` (from file events) are looked at one by one, without walking
        their roots. ``confirm_deletions`` names roots whose mass deletion the user confirmed."""
        act = self.activity
        act.phase, act.done, act.total, act.started = "scanning", 0, 0, time.time()
        diff = _Diff()
        if not paths:  # Obsidian's settings are read on full sweeps: a memory write touches no vault file
            self.ignore.refresh()
        self._defer_links = not act.first_sweep_done
        excluded: dict[str, int] = {}
        every = self._roots()
        chosen = [r for r in every if only is None or r.name in only]
        if paths:
            rest = [r for r in every if r not in chosen]
            chosen += [r for r in self._diff_paths(paths, rest, diff) if r not in chosen]
        self.supervisor.classify(chosen)
        for root in chosen:
            self._diff_root(root, diff, root.name in confirm_deletions, excluded)
        if only is None:
            act.scan_skipped = diff.skipped
            act.excluded = excluded
        act.phase, act.total = "indexing", len(diff.work) + len(diff.gone)
        self.leftover = None
        if diff.gone:
            self.delete(diff.gone)
            act.done += len(diff.gone)
        changed = 0
        batch = self.cfg.index.batch_files
        for start in range(0, len(diff.work), batch):
            if stop is not None and stop.is_set():
                break
            try:
                changed += self.index_files(diff.work[start : start + batch])
            except BaseException:
                # Scanned, not written (disk full ...): a retry needs only these paths, not a walk.
                self.leftover = frozenset(str(n.path) for n in diff.work[start:])
                raise
            act.done += len(diff.work[start : start + batch])
            if progress is not None:
                progress(act)
        if not act.first_sweep_done:
            self._check_bm25()
            self._defer_links = False
            self._check_links()
        act.sweeps += 1
        act.first_sweep_done = act.first_sweep_done or only is None or bool(chosen)
        act.phase = "idle"
        summary = {
            "changed": changed,
            "deleted": len(diff.gone),
            "unchanged": diff.unchanged,
            "skipped": sum(diff.skipped.values()),
        }
        log.log(
            logging.INFO if chosen or changed or diff.gone else logging.DEBUG,
            "sweep_done changed=%d deleted=%d unchanged=%d skipped=%d seconds=%.2f roots=%s",
            *summary.values(),
            time.time() - act.started,
            ",".join(r.name for r in chosen) or "-",
        )
        return summary

    def _roots(self) -> list[Root]:
        """Configured roots plus inboxes of agents that are indexed but whose folder is gone."""
        out = roots(self.cfg)
        present = {r.agent for r in out if r.source == "memory"}
        indexed = {k.split("/", 2)[1] for k in self.stores.manifest.file_states("memory/")}
        out.extend(Root("memory", agent_inbox(self.cfg, a), agent=a) for a in sorted(indexed - present))
        return out

    def _diff_root(
        self, root: Root, diff: _Diff, confirm: bool, excluded: dict[str, int] | None = None
    ) -> None:
        """Scan one root and add what changed and what is gone to ``diff``."""
        supervisor = self.supervisor
        status = supervisor.status(root)
        t0 = time.time()
        try:
            found = supervisor.list_root(root)
        except RootUnreachable as exc:
            supervisor.mark_offline(root, str(exc))
            return
        notes = [f for f in found if isinstance(f, NoteFile)]
        prefix = root.key_of("x")[:-1]  # "vault/", "wiki/", "memory/<agent>/"
        known = self.stores.manifest.file_states(prefix)
        notes = self._without_excluded(root, notes, known, diff, {} if excluded is None else excluded)
        skipped = [s for s in found if isinstance(s, Skipped)]
        for s in skipped:
            diff.skipped[s.reason] = diff.skipped.get(s.reason, 0) + 1
            if (str(s.path), s.reason) not in self._skips_named:  # named once, not at every sweep
                self._skips_named.add((str(s.path), s.reason))
                log.info("file_skipped path=%s reason=%s", s.path, s.reason)
        status.seen, status.skipped = len(notes), len(skipped)
        seen = {n.key for n in notes}
        # An error reading a folder (or a file's stat) is no evidence that its notes are gone.
        kept = self._unreadable_prefixes(root, skipped)
        missing = [k for k in known if k not in seen and not k.startswith(kept)]
        hold = supervisor.hold_deletions(root, len(known), len(missing), len(notes), confirm)
        if hold is None:
            supervisor.mark_online(root)
            self._event_deletions.pop(root.name, None)
            diff.gone.extend(missing)
        status.last_sweep, status.last_sweep_seconds = time.time(), time.time() - t0
        if hold not in (None, "mass"):
            return  # what is there now is not the share: leave the root alone while it stays so
        self._add_work(notes, known, diff)

    def _add_work(self, notes: Sequence[NoteFile], known: dict[str, FileState], diff: _Diff) -> None:
        for n in notes:
            st = known.get(n.key)
            if st is not None and (st.mtime_ns, st.size) == (n.mtime_ns, n.size) and st.state in _SETTLED:
                diff.unchanged += 1
            else:
                diff.work.append(n)

    def _unreadable_prefixes(self, root: Root, skipped: Sequence[Skipped]) -> tuple[str, ...]:
        """Key prefixes (and keys) under folders and files that could not be read; reported."""
        out: list[str] = []
        paths: list[str] = []
        for s in skipped:
            if s.reason not in ("unreadable folder", "unreadable"):
                continue
            try:
                rel = s.path.relative_to(root.path).as_posix()
            except ValueError:
                continue
            paths.append(str(s.path))
            out.append(root.key_of(rel) if s.reason == "unreadable" else root.key_of(rel + "/x")[:-1])
        self.supervisor.status(root).unreadable = paths
        problems = self.stores.problems
        if paths:
            self._unreadable[root.name] = (
                f"{len(paths)} folder(s) or note(s) of {root.name} cannot be read ({paths[0]}"
                f"{', ...' if len(paths) > 1 else ''}); their notes stay in the index as they were"
            )
        else:
            self._unreadable.pop(root.name, None)
        if self._unreadable:
            problems.report("unreadable", "; ".join(self._unreadable.values()))
        else:
            problems.clear("unreadable")
        return tuple(out)

    def _diff_paths(self, paths: Collection[str], candidates: Sequence[Root], diff: _Diff) -> list[Root]:
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

    def _diff_group(self, root: Root, rels: set[str], diff: _Diff) -> bool:
        """Changed paths of one root into ``diff``; False if the root needs a full sweep instead."""
        try:
            found, gone = self.supervisor.bounded(root, functools.partial(self._look, root, sorted(rels)))
        except RootUnreachable:
            return False  # the full sweep marks it offline with the reason
        notes = [f for f in found if isinstance(f, NoteFile)]
        for s in found:
            if isinstance(s, Skipped):
                diff.skipped[s.reason] = diff.skipped.get(s.reason, 0) + 1
        manifest = self.stores.manifest
        missing: set[str] = set()
        for rel in gone:
            if rel.lower().endswith(".md"):
                missing.update(manifest.file_states_of([root.key_of(rel)]))
            else:
                missing.update(manifest.file_states(root.key_of(rel + "/x")[:-1]))
        missing -= {n.key for n in notes}
        if missing and not self._may_delete(root, len(missing)):
            return False
        diff.gone.extend(sorted(missing))
        self._add_work(notes, manifest.file_states_of([n.key for n in notes]), diff)
        return True

    def _look(self, root: Root, rels: Sequence[str]) -> tuple[list[NoteFile | Skipped], list[str]]:
        """Stat each changed path of a root: (notes and skipped files found, relative paths gone)."""
        found: list[NoteFile | Skipped] = []
        gone: list[str] = []
        max_bytes = self.cfg.index.max_file_bytes
        for rel in rels:
            path = root.path / rel
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                gone.append(rel)
                continue
            except OSError:
                continue  # unreadable: kept as it is; the next full sweep reports it
            if stat.S_ISDIR(st.st_mode):
                if root.source != "memory":
                    with contextlib.suppress(OSError):
                        found.extend(scan(root, max_bytes, start=rel))
                continue
            if stat.S_ISLNK(st.st_mode):  # followed only to a file inside the root, as a scan does
                try:
                    inside = path.resolve(strict=True).is_relative_to(root.path.resolve())
                    st = os.stat(path)
                except (OSError, RuntimeError):
                    continue
                if not inside:
                    found.append(Skipped(path, "symlink leads outside the root"))
                    continue
            if not stat.S_ISREG(st.st_mode) or not is_note_name(path.name):
                continue
            if root.source == "memory" and not SLUG_RE.fullmatch(path.name[:-3]):
                found.append(Skipped(path, "memory note name is not a valid slug"))
            elif st.st_size > max_bytes:
                found.append(Skipped(path, "too large"))
            else:
                found.append(NoteFile(root.key_of(rel), root, path, rel, st.st_mtime_ns, st.st_size))
        return found, gone

    def _may_delete(self, root: Root, count: int) -> bool:
        """Deletions seen by events are applied at once only a few at a time, on a root that is
        where it was and not empty; more go through a full sweep of the root and its guard."""
        now = time.monotonic()
        recent = [t for t in self._event_deletions.get(root.name, []) if now - t < EVENT_DELETION_WINDOW_S]
        if root.source != "memory" and (
            len(recent) + count > EVENT_DELETIONS_MAX or not self.supervisor.deletable(root)
        ):
            return False
        self._event_deletions[root.name] = recent + [now] * count
        return True

    def _without_excluded(
        self,
        root: Root,
        notes: list[NoteFile],
        states: dict[str, FileState],
        diff: _Diff,
        counts: dict[str, int],
    ) -> list[NoteFile]:
        """Drop excluded notes; indexed ones are deleted at once (a rule is no vanished mount, so
        the mass-deletion guard does not hold them)."""
        if root.source == "memory":
            return notes
        kept: list[NoteFile] = []
        for n in notes:
            rule = self.excluded_by(n.key)
            if rule is None:
                kept.append(n)
            else:
                counts[rule] = counts.get(rule, 0) + 1
        prefix = root.key_of("x")[:-1]
        for key in [k for k in states if k.startswith(prefix) and self.excluded_by(k) is not None]:
            diff.gone.append(key)
            del states[key]
        return kept

    # --- writing ---------------------------------------------------------------------------

    def _prepare(self, note: NoteFile, known_hash: str | None, data: bytes | None = None) -> _Prepared | None:
        limit = self.cfg.index.max_file_bytes
        try:
            if data is not None:  # a memory write's own bytes: never read back through a path
                text = decode_note(data, limit)
            elif note.root.source == "memory":
                data, text = read_inbox_note(note.root, note.path.name, limit)
            else:
                data, text = read_note(note.path, limit)
        except FileNotFoundError:
            return None  # vanished between scan and read: the next sweep deletes it
        except NoteUnreadable as exc:
            log.warning("file_skipped path=%s reason=%s", note.path, exc.reason)
            return _Prepared(note, "", None, exc.reason)
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        if digest == known_hash:
            return _Prepared(note, digest, None)
        title = Path(note.rel).stem
        try:
            parsed = chunk_note(
                text,
                title=title,
                count_tokens=self._count_tokens,
                max_tokens=self.cfg.chunking.max_tokens,
                overlap=self.cfg.chunking.overlap,
            )
        except (ValueError, RecursionError) as exc:  # pathological Markdown: skip this note only
            log.warning("file_skipped path=%s reason=parse error %s", note.path, exc)
            return _Prepared(note, digest, None, f"parse error: {type(exc).__name__}")
        if parsed.front_matter_error:
            log.info("front_matter_ignored path=%s reason=%s", note.path, parsed.front_matter_error)
        return _Prepared(note, digest, parsed, links=tuple(extract_links(text)))

    def index_files(self, notes: Sequence[NoteFile], data: dict[str, bytes] | None = None) -> int:
        """Read (or take from ``data``, by key), chunk and write a batch of notes; returns how many
        changed content. Notes a rule excludes are dropped here too, so events cannot bring them
        back."""
        notes = [n for n in notes if n.root.source == "memory" or self.excluded_by(n.key) is None]
        states = self.stores.manifest.file_states_of([n.key for n in notes])
        prepared: list[_Prepared] = []
        for note in notes:
            st = states.get(note.key)
            known = st.hash if st is not None and st.state == "indexed" else None
            p = self._prepare(note, known, (data or {}).get(note.key))
            if p is None:
                continue
            if known is not None and p.skip_reason is not None and p.skip_reason.startswith("unreadable"):
                # A read error is no evidence the note changed: keep what is indexed.
                log.warning("file_kept path=%s reason=%s", note.path, p.skip_reason)
                continue
            if p.parsed is None and p.skip_reason is None:
                self.stores.manifest.touch(note.key, note.mtime_ns, note.size)
                continue
            prepared.append(p)
        if prepared:
            self._write(prepared)
        return len(prepared)

    def _records(self, p: _Prepared, state: str) -> tuple[FileRecord, list[ChunkRecord]]:
        n = p.note
        record = functools.partial(
            FileRecord, n.key, n.root.source, n.root.agent, n.rel, n.mtime_ns, n.size, p.hash
        )
        if p.parsed is None:
            skipped = "skipped" if state != "indexing" else state
            return record(skipped, title=Path(n.rel).stem, error=p.skip_reason), []
        parsed = p.parsed
        seen: dict[str, int] = {}
        chunks: list[ChunkRecord] = []
        for c in parsed.chunks:
            occurrence = seen.get(c.embed_text, 0)
            seen[c.embed_text] = occurrence + 1
            chunks.append(
                ChunkRecord(
                    _chunk_id(n.key, c.embed_text, occurrence),
                    n.key,
                    c.ord,
                    c.text,
                    c.headings,
                    c.start_line,
                    c.end_line,
                    c.embed_text,
                    c.tokens,
                    embed_hash(c.embed_text) if c.embed else "",
                )
            )
        return record(
            state,
            title=parsed.title,
            tags=parsed.tags,
            front_matter=json.dumps(parsed.front_matter, ensure_ascii=False),
            error=parsed.front_matter_error,
        ), chunks

    def _write(self, prepared: Sequence[_Prepared]) -> None:
        stores = self.stores
        built = [self._records(p, "indexed") for p in prepared]
        with stores.write_lock:
            stores.manifest.mark(self._records(p, "indexing")[0] for p in prepared)
            vanished: list[str] = []
            for (record, chunks), p in zip(built, prepared, strict=True):
                old = stores.manifest.chunk_ids(record.key)
                vanished.extend(old - {c.chunk_id for c in chunks})
                stores.bm25.delete_key(record.key)
                title = " ".join([record.title, *(p.parsed.aliases if p.parsed else ())])
                stores.bm25.add(
                    Bm25Doc(
                        c.chunk_id, c.key, record.source, record.agent, title, " ".join(c.headings), c.text
                    )
                    for c in chunks
                )
            if vanished:
                self.vectors.delete_ids(vanished)
            stores.bm25.commit()
            with stores.manifest.transaction() as db:
                names: set[str] = set()
                for (record, chunks), p in zip(built, prepared, strict=True):
                    stores.manifest.commit_file(record, chunks, db)
                    replace_links(db, record.key, p.links)
                    names |= names_of(record.key, aliases_of(p.parsed.front_matter) if p.parsed else ())
                # A new or changed note may be what an ambiguous or dangling name now means.
                if not self._defer_links:
                    reresolve(db, self.cfg.vault.wiki_subfolder, names=names, keys=[r.key for r, _ in built])
        self.vectors.changed.set()

    def delete(self, keys: Sequence[str]) -> None:
        """Remove notes from every store (intent first, so a crash mid-way is redone)."""
        if not keys:
            return
        stores = self.stores
        with stores.write_lock:
            stores.manifest.mark_state(keys, "deleting")
            for key in keys:
                stores.bm25.delete_key(key)
            self.vectors.delete_keys(list(keys))
            stores.bm25.commit()
            with stores.manifest.transaction() as db:
                for key in keys:
                    stores.manifest.delete_file(key, db)
                drop_links(db, keys)
                if not self._defer_links:
                    reresolve(db, self.cfg.vault.wiki_subfolder, names=_names(keys), keys=list(keys))
        log.info("notes_deleted count=%d", len(keys))

    # --- reconcile and rebuild ---------------------------------------------------------------

    def finish_interrupted(self) -> None:
        """Redo deletions a crash interrupted (interrupted indexing is redone by the next sweep)."""
        pending = self.stores.manifest.keys_in_state("deleting")
        if pending:
            log.info("reconcile_deletions count=%d", len(pending))
            self.delete(pending)

    def _check_bm25(self) -> None:
        """After the first sweep, BM25 must hold exactly the manifest's chunks; else rebuild it."""
        expected = self.stores.manifest.indexed_chunk_count()
        actual = self.stores.bm25.num_docs()
        if expected != actual:
            # A new (upgraded or moved-aside) index is expected to be empty: refilling it is routine.
            level = logging.INFO if actual == 0 else logging.WARNING
            log.log(
                level,
                "index_rebuilt store=bm25 reason=count mismatch expected=%d actual=%d",
                expected,
                actual,
            )
            self.rebuild_bm25()

    def _check_links(self) -> None:
        """Once per start: resolve every link again (the rules or the notes may have changed while
        the daemon was down, e.g. a wiki subfolder renamed in the config)."""
        with self.stores.write_lock, self.stores.manifest.transaction() as db:
            changed = reresolve(db, self.cfg.vault.wiki_subfolder, everything=True)
        if changed:
            log.info("links_reresolved count=%d", changed)

    def clear(self) -> None:
        """Forget everything indexed (for a rebuild); the next sweep reads every note again."""
        stores = self.stores
        with stores.write_lock:
            with stores.manifest.transaction() as db:
                stores.manifest.clear(db)
            stores.bm25.delete_all()
            stores.bm25.commit()
            self.vectors.clear()
        self.activity.first_sweep_done = self.activity.ready_once = False
        log.info("index_cleared reason=rebuild requested")

    def rebuild_bm25(self) -> None:
        """Refill Tantivy from the manifest: no file is read, no vector recomputed."""
        stores = self.stores
        with stores.write_lock:
            stores.bm25.delete_all()
            docs = []
            for v in stores.manifest.all_chunks():
                docs.append(
                    Bm25Doc(v.chunk_id, v.key, v.source, v.agent, v.title, " ".join(v.headings), v.text)
                )
            stores.bm25.add(docs)
            stores.bm25.commit()

    def repair_bm25(self, reason: str) -> None:
        """A keyword index that fails under the running daemon: move it aside and refill a fresh
        one from the manifest (seconds even for large vaults; no note is read)."""
        stores = self.stores
        with stores.write_lock:
            old = stores.bm25
            with contextlib.suppress(StoreError, ValueError, OSError, RuntimeError):
                old.close()
            aside = move_aside(old.path)
            stores.bm25 = Bm25Index(old.path)
            self.rebuild_bm25()
        log.error("index_rebuilt store=bm25 reason=%s moved_to=%s", reason, aside)
        stores.problems.note("stores", f"the keyword index failed ({reason}); moved aside and rebuilt")
        stores.problems.clear("keyword_search")

    def repair_vectors(self, reason: str) -> bool:
        """Vector searches keep failing (or the table could not be attached): open it afresh and
        read it whole; if it reads, serve the fresh handle, else move it aside and embed again into
        a new table (keyword search answers meanwhile). True if vectors are recomputed. Left to a
        restart during a model switch, where two tables share the folder."""
        stores = self.stores
        serving = stores.serving
        model = serving.model if serving is not None else self.slot.model
        if model is None or stores.building is not None:
            return False
        with stores.write_lock:
            if serving is not None:
                serving.store.stop_build()
            store = open_vectors(self.cfg, model.model_id, model.dim, model.pooling, stores.problems)
            try:
                store.verify()
                rebuilt = False
            except StoreError as exc:
                discard_vectors(store.path, f"could not be read ({exc}; searches: {reason})", stores.problems)
                store = open_vectors(self.cfg, model.model_id, model.dim, model.pooling, stores.problems)
                rebuilt = True
            self.vectors.attach(store, model)
        stores.problems.clear("vector_search")
        log.warning("vectors_repaired table=%s recomputed=%s", store.name, rebuilt)
        return rebuilt

    def attach_vectors(self, store: VectorStore, model: Embedder | None = None) -> None:
        """Serve vectors from ``store`` (model: the loaded one unless given)."""
        model = model or self.slot.model
        assert model is not None
        self.vectors.attach(store, model)

    def index_now(self, root: Root, path: Path, written: tuple[bytes, int] | None = None) -> str:
        """Index one note synchronously, vectors included (memory writes are searchable on return).
        ``written``: the bytes and mtime just written, indexed as they are (no second read)."""
        rel = path.relative_to(root.path).as_posix()
        key = root.key_of(rel)
        if written is not None:
            data, mtime_ns = written
            note = NoteFile(key, root, path, rel, mtime_ns, len(data))
            self.index_files([note], {key: data})
        else:
            st = path.stat()
            note = NoteFile(key, root, path, rel, st.st_mtime_ns, st.st_size)
            self.index_files([note])
        self.vectors.embed_key(note.key)
        return note.key

    def embed_pending(self, batch: int = 256) -> int:
        """Embed one batch of chunks still without vectors; returns how many were stored."""
        return self.vectors.embed_pending(batch)

    def index_state(self, pending_vectors: int, embedder_state: str) -> str:
        """``building`` until the first sweep is done and no chunk waits for a vector it can get."""
        act = self.activity
        attached = self.stores.serving is not None
        waiting = embedder_state in ("idle", "loading") or (
            embedder_state == "ok" and (pending_vectors > 0 or not attached)
        )
        if act.first_sweep_done and not waiting:
            act.ready_once = True  # later edits queue a few vectors without flipping back to building
        return "ready" if act.ready_once else "building"

    def optimize_vectors(self) -> None:
        """Scheduled compaction of the vector tables (also done after every N writes)."""
        try:
            self.vectors.optimize()
        except StoreError as exc:
            log.error("optimize_failed error=%s", exc)

    def counts(self) -> dict[str, Any]:
        return self.stores.manifest.counts()


def _names(keys: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for k in keys:
        out |= names_of(k)
    return out


def open_stores(cfg: Config) -> Stores:
    """Open manifest and BM25; a store that cannot be opened is moved aside and started fresh."""
    index_dir = cfg.index_dir
    index_dir.mkdir(parents=True, exist_ok=True)
    problems = Problems()
    manifest = _open_or_reset(index_dir / "manifest.sqlite", Manifest, cfg, problems)
    bm25 = _open_or_reset(index_dir / "bm25", Bm25Index, cfg, problems)
    return Stores(manifest, bm25, problems=problems)


def _open_or_reset(path: Path, opener: Callable[[Path], Any], cfg: Config, problems: Problems) -> Any:
    try:
        return opener(path)
    except StoreOutdatedError as exc:
        # Derived data in an older layout (e.g. the BM25 fields of 0.2): replaced, not kept.
        log.info("index_upgraded store=%s reason=%s", path.name, exc)
        shutil.rmtree(path)
        return opener(path)
    except StoreError as exc:
        aside = move_aside(path)
        log.error("index_rebuilt store=%s reason=%s moved_to=%s", path.name, exc, aside)
        problems.note("stores", f"{path.name} could not be opened ({exc}); moved to {aside.name} and rebuilt")
        if path.name == "manifest.sqlite":
            # Without the manifest the other stores cannot be trusted: start them over too.
            for other in (cfg.index_dir / "bm25", cfg.index_dir / "vectors"):
                if other.exists():
                    move_aside(other)
        return opener(path)


def move_aside(path: Path) -> Path:
    """Rename a broken store to ``<name>.broken-<time>`` (kept for inspection, never deleted)."""
    target = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target


def open_vectors(
    cfg: Config, model_id: str, dim: int, pooling: str, problems: Problems | None = None
) -> VectorStore:
    path = cfg.index_dir / "vectors"
    opts: dict[str, Any] = {
        "optimize_every": cfg.index.optimize_every_writes,
        "ann_threshold": cfg.search.ann_threshold,
        "nprobes": cfg.search.ann_probes,
        "ann_kind": cfg.search.ann_index,
    }
    try:
        return VectorStore(path, model_id, dim, pooling, **opts)
    except StoreError as exc:
        discard_vectors(path, f"could not be opened ({exc})", problems)
        return VectorStore(path, model_id, dim, pooling, **opts)


def discard_vectors(path: Path, why: str, problems: Problems | None) -> None:
    """Move a broken vector folder aside; the chunks are embedded again into a new table."""
    aside = move_aside(path)
    log.error("index_rebuilt store=vectors reason=%s moved_to=%s", why, aside)
    if problems is not None:
        problems.note("stores", f"vectors {why}; moved to {aside.name}, re-embedding")
