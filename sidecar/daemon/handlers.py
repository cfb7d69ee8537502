"""One function per protocol op. Parameters are validated here (those search and recall share:
``searchparams``); errors are raised as typed SidecarErrors and the server turns them into error
responses; search results become replies through ``sidecar.contracts.wire``. The note a reference
names: ``naming``; whether a link's heading or block is in its note: ``anchors``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from sidecar import __version__
from sidecar.config import Config, agent_name_problem, valid_agent
from sidecar.contracts.errors import ExcludedError, NotFoundError, ProtocolError, SourceError, UnreadableError
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import (
    MAX_PATH_PREFIX_CHARS,
    MAX_QUERY_CHARS,
    MAX_REFERENCE_CHARS,
    PROTOCOL_VERSION,
    RELATED_LIMIT_RANGE,
    TOKEN_BUDGET_RANGE,
    Request,
    check_known,
    param_bool,
    param_int,
    param_opt_str,
    param_str,
)
from sidecar.contracts.wire import (
    SearchResult,
    catching_up_note,
    explanation_json,
    held_note,
    no_value_note,
    offline_note,
    search_json,
    stale_note,
)
from sidecar.daemon import limits
from sidecar.daemon.anchors import look_up_anchors, root_key
from sidecar.daemon.naming import named_note
from sidecar.daemon.searchparams import SEARCH_PARAMS, asker_today, search_request
from sidecar.index.indexer import TOKENIZER_WAIT_S, Activity, Indexer
from sidecar.index.problems import Problems
from sidecar.index.repair import memory_gap
from sidecar.index.vectoring import Vectoring
from sidecar.memory.ops import MemoryOps
from sidecar.model.embedder import EmbedderSlot, approx_token_count
from sidecar.notes.chunking import line_count, line_range, lines_within
from sidecar.notes.frontmatter import description_of
from sidecar.notes.links import LinkGraph, unresolved_paths
from sidecar.notes.markdown import anchor_lines
from sidecar.notes.outline import Page, lead_line, one_line
from sidecar.notes.outline import render as render_outline
from sidecar.notes.redact import mask, masked_line
from sidecar.runtime.foreground import FOREGROUND
from sidecar.search.context import with_note
from sidecar.search.days import FilterError
from sidecar.search.explain import explain
from sidecar.search.recall import recall
from sidecar.search.retrieval import Retriever
from sidecar.stores.aside import moved_aside
from sidecar.stores.manifest import Manifest
from sidecar.vault.ignore import OWN_RULES
from sidecar.vault.sources import (
    TOO_LARGE,
    NoteUnreadable,
    path_for_key,
    public_reference,
    read_inbox_note,
    read_note,
)
from sidecar.vault.sources import roots as note_roots
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.timeout import NoAnswer, bounded_call

MAX_LINE = 10_000_000  # beyond any note's line count (notes are at most index.maxFileBytes)
# Held roots whose folder is not the share: get does not read what lies there now.
_NOT_THE_SHARE = frozenset({"unmounted", "device", "empty"})
OUTLINE_BUDGET = 1000
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    started: float
    queue_depth: Callable[[], int]
    # Queues a sweep; returns the request's number (``index.asked_done``), or None where requests
    # are not numbered (a read-only index answers the op with an error first).
    request_sweep: Callable[[bool, frozenset[str] | None, frozenset[str]], int | None]
    watched: Callable[[], list[Path]]
    reload: Callable[[], dict[str, Any]]
    # (changes applied, changes known) while file changes wait or are being applied, else None.
    catching_up: Callable[[], tuple[int, int, int] | None] = lambda: None
    # The highest number of an `index` request whose sweep has ended (the daemon's own sweeps
    # are not numbered).
    asked_done: Callable[[], int] = lambda: 0
    # Whether a rebuild was asked and its sweep has not ended.
    rebuilding: Callable[[], bool] = lambda: False
    # Whether that rebuild still waits in the queue (it has not emptied the index yet).
    rebuild_queued: Callable[[], bool] = lambda: False


class Handlers:
    def __init__(
        self,
        cfg: Config,
        *,
        indexer: Indexer,
        manifest: Manifest,
        supervisor: Supervisor,
        vectors: Vectoring,
        problems: Problems,
        retriever: Retriever,
        slot: EmbedderSlot,
        service: ServiceState,
        memory: MemoryOps,
    ) -> None:
        self.cfg = cfg
        self.indexer = indexer
        self.manifest = manifest
        self.supervisor = supervisor
        self.vectors = vectors
        self.problems = problems
        self.retriever = retriever
        self.slot = slot
        self.service = service
        self.memory = memory
        # The index limits' figures of health, each kept a second (a scan of the queue each).
        self.limits = limits.Limits(manifest)
        # A call on a note's file that still hangs, per root (see _on_disk).
        self._hanging: dict[str, threading.Thread] = {}
        # The same for the reads of linked notes ``get`` makes for their anchors, kept apart: one
        # slow there (a note on a slow share) leaves the share's own reads alone.
        self._anchors_hanging: dict[str, threading.Thread] = {}
        self.anchor_clock: Callable[[], float] = time.monotonic  # tests move it on
        self._ops: dict[str, Callable[[Request], dict[str, Any]]] = {
            "health": self.health,
            "search": self.search,
            "recall": self.recall,
            "why": self.why,
            "get": self.get,
            "related": self.related,
            "index": self.index,
            "outline": self.outline,
            "reload": self.reload,
            **memory.ops(),
        }

    def dispatch(self, req: Request) -> dict[str, Any]:
        handler = self._ops.get(req.op)
        if handler is None:
            raise ProtocolError(f"unknown op {quoted(req.op)}; known ops: {', '.join(sorted(self._ops))}")
        if req.agent is not None and not valid_agent(req.agent):
            raise ProtocolError(agent_name_problem(req.agent))
        return handler(req)

    # --- ops -------------------------------------------------------------------------------

    def health(self, req: Request) -> dict[str, Any]:
        check_known(req.params, ())
        act = self.indexer.activity
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
        state = self.indexer.index_state(backlog, embedder["state"])
        vec = self.vectors
        rate = vec.rate(vec.stores.serving)  # recent batches of the serving table
        return {
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "started": self.service.started,
            "uptime_seconds": round(time.time() - self.service.started, 1),
            "clock": self._clock(),
            "embedder": embedder,
            "index": {
                "state": state,
                "phase": act.phase,
                # With the sweep's notes per second once it has a pace (``rough`` while it
                # settles): status' estimate of the time left.
                "progress": {"done": act.done, "total": act.total, **_sweep_pace(act)},
                # Seconds notes have waited to be cut for the model's tokenizer (it loads, or a
                # first start converts the model), else None.
                "tokenizer_wait_seconds": (
                    None if (since := act.tokenizer_wait_since) is None else round(time.time() - since, 1)
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
                # While a person's search reads the agents' own keyword indexes instead of the one
                # of all memory (being filled, damaged, read-only): why, and how many agents'
                # memory it finds by no word meanwhile (their own index removed as unused).
                "memory_all": (
                    None
                    if (gap := memory_gap(self.vectors.stores)) is None
                    else {"state": gap[0], "agents_not_searchable": gap[1]}
                ),
                "sweeps": act.sweeps,
                # The number of the last `index` request (its reply's ``ticket``) whose sweep has
                # ended, whether a rebuild asked for is queued or under way, and whether it is
                # still queued (the progress shown is then the sweep's under way, not its own).
                "asked_done": self.service.asked_done(),
                "rebuilding": self.service.rebuilding(),
                "rebuild_queued": self.service.rebuild_queued(),
                # File changes waiting or being applied (``catchingUp`` of answers): done, total,
                # and the moved notes whose old entry is being removed now (``files`` no longer
                # counts them: the deletion marked them first).
                "catching_up": self._catching_up(),
                # False while a new or rebuilt index has not read every note (a build cut short,
                # a folder offline): its searches say so (``indexing``).
                "complete": not self.indexer.reading_first_time,
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
                    for c in moved_aside(self.cfg.index_dir)
                ],
            },
            "roots": self.supervisor.describe(self._watched),
            "vectors": vec.describe(),
            "problems": self.problems.describe(),
            "queue": {"depth": self.service.queue_depth()},
            "foreground": FOREGROUND.describe(),
            "socket": str(self.cfg.socket_path),
            "home": str(self.cfg.home),
            "vault": str(self.cfg.vault.path) if self.cfg.vault.path else None,
            # The daily-note formats in force and the settings file each came from: what dates a
            # note by its name (an unreadable file is a problem of obsidian_settings); those of a
            # plugin switched off under a key of their own, so a client that predates it does not
            # print them as in force.
            "daily_notes": [d for d in self.indexer.daily_formats.describe() if "off" not in d],
            "daily_notes_off": [d for d in self.indexer.daily_formats.describe() if "off" in d],
            # The weekday weeks begin on for time phrases, and how it was read (Calendar plugin).
            "week_start": self.indexer.week_start.describe(),
            # The asking agent's own inbox (an agent near memory.maxInboxBytes sees it coming).
            **({"inbox": self.memory.usage(req.agent)} if req.agent is not None else {}),
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

    def search(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("query", *SEARCH_PARAMS))
        request, far = search_request(self.retriever, p, req.agent, "query", self.retriever.cfg.limit)
        if not request.query.strip():
            # Nothing to look for: answered "nothing relevant found" (exit 0), which reads as a
            # search that found nothing (also beside a window given as a parameter).
            raise ProtocolError(
                "'query' is empty: give words to look for, or filters alone to list notes "
                "(tag:garten path:Projekte/ since:2026-09-01)"
            )
        try:
            result = self.retriever.search(request)
        except FilterError as exc:
            raise ProtocolError(f"bad filter in 'query': {exc}") from exc
        result = self._marked_held(self._while_building(result))
        out = search_json(result, preview=param_bool(p, "preview", default=False))
        out.update(self._offline_roots(request.sources))
        if result.analysis is not None and result.analysis.filters.no_value:
            out["filterNoValue"] = no_value_note(result.analysis.filters.no_value)
        if far:
            out["todayIgnored"] = far
        if request.sources is None or "memory" in request.sources:
            refused = self.memory.inbox_refused(req.agent)
            if refused:
                out["inboxRefused"] = refused
        return out

    def why(self, req: Request) -> dict[str, Any]:
        """Explain a note's place (or absence) in the results of a query."""
        p = req.params
        check_known(p, ("reference", "query", "today"))
        key = named_note(
            param_str(p, "reference", max_len=MAX_REFERENCE_CHARS),
            req.agent,
            cfg=self.cfg,
            manifest=self.manifest,
            on_disk=self._on_disk,
        ).key
        try:
            query = unicodedata.normalize("NFC", param_str(p, "query", max_len=MAX_QUERY_CHARS))
            asker, far = asker_today(self.retriever, p)
            out = explain(self.retriever, key, query, req.agent, asker)
        except FilterError as exc:
            raise ProtocolError(f"bad filter in 'query': {exc}") from exc
        if not out.indexed:
            state = self.manifest.file_states(key).get(key)
            unanswered = None
            try:
                self._on_disk(key, lambda: path_for_key(self.cfg, key))
                exists = True
            except NoAnswer as exc:
                exists, unanswered = False, str(exc)
            except SourceError:
                exists = False
            out = replace(out, exists=exists)
            rule = self.indexer.excluded_by(key)
            if unanswered is not None:
                out = replace(out, reason=f"the file cannot be looked at now: {unanswered}")
            elif rule is not None:
                out = replace(out, reason=f"the note is excluded by {rule}", excluded=rule)
            elif state is not None and state.state == "skipped":
                error = self.manifest.read("SELECT error FROM files WHERE key = ?", (key,))
                why = error[0][0] if error and error[0][0] else "see `file_skipped` in the log"
                out = replace(out, reason=f"the file was skipped when indexing: {why}")
            elif exists and key in (left_out := self.indexer.changes.skipped_files()):
                skip = left_out[key]
                size = (
                    f" ({skip.size:,} bytes, over index.maxFileBytes: {self.cfg.index.max_file_bytes:,})"
                    if skip.size
                    else ""
                )
                out = replace(out, reason=f"the file is left out when indexing: {skip.reason}{size}")
            elif exists:
                out = replace(out, reason="the file exists but is not indexed yet (a sweep will pick it up)")
            else:
                out = replace(out, reason="no such note in the vault, wiki or this agent's memory")
        reply = explanation_json(out)
        if out.analysis.filters.no_value:  # as search says it: the query explained dropped a filter
            reply["filterNoValue"] = no_value_note(out.analysis.filters.no_value)
        if far:  # as search says it: the time phrases were read against the daemon's date
            reply["todayIgnored"] = far
        return reply

    def recall(self, req: Request) -> dict[str, Any]:
        """Auto-injection: the current message (previous turns blended in) -> a context block."""
        p = req.params
        check_known(p, ("message", "history", "tokenBudget", *SEARCH_PARAMS))
        history = p.get("history", [])
        if (
            not isinstance(history, list)
            or not all(isinstance(t, str) for t in history)
            or len(history) > 100
        ):
            raise ProtocolError(
                "'history' must be a list of at most 100 strings (previous turns, oldest first)"
            )
        history = [unicodedata.normalize("NFC", t) for t in history]
        search, far = search_request(self.retriever, p, req.agent, "message", self.retriever.recall_cfg.limit)
        model = self.slot.model
        count = model.count_tokens if model is not None else approx_token_count
        preview = param_bool(p, "preview", default=False)
        try:
            result = recall(self.retriever, search.query, history, search, count, explain=preview)
        except FilterError as exc:
            raise ProtocolError(f"bad filter in 'message': {exc}") from exc
        result = self._marked_held(self._while_building(result))
        if result.stale_since is not None:  # said where the agent reads it, not only to the client
            result = replace(result, context=with_note(result.context, stale_note(result.stale_since)))
        if result.catching_up is not None:
            result = replace(result, context=with_note(result.context, catching_up_note(*result.catching_up)))
        if held := [h.reference for h in result.hits if h.deletion_held]:
            result = replace(result, context=with_note(result.context, held_note(held)))
        offline = self._offline_roots(search.sources)
        if offline:  # likewise: an agent's hook reads the block, not the client's stderr or JSON
            result = replace(result, context=with_note(result.context, offline_note(offline["offline"])))
        out = search_json(result, preview=preview)
        if far:
            out["todayIgnored"] = far
        return {**out, **offline}

    def _marked_held(self, result: SearchResult) -> SearchResult:
        """``result`` with each hit whose file is gone while the mass-deletion guard holds its
        root's deletions marked (``deletionHeld``). Only while a hold is on (the folder is there
        and followed): a look per hit of that root, within the probe timeout; a look that does not
        answer leaves the hit unmarked."""
        roots = self.supervisor.roots
        held = {n for n in ("vault", "wiki") if (st := roots.get(n)) is not None and st.hold_kind == "mass"}
        if not held or not any(h.source in held for h in result.hits):
            return result

        def gone(key: str) -> bool:
            rel = self.manifest.rel_of(key)
            if rel is None:
                return False
            try:
                self._on_disk(key, lambda: path_for_key(self.cfg, key, rel))
            except NotFoundError:
                return True
            except (NoAnswer, SourceError):  # no answer, or refused: not known to be gone
                return False
            return False

        hits = tuple(
            replace(h, deletion_held=True) if h.source in held and gone(h.reference) else h
            for h in result.hits
        )
        return replace(result, hits=hits)

    def _offline_roots(self, sources: tuple[str, ...] | None) -> dict[str, Any]:
        """``{"offline": [root, ...]}`` while the vault or the wiki searched is offline (an
        unmounted share): the hits are its notes as last indexed, and an answer that looked
        complete hid that what changed there since cannot be found. Else nothing."""
        roots = self.supervisor.roots
        names = [
            name
            for name in ("vault", "wiki")
            if (st := roots.get(name)) is not None
            and (sources is None or name in sources)
            and st.offline
            and st.hold_kind != "mass"  # held: the folder is there and followed
        ]
        return {"offline": names} if names else {}

    def _while_building(self, result: SearchResult) -> SearchResult:
        """``result``, saying so while a new or rebuilt index has not read every note yet: an
        agent asking then was told "nothing relevant found" with most of the vault unread."""
        building = self._building()
        if building is not None:
            result = replace(result, indexing=building)
        elif (catching := self.service.catching_up()) is not None:
            # File changes not applied yet (a branch switch): old paths may still be found, new
            # notes missed, and the answer says so.
            result = replace(result, catching_up=catching)
        # Updates failing (a full disk): the hits are what was indexed before, and say so (an
        # agent took "nothing relevant found" for "there is no such note").
        failing = self.problems.active_in("index")
        return result if failing is None else replace(result, stale_since=failing["since"])

    def _building(self) -> tuple[int, int] | None:
        """(notes read, notes to read) while a new or rebuilt index has not read every note."""
        if not self.indexer.reading_first_time:
            return None
        act = self.indexer.activity
        return act.notes_read(), act.total

    def get(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("reference", "startLine", "endLine", "maxChars"))
        reference = param_str(p, "reference", max_len=MAX_REFERENCE_CHARS)
        part = _line_range(p)
        # At most this much text, whole lines (an agent's context); 0: all of it.
        most = param_int(p, "maxChars", default=0, lo=0, hi=MAX_LINE)
        named = named_note(reference, req.agent, cfg=self.cfg, manifest=self.manifest, on_disk=self._on_disk)
        key, manifest = named.key, self.manifest
        rule = self.indexer.excluded_by(key)
        if rule is not None and rule.startswith(f"{OWN_RULES}:"):
            # The user's word to sidecar: a folder left out of its index ("Privat/") is kept from
            # its readers too. Obsidian's Excluded files hide notes from Obsidian's search only,
            # and are read by name as Obsidian opens them.
            raise ExcludedError(
                f"{quoted(reference)} is left out by {rule}: sidecar does not show notes its "
                "configuration excludes (open it in the vault)"
            )
        offline = self._offline(key, reference)
        try:
            path, text = self._on_disk(key, lambda: self._read(key, reference))
        except NoAnswer as exc:
            raise UnreadableError(
                f"{quoted(reference)} cannot be read now: {exc}; its indexed text is still found by search"
            ) from exc
        except SourceError as exc:
            if offline is None or manifest.rel_of(key) is None:
                raise
            # Indexed, but its root is offline: that is why, not a missing or a bad reference.
            raise offline from exc
        chunks = self.manifest.chunks_of(key)
        title = chunks[0].title if chunks else path.stem
        graph = LinkGraph(self.manifest.read)
        links = graph.links_of(key, req.agent)
        if part is None or part[0] == 1:  # a page read on (memory_get's startLine) has them already
            look_up_anchors(
                key,
                text,
                links,
                reader=self._read,
                excluded_by=self.indexer.excluded_by,
                manifest=self.manifest,
                hanging=self._anchors_hanging,
                clock=self.anchor_clock,
            )
        for link in links:
            link["target"] = public_reference(link["target"], req.agent) if link["target"] else None
        backlinks = [
            {"reference": public_reference(b.pop("source"), req.agent), **b}
            for b in graph.backlinks(key, req.agent)
        ]
        lines = line_count(text)  # of the file: a masked private key is a line, not a block
        if part is not None and part[0] > max(lines, 1):
            raise ProtocolError(
                f"'startLine' {part[0]} is past the end of {quoted(reference)}: it has {lines:,} line(s)"
            )
        section = anchor_lines(text, named.anchor) if named.anchor else None
        if part is None and section is not None:
            part = section  # [[Note#Setup]]: the lines of that heading (or block), as Obsidian opens it
        masking = self.retriever.cfg.mask_secrets
        text, masked, part, cut = _text_shown(text, part, most, mask_secrets=masking)
        if masking:
            title = masked_line(title)
            for link in links:
                link["display"] = link["display"] and masked_line(link["display"])
            for backlink in backlinks:
                backlink["title"] = masked_line(backlink["title"])
        out: dict[str, Any] = {
            "reference": public_reference(key, req.agent),
            "source": key.split("/", 1)[0],
            "title": title,
            "text": text,
            "lines": lines,
            **({"range": [part[0], min(part[1], lines)]} if part is not None else {}),
            **({"cut": True} if cut else {}),
            "indexed": bool(chunks),
            "links": links,
            "backlinks": backlinks,
            "unresolved": unresolved_paths(links),
        }
        if named.anchor:
            out["anchor"] = {"text": named.anchor, "found": section is not None}
        if named.candidates > 1:
            out["candidates"] = named.candidates
        if rule is not None:
            out["excluded"] = rule
        if masked:
            out["masked"] = masked
        return out

    def _offline(self, key: str, reference: str) -> UnreadableError | None:
        """Why ``get`` may not find a note of an offline root (raised at once when what is there
        cannot be the share); None when its root is online."""
        source = key.split("/", 1)[0]
        status = self.supervisor.roots.get(source) if source != "memory" else None
        offline = None
        if status is not None and status.offline and status.hold_kind == "mass":
            # The folder is there and read; most of its notes vanished at once: this one among them.
            offline = UnreadableError(
                f"{quoted(reference)} is no longer in the {source}: its deletion is held with "
                f"{status.held_deletions} others (`sidecar index --confirm-deletions {source}` applies "
                "them; `sidecar status` says when they apply by themselves); its indexed text is "
                "still found by search"
            )
        elif status is not None and status.offline:
            offline = UnreadableError(
                f"{quoted(reference)} cannot be read now: the {source} is offline ({status.error}); "
                "its indexed text is still found by search"
            )
            if status.hanging is not None or status.hold_kind in _NOT_THE_SHARE:
                # What is there is not the share (a stale copy under an unmounted share's mount
                # point): its files are not this vault's notes; or a call on it still hangs. Any
                # other offline root is read as it is now (it may be back before its next retry).
                raise offline
        return offline

    def _on_disk(self, key: str, fn: Callable[[], T]) -> T:
        """``fn``, a look at the file behind ``key``, within the probe timeout: on a hung share
        a request thread would otherwise wait as long as the share does (forever for a hard NFS
        mount), and a few such requests would stop the daemon answering at all. After one
        timeout, further looks into the same root fail at once while that call still hangs."""
        source = root_key(key)
        timeout = self.cfg.watch.probe_timeout_seconds
        return bounded_call(fn, timeout, self._hanging, source, f"get-{source}")

    def _read(self, key: str, reference: str, most: int | None = None) -> tuple[Path, str]:
        """The note behind a key as it is on disk now: its path and text (refused as too large
        past ``index.maxFileBytes``, or past ``most`` bytes)."""
        root, path = path_for_key(self.cfg, key, self.manifest.rel_of(key))
        limit = self.cfg.index.max_file_bytes if most is None else min(most, self.cfg.index.max_file_bytes)
        try:
            if root.source == "memory":
                _data, text = read_inbox_note(root, path.name, limit)
            else:
                _data, text = read_note(path, limit, root)
        except FileNotFoundError as exc:
            raise NotFoundError(f"no note {quoted(reference)}") from exc
        except NoteUnreadable as exc:
            why = exc.reason
            if why == TOO_LARGE:
                with contextlib.suppress(OSError):
                    why = f"{why}: {path.stat().st_size:,} bytes"
                why += f", over index.maxFileBytes ({limit:,} bytes); such notes are not indexed either"
            raise UnreadableError(f"{quoted(reference)} cannot be read: {why}") from exc
        return path, text

    def related(self, req: Request) -> dict[str, Any]:
        """Notes linked with this one (either way), then notes sharing its links or tags."""
        p = req.params
        check_known(p, ("reference", "limit"))
        reference = param_str(p, "reference", max_len=MAX_REFERENCE_CHARS)
        manifest = self.manifest
        key = named_note(
            reference, req.agent, cfg=self.cfg, manifest=self.manifest, on_disk=self._on_disk
        ).key
        limit = param_int(p, "limit", default=10, lo=RELATED_LIMIT_RANGE[0], hi=RELATED_LIMIT_RANGE[1])
        if not manifest.file_states(key).get(key):
            try:  # not_found / unreadable for a note that does not exist or cannot be looked at
                self._on_disk(key, lambda: path_for_key(self.cfg, key))
            except NoAnswer as exc:
                raise UnreadableError(f"{quoted(reference)} cannot be looked at now: {exc}") from exc
        graph = LinkGraph(manifest.read)
        items = graph.related(key, limit, req.agent)
        for item in items:
            if self.retriever.cfg.mask_secrets:
                item["title"] = masked_line(item["title"])
            item["reference"] = public_reference(item.pop("key"), req.agent)
            item["source"] = item["reference"].split("/", 1)[0]
            for kind, keys in item.get("shared", {}).items():
                if kind != "tags":
                    item["shared"][kind] = [public_reference(k, req.agent) for k in keys]
        out: dict[str, Any] = {"reference": public_reference(key, req.agent), "related": items}
        building = self._building()
        if building is not None:  # links of notes not read yet are not known yet
            out["indexing"] = {"done": building[0], "total": building[1]}
        return out

    def outline(self, req: Request) -> dict[str, Any]:
        """The wiki's (or vault's) folders, pages and one-line descriptions within a token budget."""
        p = req.params
        check_known(p, ("source", "pathPrefix", "tokenBudget"))
        source = param_opt_str(p, "source") or "wiki"
        if source not in ("wiki", "vault"):
            raise ProtocolError("'source' must be wiki or vault")
        prefix = unicodedata.normalize(
            "NFC", (param_opt_str(p, "pathPrefix", max_len=MAX_PATH_PREFIX_CHARS) or "").strip("/")
        )
        if prefix.lower() == source or prefix.lower().startswith(source + "/"):
            prefix = prefix[len(source) :].lstrip("/")  # as references show it: "wiki/Projects"
        lo, hi = TOKEN_BUDGET_RANGE
        budget = param_int(p, "tokenBudget", default=OUTLINE_BUDGET, lo=lo, hi=hi)
        manifest = self.manifest
        show = masked_line if self.retriever.cfg.mask_secrets else str  # it sits in system prompts
        pages = []
        tops: set[str] = set()  # the top folders, named when the prefix holds no page
        for key, _src, _agent, title, _tags, _mtime, _chunks, fm, *_ in manifest.list_files(
            "source = ?", [source]
        ):
            path = unicodedata.normalize("NFC", key.split("/", 1)[1])
            if prefix and not (path == prefix or path.startswith(prefix + "/")):
                if "/" in path:
                    tops.add(path.split("/", 1)[0])
                continue
            description = description_of(fm)
            if not description:
                # Else the first prose of the page: headings only repeat the title.
                description = lead_line(line for c in manifest.chunks_of(key) for line in c.text.splitlines())
            pages.append(Page(path, show(title), one_line(description, show=show)))
        model = self.slot.model
        count = model.count_tokens if model is not None else approx_token_count
        out = render_outline(pages, budget, count, label=source)
        text = out.text
        if prefix and not pages:
            folders = ", ".join(sorted(tops)[:30]) + (", ..." if len(tops) > 30 else "")
            text = (
                f"No page of the {source} is under {quoted(prefix + '/')}"
                + (f"; its top folders: {show(folders)}" if tops else "")
                + " (the outline without a path prefix shows every folder)."
            )
        return {
            "outline": text,
            "source": source,
            "pages": out.pages,
            "folders": out.folders,
            "tokens": out.tokens,
            "detail": out.detail,
        }

    def reload(self, req: Request) -> dict[str, Any]:
        check_known(req.params, ())
        return self.service.reload()

    def index(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("rebuild", "confirmDeletions"))
        rebuild = param_bool(p, "rebuild", default=False)
        confirm = param_opt_str(p, "confirmDeletions", max_len=200)
        # Every root a sweep would read (the agents' inboxes too), and those it has seen.
        known = {r.name for r in note_roots(self.cfg)} | set(self.supervisor.roots)
        if confirm is not None and confirm not in known:
            raise ProtocolError(
                f"unknown root {quoted(confirm)}; roots: {', '.join(sorted(known)) or 'none yet'}"
            )
        if rebuild:
            # A root offline or its mass deletion held (unless confirmed here): its notes would
            # leave the index.
            self.indexer.refuse_rebuild([confirm] if confirm else [])
        sweeps = self.indexer.activity.sweeps
        ticket = self.service.request_sweep(rebuild, None, frozenset([confirm]) if confirm else frozenset())
        out: dict[str, Any] = {"queued": True, "rebuild": rebuild, "sweeps": sweeps}
        if ticket is not None:  # done once health's index.asked_done reaches it
            out["ticket"] = ticket
        return out


def _text_shown(
    text: str, part: tuple[int, int] | None, most: int, *, mask_secrets: bool
) -> tuple[str, dict[str, int], tuple[int, int] | None, bool]:
    """What get shows of a note's text: masked, the lines asked for, at most ``most`` characters
    of whole lines; with the masked counts, the lines shown and whether one line was cut."""
    masked: dict[str, int] = {}
    if mask_secrets:  # a range counts the file's lines: a masked key over five lines leaves five
        text, masked = mask(text, keep_lines=part is not None or most > 0)
    if part is not None:
        text = line_range(text, *part)
    cut = False
    if most and len(text) > most:
        start = part[0] if part is not None else 1
        text, count, cut = lines_within(text, most)
        part = (start, start + count - 1)
    return text, masked, part, cut


def _line_range(p: dict[str, Any]) -> tuple[int, int] | None:
    """get's ``startLine``/``endLine``: a part of a long note (the lines of a hit and around
    them), a whole note of megabytes being more than an agent's context holds; None: all."""
    if "startLine" not in p and "endLine" not in p:
        return None
    first = param_int(p, "startLine", default=1, lo=1, hi=MAX_LINE)
    return first, param_int(p, "endLine", default=MAX_LINE, lo=first, hi=MAX_LINE)


def _in_place(progress: tuple[int, int] | None) -> dict[str, int] | None:
    return None if progress is None else {"done": progress[0], "total": progress[1]}


def _sweep_pace(act: Activity) -> dict[str, Any]:
    """The sweep's pace for health's ``progress``: notes written per second (null before it
    has one: the first seconds, or between sweeps) and whether it still settles."""
    rate = act.pace.rate if act.phase == "indexing" else None
    # Three significant digits: rounded to hundredths, a sweep slower than one note in 200 s had no rate.
    per_second = float(f"{rate:.3g}") if rate else None
    return {"notes_per_second": per_second, "rough": act.pace.rough if rate else None}
