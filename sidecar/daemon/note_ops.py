"""The note ops, a mixin of ``Handlers`` (``handlers``): ``get`` (a note's text, whole or a part,
with its links and backlinks), ``related`` and ``outline``, and the bounded look at a note's file
on disk they share with ``why`` (a hung share answers within the probe timeout). Its own module
because these ops read notes, not rankings; the state they work on is the handlers' own, made in
``Handlers.__init__``.
"""

from __future__ import annotations

import contextlib
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sidecar.config import Config
from sidecar.contracts.errors import ExcludedError, NotFoundError, ProtocolError, SourceError, UnreadableError
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import (
    MAX_PATH_PREFIX_CHARS,
    MAX_REFERENCE_CHARS,
    RELATED_LIMIT_RANGE,
    TOKEN_BUDGET_RANGE,
    Request,
    check_known,
    param_int,
    param_opt_str,
    param_str,
)
from sidecar.daemon.anchors import look_up_anchors, root_key
from sidecar.daemon.naming import named_note
from sidecar.index.indexer import Indexer
from sidecar.model.embedder import EmbedderSlot, approx_token_count
from sidecar.notes.chunking import line_count, line_range, lines_within
from sidecar.notes.frontmatter import description_of
from sidecar.notes.links import LinkGraph, unresolved_paths
from sidecar.notes.markdown import anchor_lines
from sidecar.notes.outline import Page, lead_line, one_line
from sidecar.notes.outline import render as render_outline
from sidecar.notes.redact import mask, masked_line
from sidecar.search.retrieval import Retriever
from sidecar.stores.manifest import Manifest
from sidecar.vault.ignore import OWN_RULES
from sidecar.vault.note_text import NoteUnreadable, read_inbox_note, read_note
from sidecar.vault.notenames import TOO_LARGE
from sidecar.vault.references import path_for_key, public_reference
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.timeout import NoAnswer, SharedProbes, bounded_call

MAX_LINE = 10_000_000  # beyond any note's line count (notes are at most index.maxFileBytes)
# Held roots whose folder is not the share: get does not read what lies there now.
_NOT_THE_SHARE = frozenset({"unmounted", "device", "empty"})
OUTLINE_BUDGET = 1000
T = TypeVar("T")


class NoteOps:
    """The note ops of ``Handlers`` (which sets the state below)."""

    cfg: Config
    indexer: Indexer
    manifest: Manifest
    supervisor: Supervisor
    retriever: Retriever
    slot: EmbedderSlot
    _hanging: SharedProbes
    _anchors_hanging: SharedProbes
    anchor_clock: Callable[[], float]

    if TYPE_CHECKING:  # the handlers' own (``SearchOps``)

        def _building(self) -> tuple[int, int] | None: ...

    def _indexing(self) -> dict[str, Any]:
        """An answer's ``indexing`` ({"done", "total"}) while a new or rebuilt index has not read
        every note, else nothing."""
        building = self._building()
        return {} if building is None else {"indexing": {"done": building[0], "total": building[1]}}

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
            path, text = self._on_disk(key, lambda: self._read(key, reference), "reading")
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
                look=lambda target, fn, left: self._on_disk(
                    target, fn, "reading", within=left, hanging=self._anchors_hanging
                ),
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
            **self._indexing(),  # backlinks from notes not read yet are not known yet
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
        if status is not None and not status.offline and (hung := self.supervisor.still_hangs(source)):
            # A look at its folder or a read for a request hangs (no sweep found it offline yet).
            raise UnreadableError(
                f"{quoted(reference)} cannot be read now: {hung}; its indexed text is still found by search"
            )
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

    def _on_disk(
        self,
        key: str,
        fn: Callable[[], T],
        what: str = "looking up",
        *,
        within: float | None = None,
        hanging: SharedProbes | None = None,
    ) -> T:
        """``fn``, a look at the file behind ``key`` (``what`` it does), within the probe
        timeout: on a hung share a request thread would otherwise wait as long as the share does
        (forever for a hard NFS mount), and a few such requests would stop the daemon answering at
        all. One that times out marks its root hanging (``Supervisor.read_hangs``, as a sweep's
        read does); while a call on the root still hangs, further looks fail at once. ``within``:
        a shorter wait of the request's own (a get's anchors), the root judged hanging only once
        the call is still in after the probe timeout; ``hanging``: whose stuck calls it counts."""
        source = root_key(key)
        if (hung := self.supervisor.still_hangs(source)) is not None:
            raise hung
        timeout = self.cfg.watch.probe_timeout_seconds
        wait = timeout if within is None else min(within, timeout)
        since = time.monotonic()
        try:
            return bounded_call(fn, wait, hanging or self._hanging, source, f"get-{source}")
        except NoAnswer as exc:
            if exc.stuck is not None:
                self.supervisor.read_hangs(source, f"{what} {key.split('/', 1)[-1]}", exc.stuck, since)
            raise

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
        # Links of notes not read yet are not known yet.
        return {"reference": public_reference(key, req.agent), "related": items, **self._indexing()}

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
