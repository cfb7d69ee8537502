"""Protocol ops for agents' memory: list, write, edit, delete.

Writes go through :mod:`sidecar.memory.inbox` (own inbox only, atomic, redacted, audited) and are indexed
synchronously, so a note is searchable when the call returns, and the reply says what happened.
Before a write, copies of the whole note in the agent's inbox, the wiki and the vault are looked up:
by words (exact and near copies, whatever their title) and by the vectors of its chunks.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import re
import sqlite3
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sidecar.config import Config
from sidecar.contracts.errors import (
    BusyError,
    EmbedderError,
    ProtocolError,
    SidecarError,
    StorageError,
    StoreError,
    StoresClosedError,
    stopping_message,
)
from sidecar.contracts.plainerror import plain_error
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_RANGE,
    MAX_PATH_PREFIX_CHARS,
    MAX_TAG_CHARS,
    Request,
    check_known,
    param_int,
    param_opt_str,
    param_str,
)
from sidecar.contracts.wire import SOURCES, under_prefix
from sidecar.index.indexer import Indexer
from sidecar.index.keyword_faults import handles_seen
from sidecar.index.problems import Problems
from sidecar.index.repair import ready_inbox
from sidecar.index.vector_embed import WRITE_YIELD_S
from sidecar.index.vectoring import Stores
from sidecar.memory.counting import BoundedCounts
from sidecar.memory.inbox import Inboxes
from sidecar.memory.inbox_bounded import in_inbox
from sidecar.memory.inbox_types import Deleted, Written, check_agent, check_slug
from sidecar.model.embedder import EmbedderSlot, cosine_range
from sidecar.notes.chunking import chunk_note
from sidecar.notes.frontmatter import description_of
from sidecar.notes.markdown import filter_tag
from sidecar.notes.redact import masked_line
from sidecar.runtime.foreground import FOREGROUND
from sidecar.stores.bm25_search import SHARED, SearchFault
from sidecar.stores.embedtext import embed_hash
from sidecar.stores.lastchange import last_change, local_day
from sidecar.stores.manifest import Manifest
from sidecar.stores.space import fault_words
from sidecar.stores.vectorbook import NEXT_ONLY, NO_VECTOR
from sidecar.vault.homeguard import HomeChangedError, held
from sidecar.vault.notenames import LINK_REASON, SLUG_RE, inbox_copy_reason, is_markdown_name
from sidecar.vault.references import public_reference
from sidecar.vault.sources import Asking, Root, agent_inbox, inbox_refusal, inbox_root, vault_roots
from sidecar.vault.supervisor import LookCut, RootUnreachable, StopCut
from sidecar.vault.timeout import NoAnswer, SharedProbes, bounded_call

log = logging.getLogger(__name__)

T = TypeVar("T")

DUPLICATE_SOURCES = ("memory", "wiki", "vault")
_DUPLICATE_QUERY_CHARS = 2000  # of a written note's text, asked of the keyword index for copies
MAX_DUPLICATE_CHUNKS = 32  # a longer note is compared by its first 32 chunks' vectors (and all its words)
_WORDS = re.compile(r"\w+")
# How long health waits for an inbox's count: well below the 10 s `sidecar status` and the MCP
# status wait for health itself, with both health threads waiting at once.
USAGE_WAIT_S = 2.0


class DuplicateError(SidecarError):
    """A write was refused because a near-identical note exists (memory.write.onDuplicate: reject)."""

    code = "duplicate"


def deleted_reply(slug: str, moved: Deleted | None) -> dict[str, Any]:
    """A delete's reply: whether a note went, where its text is kept (or what was removed with
    no text to keep) and the kept texts the caps pushed out; the same whether the index could be
    told or not."""
    if moved is None:
        return {"deleted": False, "reference": f"memory/{slug}", "message": "no such note (nothing to do)"}
    out: dict[str, Any] = {"deleted": True, "reference": f"memory/{slug}"}
    if moved.trash is not None:
        out["trash"] = str(moved.trash)
    else:
        out["message"] = f"removed {moved.removed} (no text to keep)"
    if moved.trash_dropped:
        out["trashDropped"] = list(moved.trash_dropped)
    return out


class MemoryOps:
    def __init__(
        self,
        cfg: Config,
        inboxes: Inboxes,
        indexer: Indexer,
        slot: EmbedderSlot,
        *,
        stores: Stores,
        problems: Problems,
        counts: BoundedCounts | None = None,
    ) -> None:
        self.cfg = cfg
        self.inboxes = inboxes
        self.indexer = indexer
        self.slot = slot
        self.stores = stores  # the serving vectors, for the duplicate check
        self.manifest = stores.manifest
        self.problems = problems
        inboxes.indexed = lambda agent: bool(self.manifest.file_states(f"memory/{agent}/"))
        # The daemon's one instance (``Daemon``), which outlives these handlers: it holds the
        # counts still running and the last figures across handler builds.
        self._counts = counts if counts is not None else BoundedCounts()
        # A look at an agent's inbox for a request (is it refused? what is in it?) that still
        # hangs, per inbox: one stuck thread per inbox on a share that hangs.
        self._hanging = SharedProbes()
        # A change's look at an inbox under way, per inbox: the changes beside it wait for its
        # answer (``_inbox_checked``).
        self._looks = SharedProbes()

    def usage(self, agent: str) -> dict[str, Any] | None:
        """The agent's inbox against its limits, counted within a bound (``BoundedCounts``: an
        inbox on a share that hangs held health's threads); else the last count, marked ``stale``."""
        return self._counts.usage(agent, self._usage, min(USAGE_WAIT_S, self.cfg.watch.probe_timeout_seconds))

    def _usage(self, agent: str) -> dict[str, Any] | None:
        """None when the inbox cannot be read (the status of the daemon must not fail on an
        inbox that is not a private folder)."""
        try:
            return self.inboxes.usage(agent)
        except (OSError, SidecarError) as exc:
            log.warning("memory_usage_failed agent=%s error=%s", agent, exc)
            return None

    def ops(self) -> dict[str, Any]:
        return {"list": self.list, "write": self.write, "edit": self.edit, "delete": self.delete}

    # --- writes --------------------------------------------------------------------------

    def write(self, req: Request) -> dict[str, Any]:
        return self._write(req, must_exist=False)

    def edit(self, req: Request) -> dict[str, Any]:
        return self._write(req, must_exist=True)

    def _write(self, req: Request, *, must_exist: bool) -> dict[str, Any]:
        p = req.params
        check_known(p, ("slug", "content", "frontmatter"))
        agent = check_agent(req.agent)
        slug = check_slug(p.get("slug"))
        content = param_str(p, "content", max_len=self.cfg.server.max_frame_bytes)  # size: inbox checks bytes
        front_matter = p.get("frontmatter")
        self._inbox_answers(agent, "written")

        # The inbox (a private folder) and its room, before any similarity work.
        sizes = self._inbox_checked(agent, "written", room=True)
        self.inboxes.check_room(slug, content, front_matter, sizes)
        try:
            duplicates, fresh = self._near_duplicates(agent, slug, content)
        except StoresClosedError:  # the stop closed the index before anything was written
            raise BusyError(stopping_message(quoted(req.op))) from None
        if duplicates and not must_exist and self.cfg.memory.write.on_duplicate == "reject":
            best = duplicates[0]
            raise DuplicateError(
                f"not written: {best['reference']} is {best['similarity']:.0%} similar "
                f"(threshold {self.cfg.memory.write.duplicate_threshold:.0%}); {_instead(best['reference'])}"
            )
        problems = self.problems
        if self.manifest.closed:  # the stop closed the index meanwhile: nothing is written
            raise BusyError(stopping_message(quoted(req.op)))
        # The note's lock over the file and its index entry: a delete in between would leave an
        # entry without a file (found by search, "no note" on get).
        with self.inboxes.locked(agent, slug):
            try:
                written = in_inbox(
                    self.indexer.supervisor,
                    inbox_root(self.cfg, agent),
                    lambda: self.inboxes.write(
                        agent, slug, content, front_matter, must_exist=must_exist, sizes=sizes, held=True
                    ),
                    call="writing",
                    slug=slug,
                    done="written",
                    keep=lambda: self.inboxes.keep(agent, slug),
                )
            except HomeChangedError as exc:  # the home's share unmounted: nothing made on its mount point
                problems.report("home", held(exc.why))
                raise
            except OSError as exc:  # disk full, read-only inbox: the old note (if any) is untouched
                _write_failed(problems, agent, "writing to", exc)
                raise StorageError(f"not written: {exc.strerror or exc}; the inbox is unchanged") from exc
            _write_worked(problems, agent)
            root = Root("memory", agent_inbox(self.cfg, agent), agent=agent)
            warning = None
            model = self.stores.serving.model if self.stores.serving is not None else None
            try:
                # The duplicate check's vectors stand in for the model on equal chunk texts.
                with self.indexer.vectors.expect(f"memory/{agent}/{slug}", model, fresh):
                    key = self.indexer.index_now(
                        root, written.path, (written.data, written.mtime_ns, written.ctime_ns)
                    )
            except StoresClosedError:
                # The stop closed the index after the note was written: no fault to report.
                log.info("memory_index_stopped agent=%s slug=%s (indexed at the next start)", agent, slug)
                key = root.key_of_path(written.path)
                warning = (
                    "saved, but not searchable yet: the daemon is stopping; it is indexed at its next start"
                )
            except (StoreError, EmbedderError, OSError, sqlite3.Error) as exc:
                # The note is safely on disk; the index catches up once it can be written again.
                why = fault_words(exc, self.stores.manifest.path)
                log.error("memory_index_failed agent=%s slug=%s error=%s", agent, slug, why)
                problems.report("index", f"indexing a memory write failed: {why}")
                key = root.key_of_path(written.path)
                warning = (
                    f"saved, but not searchable yet: the index cannot be written ({plain_error(why)}); it is "
                    "indexed once the index can be written again"
                )
        audit = audit_warning(written.audit_error, agent, problems)
        log.info(
            "memory_%s agent=%s slug=%s bytes=%d",
            "edit" if must_exist else "write",
            agent,
            slug,
            written.size,
        )
        return self._answer(
            written,
            key,
            agent=agent,
            must_exist=must_exist,
            duplicates=duplicates,
            warnings=(warning, audit),
            has_text=bool(content.strip()),
            front_matter=front_matter,
        )

    def _answer(
        self,
        written: Written,
        key: str,
        *,
        agent: str,
        must_exist: bool,
        duplicates: list[dict[str, Any]] | None,
        warnings: tuple[str | None, str | None],
        has_text: bool,
        front_matter: Any,
    ) -> dict[str, Any]:
        """A memory write's reply: what was done, what it replaced, whether and how the note can
        be found (``warnings``: the index's and the audit log's, if any)."""
        warning, audit = warnings
        action = "created" if written.created else ("updated" if must_exist else "replaced")
        out: dict[str, Any] = {
            "reference": public_reference(key, agent),
            "action": action,
            "created": written.created,
            "bytes": written.size,
            "redacted": written.redacted,
            "duplicates": duplicates if duplicates is not None else [],
            "duplicatesChecked": duplicates is not None,
            "searchable": warning is None,
        }
        if written.previous is not None:
            out["previous"] = str(written.previous)
        if written.trash_dropped:
            out["trashDropped"] = list(written.trash_dropped)
        if warning is None:
            empty = None if has_text else ("its name and front matter" if front_matter else "its name")
            try:
                searchable, by, warning = self._searchable(key, empty)
            except StoresClosedError:
                # The note is on disk (and indexed, or indexed at the next start): the stop's
                # "nothing was read from or written to" would tell the agent it was not saved.
                searchable, by = False, []
                warning = "saved, but not confirmed searchable: the daemon is stopping"
            out["searchable"], out["searchableBy"] = searchable, by
        warning = "; ".join(w for w in (warning, audit) if w)
        if warning:
            out["warning"] = warning
        return out

    def _searchable(self, key: str, empty: str | None = None) -> tuple[bool, list[str], str | None]:
        """Whether the note just indexed can be found, by which arm, and why not (``empty``: it
        was written without text, and what it is found by)."""
        manifest = self.manifest
        state = manifest.file_states(key).get(key)
        if state is None or state.state != "indexed":
            why = state.state if state is not None else "not in the index"
            return False, [], f"saved, but not searchable: the note was {why} when indexing"
        rows = manifest.read("SELECT has_vector, ord FROM chunks WHERE key = ?", (key,))
        # Chunks past index.maxVectorChunksPerNote wait for no vector: keyword-only for good.
        flags = [int(f) for f, o in rows if o < manifest.vector_cap]
        capped = sum(1 for f, o in rows if o >= manifest.vector_cap and int(f) == 0)
        if not rows:
            return True, ["keywords"], None
        if self.slot.state == "off":
            return (
                True,
                ["keywords"],
                "searchable by keywords; search by meaning is turned off in this sidecar's configuration "
                "(embedder.enabled: false)",
            )
        if empty or all(f == NO_VECTOR for f in flags):  # no text, or data such as base64
            # An empty note: "no text to search by meaning" read as if some were there for keywords.
            why = (
                f"the note holds no text: it is found by {empty} only"
                if empty
                else "searchable by keywords; it holds no text to search by meaning"
            )
            return True, ["keywords"], why
        # NEXT_ONLY: left to a model switch's table, no vector serves it until the switch ends.
        if all(f not in (0, NEXT_ONLY) for f in flags):
            past = (
                f"{capped:,} of its chunks are past index.maxVectorChunksPerNote "
                f"({manifest.vector_cap:,}): those are found by keywords only"
            )
            return True, ["keywords", "meaning"], past if capped else None
        if self.stores.serving is None:
            why = "the embedding model is not loaded yet"
        elif NEXT_ONLY in flags:
            why = "it waits for the model being switched to"
        else:
            why = "it is queued"
        return True, ["keywords"], f"searchable by keywords now, by meaning once its vectors exist ({why})"

    def _near_duplicates(
        self, agent: str, slug: str, content: str
    ) -> tuple[list[dict[str, Any]] | None, dict[str, Any]]:
        """Notes of the agent's inbox, the wiki or the vault that are copies of this one (None: not
        checked), and the vectors computed for it by the serving model, by chunk text hash.

        Like is compared with like: the note is cut into chunks as the indexer would cut it, and
        each chunk's vector is compared with the stored chunks' vectors (so the whole note counts,
        not its first 256 tokens); a candidate's similarity is the share-weighted mean of its best
        matches (on the model's scale from a clear match to identical), or the overlap of the two
        notes' word triples where that is higher (an exact copy is 100% whatever its title)."""
        serving = self.stores.serving
        if serving is None:
            return None, {}  # no model yet: similarity cannot be computed
        model, vectors = serving.model, serving.store
        parsed = chunk_note(
            content,
            title=slug,
            count_tokens=model.count_tokens,
            max_tokens=self.cfg.chunking.max_tokens,
            overlap=self.cfg.chunking.overlap,
        )
        chunks = [c for c in parsed.chunks if c.embed][:MAX_DUPLICATE_CHUNKS]
        if not chunks:
            return [], {}
        own = f"memory/{agent}/{slug}"
        manifest = self.manifest
        weights = [max(c.tokens, 1) for c in chunks]
        best: dict[str, list[float]] = {}
        fresh: dict[str, Any] = {}
        try:
            FOREGROUND.yield_to(WRITE_YIELD_S)
            vecs = model.embed_passages([c.embed_text for c in chunks])
            # The write's own embedding (its indexing takes these vectors instead of the model's run)
            self.indexer.vectors.embedded_for_write(vectors.name, len(chunks))
            fresh = {embed_hash(c.embed_text): v for c, v in zip(chunks, vecs, strict=True)}
            for i, vec in enumerate(vecs):
                hits = vectors.search(vec, 10, DUPLICATE_SOURCES, agent)
                views = manifest.views([cid for cid, _sim, _hub in hits])
                for cid, sim, _hub in hits:
                    view = views.get(cid)
                    if view is None or view.key == own:
                        continue
                    row = best.setdefault(view.key, [0.0] * len(chunks))
                    row[i] = max(row[i], sim)
        except StoresClosedError:
            raise  # the daemon stops: the write is refused with nothing written
        except (EmbedderError, StoreError) as exc:
            log.warning("duplicate_check_failed error=%s", exc)
            return None, fresh
        # Copies found by their words too: a note whose vectors are not computed yet (a backfill,
        # a model switch) is no vector candidate, and an exact copy of it went unnamed.
        vector_keys = [k for k, _row in sorted(best.items(), key=lambda kv: -max(kv[1]))[:10]]
        text = " ".join(c.text for c in parsed.chunks)[:_DUPLICATE_QUERY_CHARS]
        word_hits = self._by_words(agent, text)
        found_views = manifest.views([cid for cid, _score in word_hits])
        word_keys = dict.fromkeys(
            v.key for cid, _s in word_hits if (v := found_views.get(cid)) is not None and v.key != own
        )
        candidates = vector_keys + [k for k in word_keys if k not in best][:5]
        threshold = self.cfg.memory.write.duplicate_threshold
        # Cosines are put on the model's own scale, from a clear match (0: the same topic) to
        # identical (1): multilingual-e5 gives 0.9 to any two notes on one subject.
        _floor, full = cosine_range(model, self.cfg.search)
        mine = _triples(" ".join(c.text for c in parsed.chunks))
        found: list[tuple[str, float, float, float]] = []
        for key in candidates:
            row = best.get(key, [0.0] * len(chunks))
            cosine = sum(w * s for w, s in zip(weights, row, strict=True)) / sum(weights)
            by_vector = min(1.0, max(0.0, (cosine - full) / max(1.0 - full, 1e-6)))
            theirs = _triples(" ".join(c.text for c in manifest.chunks_of(key)))
            by_words = len(mine & theirs) / len(mine | theirs) if mine and theirs else 0.0
            similarity = max(by_vector, by_words)
            if similarity >= threshold:
                found.append((key, similarity, by_vector, by_words))
        found.sort(key=lambda f: (-f[1], f[0]))
        return [
            {
                "reference": public_reference(k, agent),
                "similarity": round(sim, 4),
                "byVector": round(vec, 4),
                "byWords": round(words, 4),
            }
            for k, sim, vec, words in found
        ], fresh

    def _by_words(self, agent: str, text: str) -> list[tuple[str, float]]:
        """The keyword hits of a duplicate check (none when the index fails). Its faults are said
        in status as a search's are (no file handles left reading the agent's own index): asked
        for by nobody, they were logged alone."""
        faults: list[SearchFault] = []
        seen: set[str] = set()
        failed: list[tuple[str, BaseException]] = []
        try:
            ready_inbox(self.stores, agent)  # its own notes are the copies looked for
            hits = self.stores.bm25.search(text, 20, DUPLICATE_SOURCES, agent, faults=faults, read=seen)
        except StoreError as exc:
            log.warning("duplicate_check_failed error=%s", exc)
            hits = []
            failed.append((SHARED, exc))
        handles_seen(self.stores, "chunks", seen, [*faults, *failed])
        return hits

    def delete(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("slug",))
        agent = check_agent(req.agent)
        slug = check_slug(p.get("slug"))
        key = f"memory/{agent}/{slug}"
        self._inbox_answers(agent, "deleted")
        self._inbox_checked(agent, "deleted", room=False)
        if self.manifest.closed:  # the stop closed the index meanwhile: nothing is moved
            raise BusyError(stopping_message(quoted(req.op)))
        with self.inboxes.locked(agent, slug):  # the file and its index entry go together
            try:
                moved = in_inbox(
                    self.indexer.supervisor,
                    inbox_root(self.cfg, agent),
                    lambda: self.inboxes.delete(agent, slug, held=True),
                    call="moving to .trash",
                    slug=slug,
                    done="deleted",
                    keep=lambda: self.inboxes.keep(agent, slug),
                )
            except HomeChangedError as exc:
                self.problems.report("home", held(exc.why))
                raise
            except OSError as exc:  # disk full (.trash), read-only inbox: the note stays as it was
                _write_failed(self.problems, agent, "deleting in", exc)
                raise StorageError(f"not deleted: {exc.strerror or exc}; the note is unchanged") from exc
            _write_worked(self.problems, agent)
            unindexed = None
            try:
                if key in self.manifest.file_states(key):
                    self.indexer.delete([key])
            except StoresClosedError:
                # The stop closed the index after the note was moved: no fault to report.
                log.info("memory_index_stopped agent=%s slug=%s (removed at the next start)", agent, slug)
                unindexed = (
                    "deleted (moved to .trash); its index entry is removed at the daemon's next start: "
                    "the daemon is stopping"
                )
            except (StoreError, OSError, sqlite3.Error) as exc:
                # The note is in .trash; its index entry goes once the index can be written (the
                # move's file event queues that sweep).
                log.error("memory_index_failed agent=%s slug=%s error=%s", agent, slug, exc)
                self.problems.report("index", f"removing a deleted memory note from the index failed: {exc}")
                unindexed = _unindexed_warning(self.manifest, key, exc)
        out = deleted_reply(slug, moved)
        if moved is None:
            return out
        log.info("memory_delete agent=%s slug=%s", agent, slug)
        audit = audit_warning(moved.audit_error, agent, self.problems)
        warning = "; ".join(w for w in (unindexed, audit) if w)
        if warning:
            out["warning"] = warning
        return out

    # --- listing -------------------------------------------------------------------------

    def list(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("source", "tag", "pathPrefix", "limit"))
        if req.agent is None:  # a read: a request missing a field, as a bad agent name is for any op
            raise ProtocolError("list needs an agent name (the 'agent' field of the request; --agent)")
        agent = check_agent(req.agent)
        source = param_opt_str(p, "source") or "memory"
        if source not in (*SOURCES, "all"):
            raise ProtocolError(f"'source' must be one of {', '.join(SOURCES)} or all")
        tag = filter_tag(param_opt_str(p, "tag", max_len=MAX_TAG_CHARS) or "") or None
        prefix = param_opt_str(p, "pathPrefix", max_len=MAX_PATH_PREFIX_CHARS) or ""
        limit = param_int(
            p, "limit", default=LIST_LIMIT_DEFAULT, lo=LIST_LIMIT_RANGE[0], hi=LIST_LIMIT_RANGE[1]
        )
        own = ("key >= ? AND key < ?", [f"memory/{agent}/", f"memory/{agent}0"])  # '0': after '/'
        if source == "memory":
            where, args = own
        elif source == "all":
            where, args = "source != 'memory' OR (" + own[0] + ")", own[1]
        else:
            where, args = "source = ?", [source]
        manifest = self.manifest
        show = masked_line if self.cfg.search.mask_secrets else str
        notes = []
        known: set[str] = set()
        refused = self.inbox_refused(agent) if source in ("memory", "all") else None
        listing = self._inbox_listing(agent) if source in ("memory", "all") and refused is None else None
        there = self._there(agent, listing)
        for row in manifest.list_files(where, args):
            key, src, _owner, title, tags_json, mtime_ns, chunks, fm_json, ctime_ns, indexed_at = row
            known.add(key)
            if there is not None and src == "memory" and _stem(key) not in there:
                continue  # deleted from the inbox, not yet from the index (read-only, or a sweep away)
            reference = public_reference(key, agent)
            tags = json.loads(tags_json)
            if not _under(reference, prefix):
                continue
            if tag and not any(t == tag or t.startswith(tag + "/") for t in tags):
                continue
            notes.append(
                {
                    "reference": reference,
                    "source": src,
                    "title": show(title),
                    "description": show(description_of(fm_json))[:300],
                    "tags": tags,
                    **_modified(mtime_ns, ctime_ns, indexed_at),
                    "chunks": chunks,
                    "indexed": True,
                }
            )
        if not tag:  # unindexed files have no tags to match
            notes.extend(
                self._unindexed(
                    where, args, agent, source=source, prefix=prefix, known=known, listing=listing
                )
            )
        notes.sort(key=lambda n: n["reference"])
        out: dict[str, Any] = {"notes": notes[:limit], "total": len(notes), "truncated": len(notes) > limit}
        if refused:
            out["inboxRefused"] = refused
        return out

    def _inbox_answers(self, agent: str, done: str) -> None:
        """StorageError at once while a call on the agent's inbox still hangs (status says the
        share hangs): nothing is changed, and no thread is started into the share."""
        if (hung := self.indexer.supervisor.still_hangs(f"memory/{agent}")) is not None:
            raise StorageError(
                f"not {done}: the inbox's share hangs ({hung}); nothing {done}: try again once it answers"
            )

    def _inbox_checked(self, agent: str, done: str, *, room: bool) -> dict[str, int] | None:
        """A change's look at the agent's inbox before it changes anything (is it a private
        folder? with ``room``, the size of each note: ``Inboxes.look``), each call into the share
        bounded on its own (``Supervisor.looked``: probeTimeoutSeconds each, a share learnt
        slow as long as a whole scan), so a slow inbox of many notes is looked at and written to.
        One call that does not answer marks the inbox hanging (status says so) and refuses the
        change with nothing done (the change's own calls are bounded alike: ``in_inbox``).
        Changes arriving meanwhile share the look under way (its answer is the same for each:
        one thread into the share, not one per change). Raises what the look raises (NotPrivateError)."""
        name = f"memory/{agent}"
        supervisor = self.indexer.supervisor
        root = inbox_root(self.cfg, agent)
        watch = self.cfg.watch
        # Never reached: the look ends within its own bounds (scanTimeoutSeconds as a whole).
        wait = watch.scan_timeout_seconds + watch.probe_timeout_seconds + 5
        try:
            return self._looks.ask(
                (name, room),
                lambda: supervisor.looked(root, lambda asking: self.inboxes.look(agent, asking, room=room)),
                wait,
                f"inbox-{agent}",
            )
        except StopCut as exc:  # the look was cut by the stop, not by the share
            raise BusyError(stopping_message(f"the change (nothing {done})")) from exc
        except LookCut as exc:  # slow, not hung: said so, and nothing marked
            raise StorageError(f"not {done}: {exc}; nothing {done}: try again later") from exc
        except (RootUnreachable, NoAnswer) as exc:
            raise StorageError(
                f"not {done}: the inbox {agent_inbox(self.cfg, agent)} did not answer ({exc}); nothing "
                f"{done}: try again once it answers"
            ) from exc

    def _inbox_look(self, agent: str, what: str, fn: Callable[[], T], unknown: T) -> T:
        """``fn``, a request's look at the agent's inbox (``what`` it does), bounded as ``get``'s
        reads are: ``unknown`` at once while a call on the inbox still hangs, and when this one
        does not answer within probeTimeoutSeconds, which marks the inbox hanging (status says
        so, its sweeps are retried with their backoff): a search or list on an inbox whose share
        hangs answers from the index instead of waiting as long as the share does."""
        name = f"memory/{agent}"
        supervisor = self.indexer.supervisor
        if supervisor.still_hangs(name) is not None:
            return unknown
        since = time.monotonic()
        timeout = self.cfg.watch.probe_timeout_seconds
        try:
            return bounded_call(fn, timeout, self._hanging, name, f"inbox-{agent}")
        except NoAnswer as exc:
            if exc.stuck is not None:
                supervisor.read_hangs(name, what, exc.stuck, since)
            return unknown

    def _stamps(self, name: str, paths: dict[str, Path]) -> dict[str, tuple[int, int]]:
        """(mtime, ctime) of each file (``lstat``: a link's own, not its target's) of the root
        ``name``, each look-up bounded on its own (``Supervisor.looked``: probeTimeoutSeconds
        each, not their sum: a slow share answering each in time is no hung one): none while a
        call on the root hangs, or once one does not answer (the root is then marked hanging:
        a list answered without those files instead of waiting as long as the share does). A
        file that cannot be looked up is left out."""
        supervisor = self.indexer.supervisor
        root = self._root_named(name)
        if not paths or root is None or supervisor.still_hangs(name) is not None:
            return {}

        def look(asking: Asking) -> dict[str, tuple[int, int]]:
            out = {}
            for key, path in paths.items():
                asking.ask("stat", key)
                try:
                    st = path.lstat()
                except OSError:
                    continue
                finally:
                    asking.answered()
                out[key] = (st.st_mtime_ns, st.st_ctime_ns)
            return out

        try:
            return supervisor.looked(root, look)
        except RootUnreachable:
            return {}

    def _root_named(self, name: str) -> Root | None:
        """The configured root called ``name`` (vault, wiki, memory/<agent>)."""
        if name.startswith("memory/"):
            return inbox_root(self.cfg, name.removeprefix("memory/"))
        return next((r for r in vault_roots(self.cfg) if r.name == name), None)

    def _inbox_listing(self, agent: str) -> Sequence[tuple[str, bool]] | None:
        """The inbox's files (bounded: ``_inbox_look``; None when it hangs), as ``_listed``."""
        return self._inbox_look(agent, "listing the inbox", lambda: self._listed(agent), None)

    def _listed(self, agent: str) -> Sequence[tuple[str, bool]] | None:
        """The inbox's files (name, is a link), one folder read; none when the folder is not there
        (removed whole: its notes are gone, though the index still holds them, and were listed
        again as indexed); None when it cannot be read (what is there is not known). An
        inbox that is a link (into another agent's, or elsewhere) is never asked for: neither read
        nor listed. A note that is a symbolic link is listed (never followed: its name only), with
        why it is not read (it went unlisted, though list promises every note there)."""
        try:
            with os.scandir(agent_inbox(self.cfg, agent)) as entries:
                return [
                    (e.name, e.is_symlink())
                    for e in entries
                    if e.is_file(follow_symlinks=False) or e.is_symlink()
                ]
        except FileNotFoundError:
            return []
        except OSError:
            return None

    def _there(self, agent: str, listing: Sequence[tuple[str, bool]] | None) -> set[str] | None:
        """The stems of the inbox's files (NFC), to leave out indexed notes deleted since; None
        when that cannot be told: the inbox unread, or its root offline (an unreachable share is
        not an empty one: its notes stay listed as they stay searchable)."""
        if listing is None:
            return None
        status = self.indexer.supervisor.roots.get(f"memory/{agent}")
        if status is not None and (status.offline or status.hanging is not None):
            return None
        return {_nfc(name[:-3] if name.lower().endswith(".md") else name) for name, _linked in listing}

    def inbox_refused(self, agent: str | None) -> str | None:
        """Why the agent's inbox is neither read nor listed (a symlink, not a folder, another
        user's), said with lists and searches of its memory: an empty answer alone reads as
        "nothing there"."""
        if agent is None:
            return None
        root = Root("memory", agent_inbox(self.cfg, agent), agent=agent)
        # Bounded: asked with every search by an agent (a hung share is no refusal: None).
        return self._inbox_look(agent, "looking up the inbox", lambda: inbox_refusal(root), None)

    def _unindexed(
        self,
        where: str,
        args: Sequence[Any],
        agent: str,
        *,
        source: str,
        prefix: str,
        known: set[str],
        listing: Sequence[tuple[str, bool]] | None,
    ) -> Iterable[dict[str, Any]]:
        """Files that are there but not searchable: skipped ones, and memory notes not indexed yet."""
        out = []
        for key, src, mtime_ns, state, error, ctime_ns in self.manifest.unindexed_files(where, args):
            known.add(key)
            reference = public_reference(key, agent)
            if _under(reference, prefix):
                why = f"{state}: {error or 'unknown reason'}"
                out.append(unindexed_note(reference, src, (mtime_ns, ctime_ns), why))
        # Left out by the folder scans (too large, hidden, ...): never in the manifest.
        left_out = self.indexer.changes.skipped_notes()
        asked: dict[str, dict[str, Path]] = {}
        for key, (path, _reason) in sorted(left_out.items()):
            src = key.split("/", 1)[0]  # memory: the inbox listing below says why, with advice
            if key in known or src == "memory" or source not in (src, "all"):
                continue
            if _under(public_reference(key, agent), prefix):
                asked.setdefault(src, {})[key] = path
        for src, paths in sorted(asked.items()):
            stamps = self._stamps(src, paths)  # bounded: the vault's share may hang
            for key in paths:
                if key in stamps:
                    known.add(key)
                    why = f"skipped: {left_out[key][1]}"
                    out.append(unindexed_note(public_reference(key, agent), src, stamps[key], why))
        inbox = agent_inbox(self.cfg, agent)
        if listing is not None:
            names = sorted((n, linked) for n, linked in listing if is_markdown_name(n))
            keyed = {
                f"memory/{agent}/{name[:-3]}": (name, linked)
                for name, linked in names
                if f"memory/{agent}/{name[:-3]}" not in known and _under(f"memory/{name[:-3]}", prefix)
            }
            stamps = self._stamps(f"memory/{agent}", {k: inbox / n for k, (n, _l) in keyed.items()})
            for key, (name, linked) in keyed.items():
                if key not in stamps:
                    continue
                left = left_out[key][1] if key in left_out else None
                why = _why_not_indexed(name, linked=linked, left_out=left)
                out.append(unindexed_note(public_reference(key, agent), "memory", stamps[key], why))
        return out


def _stem(key: str) -> str:
    """A memory note's key (``memory/<agent>/<stem>``) as the inbox's file stems are kept (NFC)."""
    return _nfc(key.split("/", 2)[2])


def _nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def _why_not_indexed(name: str, *, linked: bool, left_out: str | None) -> str:
    """Why a file of an inbox that the index does not hold is not searchable."""
    if linked:
        return f"skipped: {LINK_REASON}; deleting the note removes the link, never its target"
    if (copy := inbox_copy_reason(name)) is not None:  # a home synced between machines, a copy
        return f"skipped: {copy}"
    if not SLUG_RE.fullmatch(name[:-3]):
        # Neither searchable nor readable through get: the person can rename it (an agent was
        # told to, with no tool to do so).
        return (
            "never indexed and not readable by reference: its file name is not a memory slug "
            "(a-z, 0-9, '_', '-'); the user can rename the file"
        )
    return f"skipped: {left_out}" if left_out is not None else "not indexed yet"


def _under(reference: str, prefix: str) -> bool:
    """Whether ``reference`` lies under ``pathPrefix`` (``under_prefix``: its path after the source,
    or the reference itself)."""
    root, path = reference.split("/", 1)
    return under_prefix(path, prefix, root)


# A failure of the disk the home lies on, not of one inbox: one entry for every agent, cleared by
# any change that worked (it had room) or by the tick that finds room again (a quota, EDQUOT,
# is not seen by that check: it stays with the inbox that met it).
DISK_FULL = (errno.ENOSPC,)


def _write_failed(problems: Problems, agent: str, what: str, exc: OSError) -> None:
    """Report a failed change of ``agent``'s inbox: one entry per inbox (a later failure of another
    agent hid it, and that agent's success cleared it), one for a full disk."""
    if exc.errno in DISK_FULL:
        problems.report(
            "memory_write", f"memory writes fail: no room on the disk of the home ({exc.strerror or exc})"
        )
    else:
        problems.report("memory_write", f"{what} the {agent} inbox failed: {exc}", subject=agent)


def _write_worked(problems: Problems, agent: str) -> None:
    """A change of ``agent``'s inbox worked: its own problem goes, and a full disk's (it had room),
    and the home's (its agents folder is the one kept); not another inbox's."""
    problems.clear("memory_write", subject=agent)
    problems.clear("memory_write")
    problems.clear("home")


def audit_warning(error: str | None, agent: str, problems: Problems) -> str | None:
    """The warning for a change made whose audit line could not be appended, or None."""
    if error is None:
        problems.clear("memory_audit", subject=agent)
        return None
    problems.report(
        "memory_audit", f"the {agent} inbox's audit log cannot be appended to: {error}", subject=agent
    )
    return f"done, but its line in the audit log could not be written ({error})"


def _local(mtime_ns: int) -> str:
    return dt.datetime.fromtimestamp(mtime_ns / 1e9).astimezone().isoformat(timespec="seconds")


def _modified(mtime_ns: int, ctime_ns: int, indexed_at: float = 0.0) -> dict[str, str]:
    """A listed note's ``modified``: its last change as search dates it (``last_change``), and
    ``modifiedAhead``, the file's own day, when its mtime lies more than a day in the future (a
    list showed that date unflagged while the note's hit said it lies in the future). Ahead with
    no sane time of it seen here (its ctime ahead too, never indexed): ``modified`` is empty, as
    search gives such a note no day (the future mtime was shown as its last change seen here)."""
    changed, ahead = last_change(mtime_ns, ctime_ns, indexed_at)
    if not ahead:
        return {"modified": _local(mtime_ns)}
    return {"modified": _local(changed) if changed else "", "modifiedAhead": local_day(mtime_ns)}


def _unindexed_warning(manifest: Manifest, key: str, exc: Exception) -> str:
    """What a delete whose index step failed says: once the entry is marked ``deleting`` no
    answer shows it (only its removal from the keyword and vector indexes waits)."""
    try:
        hidden = manifest.file_states_of([key]).get(key)
    except sqlite3.Error:
        hidden = None
    why = plain_error(str(exc))  # an engine's debug dump said in plain words, as status says it
    if hidden is not None and hidden.state == "deleting":
        return (
            f"deleted and no longer found; its index entry is removed once the index can be written ({why})"
        )
    return f"deleted, but still found by search until the index can be written ({why})"


def unindexed_note(reference: str, source: str, times: tuple[int, int], why: str) -> dict[str, Any]:
    """A file there but not searchable; ``times``: its (mtime, ctime) in ns."""
    return {
        "reference": reference,
        "source": source,
        "title": reference.rsplit("/", 1)[-1],
        "description": "",
        "tags": [],
        **_modified(*times),
        "chunks": 0,
        "indexed": False,
        "why": why,
    }


def _triples(text: str) -> set[tuple[str, ...]]:
    """The note's word triples (lowercase); a note of one or two words is its words."""
    words = [w.lower() for w in _WORDS.findall(text)]
    if len(words) < 3:
        return {(w,) for w in words}
    return set(zip(words, words[1:], words[2:], strict=False))


def _instead(reference: str) -> str:
    if reference.startswith("memory/"):
        slug = reference.rsplit("/", 1)[-1]
        return f"update that note with memory_edit (slug {slug!r}) instead of writing a second one"
    return f"the user's note {reference} already says this: refer to it instead of copying it into memory"
