"""The link graph kept in the manifest: each note's links (read by :mod:`sidecar.notes.linktext`,
resolved by :mod:`sidecar.notes.resolver`) as rows of the manifest's ``link_rows`` (notes named
by number, each key kept once in ``link_keys``; the ``links`` view reads them by key), written in
the same transaction as the note's chunks and re-resolved whenever a note that a link's name could
mean appears, vanishes or changes its aliases; and the graph read back (links, backlinks, related
notes) as an agent may see it.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sidecar.notes.frontmatter import aliases_of
from sidecar.notes.linktext import Link, link_name, strip_md
from sidecar.notes.resolver import Resolver, Target, vault_path

log = logging.getLogger(__name__)

# The graph's rows name each note by a number, its key stored once in ``link_keys``: as text,
# every link repeated its source's and target's paths in the row and again in the index on each
# (53,005 links of 10,433 notes took 23.5 MB, about 440 bytes a link; 8 MB so). ``links`` reads
# them back by key as one table did: what the graph's readers ask.
_KEYS = "CREATE TABLE IF NOT EXISTS link_keys (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE)"
_ROWS = """CREATE TABLE IF NOT EXISTS link_rows (
  src INTEGER NOT NULL, ord INTEGER NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL,
  anchor TEXT NOT NULL, display TEXT NOT NULL, embed INTEGER NOT NULL, kind TEXT NOT NULL,
  line INTEGER NOT NULL, dst INTEGER, candidates INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (src, ord)
) WITHOUT ROWID"""
_COLUMNS = ("ord", "target", "name", "anchor", "display", "embed", "kind", "line", "candidates")
_VIEW = (
    "CREATE VIEW IF NOT EXISTS links AS SELECT s.key AS src, "
    + ", ".join(f"l.{c} AS {c}" for c in _COLUMNS[:-1])
    + ", d.key AS dst, l.candidates AS candidates "
    "FROM link_rows l JOIN link_keys s ON s.id = l.src LEFT JOIN link_keys d ON d.id = l.dst"
)
_TABLES = (
    _KEYS,
    _ROWS,
    "CREATE INDEX IF NOT EXISTS link_rows_by_dst ON link_rows(dst)",
    "CREATE INDEX IF NOT EXISTS link_rows_by_name ON link_rows(name)",
    _VIEW,
    # Notes of the vault and the wiki that a rule leaves out of the index (Obsidian's Excluded
    # files, index.exclude), as each full sweep of their root found them: links resolve to them
    # as in Obsidian (which hides excluded files from search and graph, not from links), search
    # never sees them (they have no chunks).
    "CREATE TABLE IF NOT EXISTS excluded_notes "
    "(key TEXT PRIMARY KEY, source TEXT NOT NULL, rule TEXT NOT NULL)",
)
# The table of schema 4 and 5, each row holding its source's and target's keys as text.
_OLD_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'links'"


# --- storage in the manifest -------------------------------------------------------------------


def ensure_schema(db: sqlite3.Connection) -> bool:
    """Create the link graph's tables; True when it is new (the notes must be read again to fill
    it). A file with the table of schema 4 and 5 keeps it (``move_rows`` moves its rows in the
    transaction that labels the file with the new schema)."""
    if db.execute(_OLD_TABLE).fetchone() is not None:
        db.execute(_TABLES[-1])
        return False
    existed = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'links'").fetchone()
    for statement in _TABLES:
        db.execute(statement)
    return existed is None


def old_table_views(db: sqlite3.Connection) -> None:
    """The table of schema 4 and 5 seen through the graph's table names, as temporary views of a
    read-only connection (a full disk serves such a file before its upgrade): each note's number
    is its key itself, so every reader's join of ``link_rows`` and ``link_keys`` reads as on the
    new tables, and ``links`` is the old table, already by key."""
    columns = ", ".join(("src", *_COLUMNS, "dst"))
    db.execute(f"CREATE TEMP VIEW link_rows AS SELECT {columns} FROM main.links")
    db.execute(
        "CREATE TEMP VIEW link_keys AS SELECT src AS id, src AS key FROM main.links "
        "UNION SELECT dst, dst FROM main.links WHERE dst IS NOT NULL"
    )


def move_rows(db: sqlite3.Connection) -> bool:
    """The rows of the table of schema 4 and 5 (keys as text) moved into the graph's tables, the
    old table dropped, inside the caller's transaction: a kill part-way leaves the old table as it
    was, under the old schema, for the next start to move again. False when there is none."""
    if db.execute(_OLD_TABLE).fetchone() is None:
        return False
    started = time.monotonic()
    for statement in _TABLES[:4]:
        db.execute(statement)
    db.execute("DELETE FROM link_rows")  # none but from a move that did not commit; to be sure
    db.execute("DELETE FROM link_keys")
    # Numbered in key order: the rows keep the order by source key the old table had.
    for column in ("src", "dst"):
        db.execute(
            f"INSERT OR IGNORE INTO link_keys(key) SELECT {column} FROM links "
            f"WHERE {column} IS NOT NULL ORDER BY {column}"
        )
    put_back(db, "links")
    db.execute("DROP TABLE links")
    db.execute(_VIEW)
    log.info(
        "manifest_links_moved links=%d notes=%d seconds=%.2f",
        db.execute("SELECT count(*) FROM link_rows").fetchone()[0],
        db.execute("SELECT count(*) FROM link_keys").fetchone()[0],
        time.monotonic() - started,
    )
    return True


def put_back(db: sqlite3.Connection, table: str, where: str = "") -> None:
    """The rows ``where`` of ``table``, a table of links by key as text (the old table, or a
    rebuild's copy ``aside_links``), into the graph, keeping a row there already (inside the
    caller's transaction). A column the copy lacks (one written by another version) takes its
    default."""
    have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    defaults = {"dst": "NULL", "candidates": "0", "embed": "0", "line": "0"}
    picked = [f"a.{c}" if c in have else defaults.get(c, "''") for c in _COLUMNS]
    dst = "d.id" if "dst" in have else "NULL"
    where = f"WHERE {where}" if where else "WHERE 1"
    for column in ("src", "dst") if "dst" in have else ("src",):
        db.execute(
            f"INSERT OR IGNORE INTO link_keys(key) SELECT a.{column} FROM {table} a "
            f"{where} AND a.{column} IS NOT NULL"
        )
    joined = "LEFT JOIN link_keys d ON d.key = a.dst" if "dst" in have else ""
    db.execute(
        f"INSERT OR IGNORE INTO link_rows(src, {', '.join(_COLUMNS)}, dst) "
        f"SELECT s.id, {', '.join(picked)}, {dst} FROM {table} a JOIN link_keys s ON s.key = a.src "
        f"{joined} {where} ORDER BY s.id, a.ord"
    )


def _ids(db: sqlite3.Connection, keys: Iterable[str], *, add: bool = False) -> dict[str, int]:
    """The numbers of these notes' keys in the graph (``add``: given one where they have none)."""
    keys = list(dict.fromkeys(keys))
    if add:
        db.executemany("INSERT OR IGNORE INTO link_keys(key) VALUES (?)", [(k,) for k in keys])
    out: dict[str, int] = {}
    for start in range(0, len(keys), 500):
        part = keys[start : start + 500]
        marks = ",".join("?" * len(part))
        out.update(db.execute(f"SELECT key, id FROM link_keys WHERE key IN ({marks})", part).fetchall())
    return out


def _forget(db: sqlite3.Connection, ids: Iterable[int]) -> None:
    """The keys of these numbers that no link names any more dropped (the rest stay)."""
    db.executemany(
        "DELETE FROM link_keys WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM link_rows WHERE src = ?1) "
        "AND NOT EXISTS (SELECT 1 FROM link_rows WHERE dst = ?1)",
        [(i,) for i in set(ids)],
    )


def forget_unnamed(db: sqlite3.Connection) -> int:
    """Every key no link names dropped (once per start: what a step missed); how many."""
    return db.execute(
        "DELETE FROM link_keys WHERE NOT EXISTS (SELECT 1 FROM link_rows WHERE src = link_keys.id) "
        "AND NOT EXISTS (SELECT 1 FROM link_rows WHERE dst = link_keys.id)"
    ).rowcount


def clear(db: sqlite3.Connection) -> None:
    """Every link gone (inside the caller's transaction)."""
    db.execute("DELETE FROM link_rows")
    db.execute("DELETE FROM link_keys")


# What a link can mean: notes known to the index, and excluded notes (by their path only: their
# aliases are not read, as nothing of an excluded note is). A note being deleted is none of the
# former (its links are resolved again as the deletion begins: ``Writer.delete``).
_KNOWN = "state IN ('indexed', 'skipped', 'indexing')"
_TARGETS = (
    "SELECT key, source, agent, front_matter FROM ("
    f"SELECT key, source, agent, front_matter FROM files WHERE {_KNOWN} "
    "UNION ALL SELECT key, source, '', '{}' FROM excluded_notes "
    f"WHERE key NOT IN (SELECT key FROM files WHERE {_KNOWN})) WHERE 1 = 1"
)


def _targets(rows: Iterable[tuple[Any, ...]], wiki_subfolder: str) -> list[Target]:
    out: list[Target] = []
    for key, source, agent, front_matter in rows:
        aliases: tuple[str, ...] = ()
        if source != "memory" and front_matter and "alias" in front_matter.lower():  # most notes have none
            try:
                aliases = aliases_of(json.loads(front_matter))
            except ValueError:
                aliases = ()
        out.append(Target(key, vault_path(key, wiki_subfolder), aliases, agent if source == "memory" else ""))
    return out


def names_of(key: str, aliases: Iterable[str] = ()) -> set[str]:
    """The link names that can mean this note: its file name and aliases (lowercased)."""
    names = {key.rsplit("/", 1)[-1].lower()}
    names.update(a.strip().lower() for a in aliases if a.strip())
    return names


# ``candidates`` of a link written while links are resolved later (the first sweep of a start or
# a rebuild resolves them all at its end) that has no earlier resolution to keep: not resolved
# yet, which is not "names no note" (``unresolved_paths``, ``LinkGraph.totals`` leave it out).
NOT_RESOLVED_YET = -1


def replace_links(
    db: sqlite3.Connection,
    key: str,
    links: Sequence[Link],
    *,
    later: bool = False,
    exists: Callable[[str, str | None], bool] | None = None,
) -> None:
    """A note's links, replaced inside the caller's transaction (resolved by ``reresolve``).
    ``later``: resolved only once the sweep ends (``Writer.defer_links``): each link keeps what the
    note's link to the same target resolved to before (its rows now, or those a rebuild set
    aside), so that a restart that re-cuts every note or a rebuild does not show the vault's links
    as naming no note for as long as the sweep takes; one with nothing to keep is marked
    ``NOT_RESOLVED_YET``. ``exists(key, file name)``: whether a note's file is still there, asked
    of a target kept from a rebuild's copy (``_resolved_before``)."""
    kept = _resolved_before(db, key, exists) if later else {}
    src = _ids(db, [key], add=True)[key]
    dst_ids = _ids(db, [d for d, _ in kept.values() if d is not None], add=True)
    pending = (None, NOT_RESOLVED_YET) if later else (None, 0)

    def resolved(target: str) -> tuple[int | None, int]:
        dst, candidates = kept.get(target, pending)
        return (None if dst is None else dst_ids[dst], candidates)

    db.execute("DELETE FROM link_rows WHERE src = ?", (src,))
    db.executemany(
        "INSERT INTO link_rows(src, ord, target, name, anchor, display, embed, kind, line, dst, candidates) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        [
            (
                src,
                i,
                link.target,
                link_name(link.target),
                link.anchor,
                link.display,
                int(link.embed),
                link.kind,
                link.line,
                *resolved(link.target),
            )
            for i, link in enumerate(links)
        ],
    )
    if not links:
        _forget(db, [src])


_ASIDE_LINKS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'aside_links'"


def _resolved_before(
    db: sqlite3.Connection, key: str, exists: Callable[[str, str | None], bool] | None = None
) -> dict[str, tuple[str | None, int]]:
    """What each link target of the note ``key`` resolved to before: from its rows, else from
    the copy a rebuild set aside (``aside_links``, as the manifest's ``set_aside`` keeps it). A
    target kept from that copy that the rebuild has not read again is kept only while its file is
    there (``exists``): a note deleted or renamed since the rebuild began is in no list the
    sweep's end compares, and was shown as linked until every link was resolved again."""
    rows = db.execute("SELECT target, dst, candidates FROM links WHERE src = ?", (key,)).fetchall()
    if rows or not db.execute(_ASIDE_LINKS).fetchone():
        return {target: (dst, candidates) for target, dst, candidates in rows}
    try:
        rows = db.execute("SELECT target, dst, candidates FROM aside_links WHERE src = ?", (key,)).fetchall()
    except sqlite3.OperationalError:  # an older release's copy, without these columns
        return {}
    return {
        target: (dst, candidates)
        if dst is None or _still_there(db, dst, exists)
        else (None, NOT_RESOLVED_YET)
        for target, dst, candidates in rows
    }


def _still_there(db: sqlite3.Connection, key: str, exists: Callable[[str, str | None], bool] | None) -> bool:
    """Whether the note ``key`` is indexed now, or its file (by the name the rebuild's copy
    recorded) is still there; True when nothing can be asked."""
    if db.execute("SELECT 1 FROM files WHERE key = ?", (key,)).fetchone() is not None or exists is None:
        return True
    try:
        row = db.execute("SELECT rel FROM aside_files WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:  # no copy of the files beside the links'
        row = None
    return exists(key, None if row is None else row[0])


def set_excluded(
    db: sqlite3.Connection, found: dict[str, dict[str, str]], sources: Collection[str]
) -> set[str]:
    """The excluded notes found where a sweep looked (``found``: a root listed whole or a folder
    walked, by its key prefix ending in "/", or one note's key -> the excluded notes there, {key:
    rule}), in place of the rows there; the rows of sources no longer indexed go. Returns the keys
    that came or went (their names may mean another note now)."""
    changed: set[str] = set()
    marks = ",".join("?" * len(sources))
    for (key,) in db.execute(f"SELECT key FROM excluded_notes WHERE source NOT IN ({marks})", list(sources)):
        changed.add(key)
    db.execute(f"DELETE FROM excluded_notes WHERE source NOT IN ({marks})", list(sources))
    for prefix, rules in found.items():
        where, args = _scope(prefix)
        old = dict(db.execute(f"SELECT key, rule FROM excluded_notes WHERE {where}", args).fetchall())
        gone = old.keys() - rules.keys()
        db.executemany("DELETE FROM excluded_notes WHERE key = ?", [(k,) for k in gone])
        new = [(k, prefix.split("/", 1)[0], r) for k, r in rules.items() if old.get(k) != r]
        db.executemany("INSERT OR REPLACE INTO excluded_notes(key, source, rule) VALUES (?,?,?)", new)
        changed |= gone | {k for k in rules if k not in old}
    return changed


def _scope(scope: str) -> tuple[str, tuple[str, ...]]:
    """SQL (and its arguments) for the keys of a scope: below a prefix ending in "/" (a range
    of the primary key: a batch of file events asks one per path), or one key."""
    if scope.endswith("/"):
        return "key >= ? AND key < ?", (scope, scope[:-1] + "0")  # "0" follows "/"
    return "key = ?", (scope,)


def drop_links(db: sqlite3.Connection, keys: Sequence[str]) -> None:
    """These notes' links gone, inside the caller's transaction (the links to them stay, to be
    resolved again)."""
    ids = _ids(db, keys)
    db.executemany("DELETE FROM link_rows WHERE src = ?", [(i,) for i in ids.values()])
    _forget(db, ids.values())


def pointed_at(db: sqlite3.Connection, keys: Sequence[str]) -> bool:
    """Whether a link still resolves to one of these notes."""
    for start in range(0, len(keys), 500):
        part = list(keys[start : start + 500])
        marks = ",".join("?" * len(part))
        sql = f"SELECT 1 FROM link_keys k JOIN link_rows l ON l.dst = k.id WHERE k.key IN ({marks}) LIMIT 1"
        if db.execute(sql, part).fetchone():
            return True
    return False


# A link with its source's and target's keys, by its place (src number, ord): what resolving reads.
_RESOLVING = (
    "SELECT l.src, l.ord, s.key, l.target, d.key, l.candidates, l.dst FROM link_rows l "
    "JOIN link_keys s ON s.id = l.src LEFT JOIN link_keys d ON d.id = l.dst"
)
_Change = tuple[str | None, int, int, int]  # (new target's key, candidates, src number, ord)


def _write(db: sqlite3.Connection, changed: Sequence[_Change], old: Iterable[int]) -> None:
    """The resolving's changes written; the keys no link names any more after them (``old``:
    the targets the changed links had) dropped."""
    ids = _ids(db, [k for k, *_ in changed if k is not None], add=True)
    db.executemany(_UPDATE, [(None if k is None else ids[k], n, s, o) for k, n, s, o in changed])
    _forget(db, old)


def reresolve(
    db: sqlite3.Connection,
    wiki_subfolder: str,
    *,
    names: Iterable[str] = (),
    keys: Sequence[str] = (),
    everything: bool = False,
) -> int:
    """Resolve again the links whose name is one of ``names``, that point at or come from one of
    ``keys`` (or every link); returns how many rows changed."""
    resolver = Resolver(_targets(db.execute(_TARGETS), wiki_subfolder))
    seen: set[tuple[int, int]] = set()
    if everything:
        query: list[tuple[str, Sequence[Any]]] = [(_RESOLVING, ())]
    else:
        query = []
        name_list = sorted(set(names) | {""})
        for start in range(0, len(name_list), 500):
            part = name_list[start : start + 500]
            marks = ",".join("?" * len(part))
            query.append((f"{_RESOLVING} WHERE l.name IN ({marks})", part))
        ids = list(_ids(db, keys).values())
        for start in range(0, len(ids), 250):
            part2 = ids[start : start + 250]
            marks = ",".join("?" * len(part2))
            query.append((f"{_RESOLVING} WHERE l.dst IN ({marks}) OR l.src IN ({marks})", part2 + part2))
    changed: list[_Change] = []
    old: list[int] = []
    for sql, args in query:
        for src, ord_, src_key, target, dst, candidates, dst_id in db.execute(sql, args).fetchall():
            if (src, ord_) in seen:
                continue
            seen.add((src, ord_))
            new, n = resolver.resolve(target, src_key)
            if (new, n) != (dst, candidates):
                changed.append((new, n, src, ord_))
                if dst_id is not None:
                    old.append(dst_id)
    _write(db, changed, old)
    return len(changed)


_UPDATE = "UPDATE link_rows SET dst = ?, candidates = ? WHERE src = ? AND ord = ?"

# Links resolved per page of ``reresolve_pages``: a few tens of ms of work each on a slow core.
PAGE_LINKS = 2000


def reresolve_pages(
    read: Callable[[str, Sequence[Any]], list[Any]],
    transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
    wiki_subfolder: str,
    *,
    page: int | None = None,
    between: Callable[[], object] = lambda: None,
) -> int:
    """Resolve every link again a page at a time (``reresolve(everything=True)`` in steps); returns
    how many rows changed. ``read(sql, args)`` reads committed rows, each page's changes are
    written in a ``transaction()`` of their own, ``between()`` runs after each page: nothing is
    held from one page to the next, so a search's read of the manifest waits for one page at
    most, not for every link of the vault (105,216 links in one transaction held it for 7 s).
    The caller keeps the notes as they are meanwhile (the index's write lock): the names every
    page resolves against are read once. A stop part-way leaves the rest as they were, to the
    next start's resolving."""
    resolver = Resolver(_targets(read(_TARGETS, ()), wiki_subfolder))
    page = page or PAGE_LINKS
    after: Sequence[Any] = (-1, -1)
    total = 0
    paged = f"{_RESOLVING} WHERE (l.src, l.ord) > (?, ?) ORDER BY l.src, l.ord LIMIT ?"
    while rows := read(paged, (*after, page)):
        changed: list[_Change] = []
        old: list[int] = []
        for src, ord_, src_key, target, dst, candidates, dst_id in rows:
            new, n = resolver.resolve(target, src_key)
            if (new, n) != (dst, candidates):
                changed.append((new, n, src, ord_))
                if dst_id is not None:
                    old.append(dst_id)
        if changed:
            with transaction() as db:
                _write(db, changed, old)
            total += len(changed)
        after = rows[-1][:2]
        between()
    with transaction() as db:
        forget_unnamed(db)
    return total


# --- reading the graph -------------------------------------------------------------------------


def _visible(key: str, agent: str | None) -> bool:
    """An agent sees the vault, the wiki and its own memory; no agent (the CLI) sees everything."""
    return agent is None or not key.startswith("memory/") or key.startswith(f"memory/{agent}/")


def _seen(column: str, agent: str | None) -> tuple[str, tuple[str, ...]]:
    """SQL (and its arguments) true where ``column`` names a note ``agent`` may see (``_visible``)."""
    if agent is None:
        return "1", ()
    own = f"memory/{agent}/"
    return f"({column} NOT LIKE 'memory/%' OR substr({column}, 1, {len(own)}) = ?)", (own,)


def outgoing(db_rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [
        {
            "target": r[0],
            "link": r[1] + ("#" + r[2].replace(" › ", "#") if r[2] else ""),
            "anchor": r[2] or None,
            "display": r[3] or None,
            "embed": bool(r[4]),
            "line": r[5],
            **({"ambiguous": r[6]} if r[6] > 1 else {}),
            # the target exists but a rule leaves it out of the index (the rule that does)
            **({"excluded": r[7]} if len(r) > 7 and r[7] else {}),
            # written while links are resolved later, with no earlier resolution: not known yet
            **({"resolving": True} if r[6] == NOT_RESOLVED_YET else {}),
        }
        for r in db_rows
    ]


def written_links(read: Callable[[str, Sequence[Any]], list[Any]], key: str) -> list[Link]:
    """A note's links as its rows hold them (what reading it found), in order."""
    sql = "SELECT target, anchor, display, embed, kind, line FROM links WHERE src = ? ORDER BY ord"
    return [Link(t, a, d, bool(e), k, n) for t, a, d, e, k, n in read(sql, (key,))]


def unresolved_paths(links: Sequence[dict[str, Any]]) -> list[str]:
    """The link paths of ``links`` (as ``outgoing`` gives them) that name no note, each once: the
    anchor left out, one spelling per name (the first; letter case and ``.md`` aside), sorted.
    "[[Nowhere#Setup]]" and "[[nowhere]]" are one missing note, not three."""
    first: dict[str, str] = {}
    for link in links:
        if link["target"] is None and not link.get("resolving"):
            anchor = link["anchor"]
            path = link["link"].removesuffix("#" + anchor.replace(" › ", "#")) if anchor else link["link"]
            if path:
                first.setdefault(strip_md(path).casefold(), path)
    return [first[k] for k in sorted(first)]


class LinkGraph:
    """Read access to the links table through the manifest's connection."""

    def __init__(self, query: Any) -> None:
        self._query = query  # Manifest.read: (sql, args) -> rows

    def resolve_name(
        self, path: str, wiki_subfolder: str, source: str | None = None
    ) -> tuple[str | None, int]:
        """(key or None, how many notes it could mean) of a note's name or path as a link from
        the vault's top folder resolves it (file names, then aliases); the vault and the wiki
        only, never a memory note; ``source`` ("vault" or "wiki"): that root's notes only."""
        within = " AND source = ?" if source is not None else ""
        rows = self._query(_TARGETS + " AND source != 'memory'" + within, (source,) if source else ())
        return Resolver(_targets(rows, wiki_subfolder)).resolve(path, "")

    def links_of(self, key: str, agent: str | None = None) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT l.dst, l.target, l.anchor, l.display, l.embed, l.line, l.candidates, x.rule "
            "FROM links l LEFT JOIN excluded_notes x ON x.key = l.dst WHERE l.src = ? ORDER BY l.ord",
            (key,),
        )
        out = outgoing(rows)
        for item in out:
            if item["target"] is not None and not _visible(item["target"], agent):
                item["target"] = None
        return out

    def backlinks(self, key: str, agent: str | None = None) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT l.src, f.title, l.line, l.anchor, l.embed FROM links l "
            "LEFT JOIN files f ON f.key = l.src "
            "WHERE l.dst = ? AND l.src != ? ORDER BY l.src, l.ord",
            (key, key),
        )
        return [
            {
                "source": r[0],
                "title": r[1] or r[0].rsplit("/", 1)[-1],
                "line": r[2],
                "anchor": r[3] or None,
                "embed": bool(r[4]),
            }
            for r in rows
            if _visible(r[0], agent)
        ]

    def unresolved(self, key: str | None = None) -> list[tuple[str, str, int]]:
        """(source key, link as written, line) of links that resolve to no note."""
        where, args = ("AND s.key = ?", (key,)) if key is not None else ("", ())
        return [
            (r[0], r[1], r[2])
            for r in self._query(
                "SELECT s.key, l.target, l.line FROM link_rows l JOIN link_keys s ON s.id = l.src "
                f"WHERE l.dst IS NULL AND l.candidates >= 0 {where} ORDER BY s.key, l.ord",
                args,
            )
        ]

    def totals(self) -> dict[str, int]:
        """How many links the notes hold, and how many of them name no note."""
        n, dangling = self._query(
            "SELECT count(*), coalesce(sum(dst IS NULL AND candidates >= 0), 0) FROM link_rows"
        )[0]
        return {"links": int(n), "unresolved": int(dangling)}

    def backlink_counts(self) -> dict[str, int]:
        """Distinct linking notes per target (a note linking twice counts once)."""
        return dict(
            self._query(
                "SELECT dst, count(DISTINCT src) FROM links WHERE dst IS NOT NULL AND dst != src GROUP BY dst"
            )
        )

    def related(self, key: str, limit: int, agent: str | None = None) -> list[dict[str, Any]]:
        """Linked notes first (either direction), then notes sharing link targets, linkers or tags.

        A shared neighbour counts less the more notes link it (a hub every note links to says
        little); a shared tag likewise by how many notes carry it."""
        q = self._query
        # Another agent's notes take no part: not as results, not as the links or tags that
        # relate two notes (they named its private notes to every agent), not in the weights.
        src_seen, seen_args = _seen("src", agent)
        dst_seen, _ = _seen("dst", agent)
        out_rows = q(
            f"SELECT DISTINCT dst FROM links WHERE src = ? AND dst IS NOT NULL AND dst != ? AND {dst_seen}",
            (key, key, *seen_args),
        )
        in_rows = q(
            f"SELECT DISTINCT src FROM links WHERE dst = ? AND src != ? AND {src_seen}",
            (key, key, *seen_args),
        )
        outs = {r[0] for r in out_rows}
        ins = {r[0] for r in in_rows}
        scores: dict[str, float] = defaultdict(float)
        why: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for other in [*outs, *ins]:  # linked both ways counts twice
            scores[other] += 100.0
        indeg = dict(
            q(
                f"SELECT dst, count(DISTINCT src) FROM links WHERE dst IS NOT NULL AND {src_seen} "
                "GROUP BY dst",
                seen_args,
            )
        )
        outdeg = dict(q("SELECT src, count(DISTINCT dst) FROM links WHERE dst IS NOT NULL GROUP BY src"))
        for t in outs:  # notes that link to what this note links to
            w = 1.0 / math.log2(1 + indeg.get(t, 1))
            for (other,) in q(
                f"SELECT DISTINCT src FROM links WHERE dst = ? AND {src_seen}", (t, *seen_args)
            ):
                if other != key:
                    scores[other] += w
                    why[other]["links"].append(t)
        for s in ins:  # notes linked from the notes that link here
            w = 1.0 / math.log2(1 + outdeg.get(s, 1))
            for (other,) in q("SELECT DISTINCT dst FROM links WHERE src = ? AND dst IS NOT NULL", (s,)):
                if other != key:
                    scores[other] += w
                    why[other]["linkedFrom"].append(s)
        files = {
            r[0]: (r[1], tuple(json.loads(r[2])))
            for r in q(
                f"SELECT key, title, tags FROM files WHERE state = 'indexed' AND {_seen('key', agent)[0]}",
                seen_args,
            )
        }
        mine = set(files.get(key, ("", ()))[1])
        if mine:
            tag_count: dict[str, int] = defaultdict(int)
            for _title, tags in files.values():
                for tag in set(tags):
                    tag_count[tag] += 1
            for other, (_title, tags) in files.items():
                shared = mine & set(tags)
                if other != key and shared:
                    scores[other] += sum(0.5 / math.log2(1 + tag_count[t]) for t in shared)
                    why[other]["tags"].extend(sorted(shared))
        ranked = sorted(
            (k for k in scores if k != key and k in files and _visible(k, agent)),
            key=lambda k: (-scores[k], k),
        )
        result = []
        for other in ranked[:limit]:
            relation = (
                "links both ways" if other in outs and other in ins
                else "linked from here" if other in outs
                else "links here" if other in ins
                else "shares links or tags"
            )  # fmt: skip
            item: dict[str, Any] = {
                "key": other,
                "title": files[other][0],
                "relation": relation,
                "score": round(scores[other], 3),
            }
            detail = {k: sorted(set(v))[:5] for k, v in why[other].items() if v}
            if detail:
                item["shared"] = detail
            result.append(item)
        return result


def cited_by(query: Any, keys: Sequence[str]) -> dict[str, int]:
    """For the notes ``keys`` (a result's best), how many of them link to each other note."""
    if not keys:
        return {}
    marks = ",".join("?" * len(keys))
    rows = query(
        f"SELECT dst, count(DISTINCT src) FROM links WHERE src IN ({marks}) AND dst IS NOT NULL "
        "AND dst != src GROUP BY dst",
        list(keys),
    )
    return {r[0]: int(r[1]) for r in rows}
