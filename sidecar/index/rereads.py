"""Notes read again when the way they are read changed, a mixin of ``Indexer`` (``indexer``):
another chunker or chunking setting or model's tokenizer (with the model switch it calls for),
another Canvas, drawing, link-alias or property-name reader; each marked once for the next sweep
by a meta row of its version. Its own module because it runs at a start and a reload, before any
sweep; the state it works on is the ``Indexer``'s own.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from sidecar.config import Config
from sidecar.index.writes import Writer
from sidecar.notes.chunking import (
    CHUNKER_VERSION,
    DRAWING_READER_VERSION,
    LINK_ALIAS_READER_VERSION,
    PROPERTY_NAME_READER_VERSION,
)
from sidecar.stores.manifest import Manifest
from sidecar.stores.vectors import holds_model, table_prefix
from sidecar.vault.canvas import CANVAS_READER_VERSION, CANVAS_SUFFIX

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.indexer")


class Rereads:
    """The one-time re-reads of an ``Indexer`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    writer: Writer

    def reparse_if_chunking_changed(self) -> None:
        """Notes cut by another chunker version, other chunking settings or another model's
        tokenizer are read and cut again by the next sweep (chunks whose embed text stays the same
        keep their vectors; the rest are embedded again in the background), so the index
        converges on today's chunking."""
        # Chunk sizes are counted in the model's own tokens (words when no model runs): a model
        # switch re-cuts too, or chunks cut to e5's 200 tokens ran past MiniLM's 256 and their
        # tails were never embedded (the re-cut chunks go to the new model's table only:
        # ``Writer._recut_for_switch``).
        counted = self.cfg.embedder.model if self.cfg.embedder.enabled else "words"
        want = self._chunking(counted)
        have = self.manifest.get_meta("chunker")
        # A switch to this model follows once it loads (``Writer.switch_due``): cut for another
        # model, or a switch under way before the stop.
        self.writer.switch_due = self._switch_due(have, counted)
        if have == want:
            return
        notes = self.manifest.reread_all()  # none in a new index
        if notes:
            log.info("index_rechunk notes=%d old=%s new=%s", notes, have or "unrecorded", want)
        self.manifest.set_meta("chunker", want)

    def _switch_due(self, have: str | None, counted: str) -> bool:
        """Whether a switch to the configured model follows once it loads: the notes were cut
        for another model's tokens, the serving table is another model's, or a switch was under
        way when the daemon stopped."""
        table = self.manifest.get_meta("vector_table")
        if not self.cfg.embedder.enabled or not table:
            return False
        cut_for_another = have is not None and have != "" and have.rpartition(":")[2] != counted
        # The table another model's (a stop or a kill after a start's re-cut recorded the new
        # chunker, before the switch began: the chunker then says nothing of it).
        if cut_for_another or self.manifest.get_meta("vector_table_next"):
            return True
        # The model the table's own metadata names, exactly: by the name's prefix, e5's was taken
        # for e5-small's (a table that cannot be read here is judged by its name, as before).
        same = holds_model(self.cfg.index_dir / "vectors", table, counted)
        return not (table.startswith(table_prefix(counted)) if same is None else same)

    def reread_canvases_if_read_differently(self) -> None:
        """Canvases indexed by another Canvas reader are read again by the next sweep (their
        bytes are as they were, so no sweep would): a first card opening with "---" stayed the
        canvas's front matter until it was edited. Vectors of chunks whose text stays are kept."""
        reread = functools.partial(self.manifest.reread_suffix, CANVAS_SUFFIX)
        self._reread_once("canvas_reader", CANVAS_READER_VERSION, reread, "canvas_reread")

    def reread_drawings_if_read_differently(self) -> None:
        """Excalidraw drawings indexed by another drawing reader are read again by the next sweep
        (their bytes are as they were): the elements' ids were words of the drawing. Only they
        are read again, not every note as a chunker change does (a whole vault on a share)."""
        reread = self.manifest.reread_drawings
        self._reread_once("drawing_reader", DRAWING_READER_VERSION, reread, "drawing_reread")

    def reread_link_aliases_if_read_differently(self) -> None:
        """Notes whose aliases hold a wiki-link written unquoted (``aliases: [[Bar]]``, a list in a
        list as YAML reads it) are read again by the next sweep when the way such aliases are read
        changes (their bytes are as they were): the alias was none, and their first chunks did not
        name it. Only they are read again, not every note as a chunker change does."""
        reread = self.manifest.reread_link_aliases
        self._reread_once("link_alias_reader", LINK_ALIAS_READER_VERSION, reread, "link_alias_reread")

    def reread_property_names_if_read_differently(self) -> None:
        """Notes whose aliases, tags or title YAML read as a number, a yes/no or a time
        (``aliases: [010]`` named the note "8") are read again by the next sweep when the way
        such names are read changes (their bytes are as they were). Only they are read again."""
        version, reread = PROPERTY_NAME_READER_VERSION, self.manifest.reread_typed_names
        self._reread_once("property_name_reader", version, reread, "property_name_reread")

    def _reread_once(self, row: str, version: int, reread: Callable[[], int], event: str) -> None:
        """Mark the notes ``reread`` picks to be read again by the next sweep once the meta
        ``row`` is not ``version`` (a reader that changed); marked before the row is written: a
        crash between the two redoes it. ``event``: the log line's name."""
        want = str(version)
        have = self.manifest.get_meta(row)
        if have == want:
            return
        notes = reread()
        if notes:
            log.info("%s notes=%d old=%s new=%s", event, notes, have or "1", want)
        self.manifest.set_meta(row, want)

    def _chunking(self, counted: str) -> str:
        chunking = self.cfg.chunking
        return f"{CHUNKER_VERSION}:{chunking.max_tokens}:{chunking.overlap}:{counted}"

    def counted_with(self, counted: str) -> None:
        """The tokenizer that cuts notes is not the configured model's (it failed to load: another
        model answers in its place, or words are counted): recorded as such, so the next start
        with the configured model cuts the notes again."""
        if self.manifest.get_meta("chunker") != self._chunking(counted):
            self.manifest.set_meta("chunker", self._chunking(counted))
            log.info("index_chunking_recorded counted=%s", counted)
