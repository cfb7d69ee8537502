"""The query ops, a mixin of ``Handlers`` (``handlers``): ``search``, ``recall`` and ``why``,
their parameters read (``searchparams``), and what their answers say beside the hits: an index
still being built or catching up, updates failing, a root offline, deletions held. Its own module
because these ops only read the index through the ``Retriever``; the state they work on is the
handlers' own, made in ``Handlers.__init__``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sidecar.config import Config
from sidecar.contracts.errors import NotFoundError, ProtocolError, SourceError
from sidecar.contracts.notices import catching_up_note, held_note, no_value_note, offline_note, stale_note
from sidecar.contracts.protocol import (
    MAX_QUERY_CHARS,
    MAX_REFERENCE_CHARS,
    Request,
    check_known,
    param_bool,
    param_str,
)
from sidecar.contracts.wire import SearchResult
from sidecar.contracts.wire_json import explanation_json, search_json
from sidecar.daemon.naming import named_note
from sidecar.daemon.searchparams import SEARCH_PARAMS, asker_today, search_request
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.memory.ops import MemoryOps
from sidecar.model.embedder import EmbedderSlot, approx_token_count
from sidecar.search.context import with_note
from sidecar.search.day_calendar import FilterError
from sidecar.search.explain import explain
from sidecar.search.recall import recall
from sidecar.search.retrieval import Retriever
from sidecar.stores.manifest import Manifest
from sidecar.vault.references import path_for_key
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.timeout import NoAnswer, SharedProbes

if TYPE_CHECKING:
    from sidecar.daemon.handlers import ServiceState
    from sidecar.daemon.note_ops import T


class SearchOps:
    """The query ops of ``Handlers`` (which sets the state below)."""

    cfg: Config
    indexer: Indexer
    manifest: Manifest
    supervisor: Supervisor
    problems: Problems
    retriever: Retriever
    slot: EmbedderSlot
    service: ServiceState
    memory: MemoryOps

    if TYPE_CHECKING:  # the handlers' own (``NoteOps``)

        def _on_disk(
            self,
            key: str,
            fn: Callable[[], T],
            what: str = "looking up",
            *,
            within: float | None = None,
            hanging: SharedProbes | None = None,
        ) -> T: ...

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
