"""The ``health`` op, a mixin of ``Handlers`` (``handlers``): the daemon's state as status and
doctor read it (the index and its progress, the embedder, the roots, problems, the stores moved
aside, the daily-note formats, the asking agent's inbox). Its own module because it is the one op
that reads every part of the daemon and changes none; the state it works on is the handlers' own,
made in ``Handlers.__init__``.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar import __version__
from sidecar.config import Config
from sidecar.contracts.protocol import PROTOCOL_VERSION, Request, check_known
from sidecar.daemon import limits
from sidecar.index import repair
from sidecar.index.activity import Activity
from sidecar.index.indexer import TOKENIZER_WAIT_S, Indexer
from sidecar.index.problems import Problems
from sidecar.index.repair import compaction_current, compaction_due, memory_gap
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.memory.ops import MemoryOps
from sidecar.model.embedder import EmbedderSlot
from sidecar.notes.links import LinkGraph
from sidecar.runtime.foreground import FOREGROUND
from sidecar.runtime.notify import under_service_manager
from sidecar.runtime.release import WRITERS_META, build_id, newer_writer, other_build, read_writers
from sidecar.search.retrieval import Retriever
from sidecar.stores.aside import MovedAside, moved_aside
from sidecar.stores.frozen import IndexFlags
from sidecar.stores.manifest import Manifest
from sidecar.vault.supervisor import Supervisor

if TYPE_CHECKING:
    from sidecar.daemon.handlers import ServiceState


class HealthOp:
    """The ``health`` op of ``Handlers`` (which sets the state below)."""

    cfg: Config
    indexer: Indexer
    manifest: Manifest
    supervisor: Supervisor
    vectors: Vectoring
    problems: Problems
    retriever: Retriever
    slot: EmbedderSlot
    service: ServiceState
    memory: MemoryOps
    limits: limits.Limits

    if TYPE_CHECKING:  # the handlers' own (``SearchOps``)

        def _building(self) -> tuple[int, int] | None: ...

    def health(self, req: Request) -> dict[str, Any]:
        check_known(req.params, ())
        # Every manifest read of the answer in one read transaction on a reader: of one moment,
        # and no scan (counts, the largest waiting note, the links' totals) holds a write back.
        # The looks at the disk that read nothing of the manifest are made before it, outside
        # that transaction: a TRUNCATE checkpoint (a switch to writable, a shrink, the daily
        # give-back) waits, the writer's lock held, for as long as a reader holds one, and the
        # inbox's count waits up to 2 s on a share that hangs, the index's flags are up to 2,000
        # statx calls (30-60 ms, 290 ms on a loaded machine).
        looked = _Looked(
            {"inbox": self.memory.usage(req.agent)} if req.agent is not None else {},
            self.vectors.stores.flags(),
            moved_aside(self.cfg.index_dir),
        )
        with self.manifest.snapshot():
            answer = self._health(looked)
        answer.update(looked.inbox)  # last, as it was
        return answer

    def _health(self, looked: _Looked) -> dict[str, Any]:
        act = self.indexer.activity
        # The indexer's state before any count: read after them, a sweep that ended meanwhile
        # said "idle" (and "ready") beside files counted before its batch was written; a sweep
        # ends by its phase, so "idle" read first means its notes are in what is counted next.
        phase, sweeps, first_done = act.phase, act.sweeps, act.first_sweep_done
        # Likewise the `index` requests done (`sidecar index` prints the counts of the answer
        # that says its own is): a sweep ends before its request is counted done.
        asked_done, rebuilding, rebuild_queued = (
            self.service.asked_done(),
            self.service.rebuilding(),
            self.service.rebuild_queued(),
        )
        counts = self.manifest.counts()
        embedder = self.slot.describe()
        # With the model off by configuration no chunk waits for a vector: none will come.
        pending = self.manifest.pending_count() if embedder["state"] != "off" else 0
        # The chunks the last indexing of a note written continuously added are no backlog while the
        # model computes their vectors; with it failed, loading or off every waiting chunk counts.
        ok = embedder["state"] == "ok"
        caps = self.vectors.stores.continuous()
        continuous = limits.continuous(self.manifest, caps, pending if ok else 0)
        backlog = pending - (continuous["pending_vectors"] if continuous else 0)
        state = self.indexer.index_state(backlog, embedder["state"], first_done)
        vec = self.vectors
        rate = vec.rate(vec.stores.serving)  # recent batches of the serving table
        return {
            "version": __version__,
            "build": build_id(),  # changes with the code: a restart after an upgrade is told by it
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            # Run by the service manager (systemd's notify socket, a launchd agent's label), else
            # a person's `sidecar serve` in a terminal: what a restart is for each differs.
            "service": under_service_manager(self.cfg.notify_socket),
            "started": self.service.started,
            "uptime_seconds": round(self.service.uptime(), 1),
            "clock": self._clock(),
            "embedder": embedder,
            "index": {
                "state": state,
                # The release that last wrote the index and the newest that ever did; the newest
                # again when it is newer than this daemon (a downgrade), else None.
                "written_by": read_writers(writers := self.manifest.get_meta(WRITERS_META)) or None,
                "newer_writer": newer_writer(writers),
                # Another build of this version that wrote it before this daemon (a downgrade
                # between two checkouts of one version is not told by the version), else None.
                "other_build": other_build(read_writers(writers), build_id()),
                "phase": phase,
                # Whether a sweep of every root has ended since the start (or since a rebuild
                # emptied the index): every note counted below is read. ``sweeps`` counts sweeps
                # of file events' paths or of some roots too, which may run before it.
                "first_sweep_done": first_done,
                # With the sweep's notes per second once it has a pace (``rough`` while it
                # settles): status' estimate of the time left.
                "progress": {"done": act.done, "total": act.total, **_sweep_pace(act)},
                # Seconds notes have waited to be cut for the model's tokenizer (it loads, or a
                # first start converts the model), else None.
                "tokenizer_wait_seconds": (
                    None
                    if (since := act.tokenizer_wait_since) is None
                    else round(max(act.clock() - since, 0.0), 1)
                ),
                "tokenizer_wait_max_seconds": TOKENIZER_WAIT_S,
                # A note whose read has not answered for a second or more (a share that hangs):
                # {root, path, seconds, timeout_seconds}, else None.
                "waiting": self.supervisor.describe_waiting(),
                "files": counts["files"],
                "chunks": counts["chunks"],
                "pending_vectors": pending,
                # Chunks cut again during a model switch, left to the new model's table: no
                # vector serves them, found by keywords only until the switch ends.
                "left_to_switch": self.manifest.left_to_switch() if embedder["state"] != "off" else 0,
                # The note with most of the backlog (a long note can be most of it), and the
                # chunks past index.maxVectorChunksPerNote found by keywords only.
                "pending_largest": self.limits.pending_largest(backlog, caps if continuous and ok else None),
                # Notes written continuously (a log appended to all the time): each change indexed
                # at most a minute later; {notes, pending_vectors (theirs, of the above), examples}.
                "continuous": continuous,
                "keyword_only": self.limits.keyword_only() if embedder["state"] != "off" else None,
                "embed_rate_chunks_per_second": round(rate, 2) if rate else None,
                "embed_rate_rough": vec.rough(vec.stores.serving) if rate else None,
                "by_source": counts["by_source"],
                "by_agent": counts["by_agent"],
                "skipped": {**act.scan_skipped, **{k or "unknown": v for k, v in counts["skipped"].items()}},
                # Which files (vault and wiki, a few), and the limit "too large" means.
                "skipped_files": limits.skipped_files(self.indexer, self.manifest),
                "max_file_bytes": self.cfg.index.max_file_bytes,
                "excluded": act.excluded,
                # Templates folders indexed as notes: their plugin is switched off in Obsidian.
                "templates_indexed": self.indexer.ignore.templates_indexed(
                    self.manifest.has_notes, self.cfg.vault.wiki_subfolder
                ),
                "front_matter_unread": counts["front_matter_unread"],
                "links": LinkGraph(self.manifest.read).totals(),
                # The pass reading unchanged notes' links again after an upgrade, while it runs.
                "links_reread": (
                    {"done": lp.done, "total": lp.total, "waiting": list(lp.waiting)}
                    if (lp := self.indexer.links.progress) is not None
                    else None
                ),
                # The keyword index being refilled in this version's layout beside the old one,
                # which answers searches meanwhile (an upgrade's first start).
                "keyword_upgrade": self.vectors.stores.upgrading,
                # Refilled in place instead (no room for a copy beside): the keyword arm finds
                # nothing until it ends; {done, total} chunks, else None.
                "keyword_upgrade_in_place": _in_place(self.vectors.stores.upgrade_in_place),
                # A large vault's keyword index rewritten beside the live one (its deleted notes
                # dropped), which answers searches meanwhile: {phase, done, total}, else None.
                "keyword_compaction": _compaction(self.vectors.stores.keyword_compaction),
                # What came of the last run that found that rewrite due (compacted, skipped, gave
                # way...), its reason, when and the back-off after a give-way; None also once the
                # index it is about was replaced or rebuilt.
                "keyword_compaction_last": _compaction_last(
                    self.vectors.stores, self.cfg.index.optimize_minutes
                ),
                # While a person's search reads the agents' own keyword indexes instead of the one
                # of all memory (being filled, damaged, read-only): why, and how many agents'
                # memory it finds by no word meanwhile (their own index removed as unused).
                "memory_all": (
                    None
                    if (gap := memory_gap(self.vectors.stores)) is None
                    else {"state": gap[0], "agents_not_searchable": gap[1]}
                ),
                # Agents' inboxes refused (a symbolic link, another user's folder), one entry per
                # refused folder: its notes left the index (``sidecar index`` names them).
                "refused_inboxes": self.indexer.changes.refused.summary(),
                "sweeps": sweeps,
                # The number of the last `index` request (its reply's ``ticket``) whose sweep has
                # ended, whether a rebuild asked for is queued or under way, and whether it is
                # still queued (the progress shown is then the sweep's under way, not its own).
                "asked_done": asked_done,
                "rebuilding": rebuilding,
                "rebuild_queued": rebuild_queued,
                # File changes waiting or being applied (``catchingUp`` of answers): done, total,
                # and the moved notes whose old entry is being removed now (``files`` no longer
                # counts them: the deletion marked them first).
                "catching_up": self._catching_up(),
                # False while a new or rebuilt index has not read every note (a build cut short,
                # a folder offline): its searches say so (``indexing``).
                "complete": not self.indexer.reading_first_time,
                # The index's file made immutable (chattr +i: a backup tool's or an admin's flag),
                # else None: nothing can be written to it meanwhile, searches read it as it is.
                "immutable": str(flags.found) if (flags := looked.flags).found else None,
                # "all": every entry of the index within the check's reach was asked; "partial": it
                # stopped at its bound (a crowded folder, 2,000 entries), so a flag further in was
                # not looked for (the files a write touches first always are).
                "immutable_checked": "all" if flags.complete else "partial",
                # Copies of damaged stores kept for inspection (removed after a month); ``newer``:
                # a newer release's, replaced by a rebuild asked for after a downgrade; ``retired``:
                # a previous model's vectors no switch used, its model gone.
                "moved_aside": [
                    {
                        "name": c.path.name,
                        "store": c.store,
                        "age_days": round(c.age_days, 1),
                        "newer": c.newer,
                        "retired": c.retired,
                    }
                    for c in looked.aside
                ],
            },
            "roots": self.supervisor.describe(self._watched),
            "vectors": vec.describe(),
            "problems": self.problems.describe(),
            "queue": {"depth": self.service.queue_depth()},
            "foreground": FOREGROUND.describe(),
            "socket": str(self.cfg.socket_path),
            "home": str(self.cfg.home),
            # The configuration file it read (None: none, defaults): named to a daemon of another
            # home refused on this socket, and by doctor.
            "config_file": str(self.cfg.source_file) if self.cfg.source_file else None,
            "vault": str(self.cfg.vault.path) if self.cfg.vault.path else None,
            # The daily-note formats in force and the settings file each came from: what dates a
            # note by its name (an unreadable file is a problem of obsidian_settings); those of a
            # plugin switched off under a key of their own, so a client that predates it does not
            # print them as in force.
            "daily_notes": [d for d in self.indexer.daily_formats.describe() if "off" not in d],
            "daily_notes_off": [d for d in self.indexer.daily_formats.describe() if "off" in d],
            # The weekday weeks begin on for time phrases, and how it was read (Calendar plugin).
            "week_start": self.indexer.week_start.describe(),
        }

    def _catching_up(self) -> dict[str, Any] | None:
        got = self.service.catching_up()
        if got is None or self._building() is not None:
            return None
        act = self.indexer.activity
        by_source = dict(act.leaving) if act.phase == "indexing" else {}
        return {
            "done": got[0],
            "total": got[1],
            "recut": got[2],
            "leaving": sum(by_source.values()),
            "leaving_by_source": by_source,
        }

    def _watched(self, path: str) -> bool:
        """Whether a live file watch covers this root (else it is only swept)."""
        return any(Path(path).is_relative_to(w) for w in self.service.watched())

    def _clock(self) -> dict[str, str]:
        """The daemon's own day and time zone: time phrases of a client that sends no ``today``
        are read against them."""
        now = dt.datetime.now().astimezone()
        offset = now.strftime("%z")
        return {
            "today": self.retriever.today().isoformat(),
            "timeZone": now.tzname() or "",
            "utcOffset": f"{offset[:3]}:{offset[3:]}" if offset else "",
        }


@dataclass(frozen=True)
class _Looked:
    """What a health call looks at on the disk before its manifest snapshot (``health``)."""

    # The asking agent's own inbox (an agent near memory.maxInboxBytes sees it coming), as
    # {"inbox": ...}, else empty (no agent asks).
    inbox: dict[str, Any]
    flags: IndexFlags
    aside: list[MovedAside]


def _in_place(progress: tuple[int, int] | None) -> dict[str, int] | None:
    return None if progress is None else {"done": progress[0], "total": progress[1]}


def _compaction(state: tuple[str, int, int] | None) -> dict[str, Any] | None:
    return None if state is None else {"phase": state[0], "done": state[1], "total": state[2]}


def _compaction_last(stores: Stores, every_minutes: float) -> dict[str, Any] | None:
    """The last compaction run's outcome, with the index's deleted documents now and whether it
    is still due: Tantivy's own merges drop them with no compaction, and status said for weeks
    that they weighed in the scores. None once the index it is about was replaced or rebuilt
    (``compaction_current``). ``every_minutes``: the runs' interval, for the back-off's next try."""
    if (last := stores.keyword_compaction_last) is None or not compaction_current(stores):
        return None
    about = stores.keyword_compaction_of
    age = max(repair._age_clock() - about[2], 0.0) if about is not None else None
    deleted, total = stores.bm25.deleted_docs()  # the segments' meta files: no document read
    backoff = stores.keyword_backoff
    return {
        "outcome": last[0],
        "reason": last[1],
        "at": last[2],
        # Seconds since, by a clock that counts a suspend and no wall clock step (CLOCK_BOOTTIME;
        # elsewhere the monotonic clock, which stops while a Mac sleeps).
        "age_seconds": None if age is None else round(age, 1),
        "deleted_now": deleted,
        "due_now": compaction_due(deleted, total),
        # After a give-way that wasted a whole fill: how often in a row, the due runs still to
        # skip, and about when the next try comes (the runs' interval after the last run). Kept
        # in the manifest across a restart (``repair.remembered_backoff``), shown once a run
        # after the restart put an outcome on record.
        "backoff": (
            None
            if backoff is None or age is None
            else {
                "gave_way": backoff[0],
                "runs_to_skip": backoff[1],
                "next_try_seconds": round(max((backoff[1] + 1) * every_minutes * 60 - age, 0.0)),
            }
        ),
    }


def _sweep_pace(act: Activity) -> dict[str, Any]:
    """The sweep's pace for health's ``progress``: notes written per second (null before it
    has one: the first seconds, or between sweeps) and whether it still settles."""
    rate = act.pace.rate if act.phase == "indexing" else None
    # Three significant digits: rounded to hundredths, a sweep slower than one note in 200 s had no rate.
    per_second = float(f"{rate:.3g}") if rate else None
    return {"notes_per_second": per_second, "rough": act.pace.rough if rate else None}
