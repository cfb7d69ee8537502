"""One note into records: read it, hash it, cut it into chunks, name each chunk.

Chunk ids hash (key, embedded text, occurrence), so an edit re-embeds only the chunks whose text
changed. A note whose bytes hash as before is not parsed again; one that cannot be read or parsed
becomes a skipped record with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import Config
from sidecar.notes.chunking import Chunk, NoteDraft, ParsedNote, cut_note, parse_note
from sidecar.notes.frontmatter import aliases_of
from sidecar.notes.linktext import Link, extract_links
from sidecar.stores.embedtext import embed_hash
from sidecar.stores.manifest_rows import ChunkRecord, FileRecord, HeldNote
from sidecar.vault.note_text import NoteUnreadable, decode_note, read_inbox_note, read_note
from sidecar.vault.sources import NoteFile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A note read and parsed, ready to be written (or skipped, with the reason)."""

    note: NoteFile
    hash: str
    parsed: ParsedNote | None  # None: unchanged, or unreadable (see skip_reason)
    skip_reason: str | None = None
    links: tuple[Link, ...] = ()


def chunk_id(key: str, embed_text: str, occurrence: int) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(key.encode())
    h.update(b"\0")
    h.update(embed_text.encode())
    h.update(b"\0%d" % occurrence)
    return h.hexdigest()


@dataclass(frozen=True)
class Drafted:
    """A note read and parsed, waiting for the tokenizer to be cut into chunks."""

    note: NoteFile
    hash: str
    draft: NoteDraft
    links: tuple[Link, ...]


# How a note's file is read: given the note and the call that reads it (the indexer runs it
# with a deadline: a share may hang on open or read).
Reader = Callable[[NoteFile, Callable[[], tuple[bytes, str]]], tuple[bytes, str]]


def _at_once(note: NoteFile, fn: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str]:
    return fn()


def draft(
    note: NoteFile, known_hash: str | None, data: bytes | None, limit: int, read: Reader = _at_once
) -> Prepared | Drafted | None:
    """Read (or take ``data``), hash and parse one note, all but the token counts (``finish``
    cuts it). None: the note vanished; a Prepared without chunks: unchanged (hash equals
    ``known_hash``), unreadable or unparseable, with the skip reason. The file is read through
    ``read``, which raises what it likes (RootUnreachable: it did not answer) past this."""
    try:
        if data is not None:  # a memory write's own bytes: never read back through a path
            text = decode_note(data, limit)
        elif note.root.source == "memory":
            data, text = read(note, lambda: read_inbox_note(note.root, note.path.name, limit))
        else:
            data, text = read(note, lambda: read_note(note.path, limit, note.root))
    except FileNotFoundError:
        return None  # vanished between scan and read: the next sweep deletes it
    except NoteUnreadable as exc:
        # A failed read is warned of by the indexer at its first failure in a row only.
        (log.info if unread(exc.reason) else log.warning)(
            "file_skipped path=%s reason=%s", note.path, exc.reason
        )
        return Prepared(note, "", None, exc.reason)
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    if digest == known_hash:
        return Prepared(note, digest, None)
    try:
        parsed = parse_note(text, title=Path(note.rel).stem)
    except (ValueError, RecursionError) as exc:  # pathological Markdown: skip this note only
        return _unparseable(note, digest, exc)
    return Drafted(note, digest, parsed, tuple(extract_links(text, parsed.code)))


def finish(cfg: Config, drafted: Drafted, count_tokens: Callable[[Sequence[str]], list[int]]) -> Prepared:
    """Cut a drafted note into chunks, counted with ``count_tokens``."""
    note = drafted.note
    try:
        parsed = cut_note(
            drafted.draft, count_tokens, max_tokens=cfg.chunking.max_tokens, overlap=cfg.chunking.overlap
        )
    except (ValueError, RecursionError) as exc:
        return _unparseable(note, drafted.hash, exc)
    if parsed.front_matter_error:
        log.info("front_matter_ignored path=%s reason=%s", note.path, parsed.front_matter_error)
    return Prepared(note, drafted.hash, parsed, links=drafted.links)


def as_held(note: NoteFile, digest: str, held: HeldNote, links: Sequence[Link]) -> Prepared:
    """A moved note as its old entry holds it (``Manifest.held_note``), for its new key: what
    reading and cutting its file gives when that file is the one indexed there, unwritten since
    (``moves.unchanged_move``). The chunks' ids are its new key's (``records``)."""
    front_matter = json.loads(held.front_matter)
    chunks = tuple(
        Chunk(o, text, tuple(json.loads(headings)), start, end, embed_text, tokens, bool(hashed))
        for o, text, headings, start, end, embed_text, tokens, hashed in held.chunks
    )
    parsed = ParsedNote(
        held.title,
        aliases_of(front_matter),
        "",  # the description is in the chunks already (it is read when cutting only)
        tuple(json.loads(held.tags)),
        front_matter,
        held.error,
        chunks,
    )
    return Prepared(note, digest, parsed, links=tuple(links))


def _unparseable(note: NoteFile, digest: str, exc: BaseException) -> Prepared:
    log.warning("file_skipped path=%s reason=parse error %s", note.path, exc)
    return Prepared(note, digest, None, f"parse error: {type(exc).__name__}")


def unread(reason: str | None) -> bool:
    """Whether a skip reason says the note's read failed (no permission, an I/O error): no
    verdict on the note, which is read again until it reads."""
    return reason is not None and reason.startswith("unreadable")


def file_record(p: Prepared, state: str) -> FileRecord:
    """The manifest's file record of a prepared note, in ``state``."""
    n = p.note
    # A note whose read failed gets a size no file has (``Manifest.reread_all``): recorded with
    # its stat, every later sweep took it as done, and a folder made readable again changes no
    # stat of its notes, so it stayed out of the index until edited.
    size = -1 if p.parsed is None and unread(p.skip_reason) else n.size
    record = functools.partial(
        FileRecord, n.key, n.root.source, n.root.agent, n.rel, n.mtime_ns, size, p.hash,
        ctime_ns=n.ctime_ns, dev=n.dev, ino=n.ino, btime_ns=n.born(),
    )  # fmt: skip
    if p.parsed is None:
        skipped = "skipped" if state != "indexing" else state
        return record(skipped, title=Path(n.rel).stem, error=p.skip_reason)
    parsed = p.parsed
    return record(
        state,
        title=parsed.title,
        tags=parsed.tags,
        front_matter=json.dumps(parsed.front_matter, ensure_ascii=False),
        error=parsed.front_matter_error,
    )


def records(p: Prepared, state: str) -> tuple[FileRecord, list[ChunkRecord]]:
    """The manifest's file record (in ``state``) and chunk records of a prepared note."""
    n = p.note
    if p.parsed is None:
        return file_record(p, state), []
    parsed = p.parsed
    seen: dict[str, int] = {}
    chunks: list[ChunkRecord] = []
    for c in parsed.chunks:
        occurrence = seen.get(c.embed_text, 0)
        seen[c.embed_text] = occurrence + 1
        chunks.append(
            ChunkRecord(
                chunk_id(n.key, c.embed_text, occurrence),
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
    return file_record(p, state), chunks
