"""The link graph: which notes link to which, resolved the way Obsidian resolves a link.

Links are read from the raw Markdown (wiki-links ``[[target#heading|alias]]``, block references
``[[target#^id]]``, embeds ``![[target]]`` and Markdown links ``[text](path.md#anchor)``; code
blocks, inline code and front matter hold none). A link path resolves, case-insensitively and
without ``.md``:

1. relative (``./`` or ``../``) or absolute (``/``) paths against the source's folder or the vault root;
2. a full path from the vault root (``Folder/Note``);
3. otherwise every note whose path ends with the link path (``Note``, ``Folder/Note``): one in the
   source's own folder first, then the shortest path, then alphabetical;
4. failing all of that, a note whose front matter ``aliases`` holds the link text.

The vault and its wiki subfolder form one vault (wiki notes are at ``<wikiSubfolder>/...``). A memory
note links like a note of its own inbox folder: its agent's own notes (by slug) first, then the vault.
Vault notes never resolve into memory. Rows live in the manifest (``links``), written in the same
transaction as the note's chunks, and are re-resolved whenever a note that a link's name could mean
appears, vanishes or changes its aliases. Imports nothing of the project.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

_WIKILINK = re.compile(r"(!?)\[\[([^\[\]|#^]*)((?:[#^][^\[\]|]*)?)(?:\|([^\[\]]*))?\]\]")
_MDLINK = re.compile(r"(!?)\[([^\[\]]*)\]\(\s*(<[^<>\n]+>|[^()\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_EXT = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS links (
  src TEXT NOT NULL, ord INTEGER NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL,
  anchor TEXT NOT NULL, display TEXT NOT NULL, embed INTEGER NOT NULL, kind TEXT NOT NULL,
  line INTEGER NOT NULL, dst TEXT, candidates INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (src, ord)
);
CREATE INDEX IF NOT EXISTS links_by_dst ON links(dst);
CREATE INDEX IF NOT EXISTS links_by_name ON links(name);
"""


@dataclass(frozen=True)
class Link:
    """One link as written in a note."""

    target: str  # the link path as written, without anchor and alias ("" = this note)
    anchor: str  # heading ("Setup › Linux" for nested ones), "^block-id", or ""
    display: str  # the alias or the link text, "" when none
    embed: bool
    kind: str  # "wiki" | "markdown"
    line: int  # 1-based


def _front_matter_end(lines: Sequence[str]) -> int:
    if not lines or lines[0].strip() != "---":
        return 0
    for i in range(1, min(len(lines), 2000)):
        if lines[i].strip() in ("---", "..."):
            return i + 1
    return 0


def _is_note_target(path: str) -> bool:
    """A note (``.md`` or no extension; "Release 1.5" has none), not an image, video, PDF or canvas."""
    m = _EXT.search(path.rsplit("/", 1)[-1])
    return m is None or m.group(1).lower() == "md" or m.group(1).isdigit()


def _anchor(raw: str) -> str:
    parts = [p.strip() for p in raw.split("#") if p.strip()]
    return " › ".join(parts)


def extract_links(text: str) -> list[Link]:
    """Every link to a note in ``text``, in order (links to attachments and web pages left out)."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    out: list[Link] = []
    in_fence = False
    for i in range(_front_matter_end(lines), len(lines)):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or ("[" not in line):
            continue
        line = _INLINE_CODE.sub("", line)
        for m in _WIKILINK.finditer(line):
            target = m.group(2).strip().rstrip("\\").strip()  # "[[a\|b]]" inside a table
            if target and not _is_note_target(target):
                continue
            anchor = _anchor(m.group(3) or "")
            if not target and not anchor:
                continue
            display = (m.group(4) or "").strip()
            out.append(Link(target, anchor, display, bool(m.group(1)), "wiki", i + 1))
        for m in _MDLINK.finditer(_WIKILINK.sub("", line)):
            raw = m.group(3).strip()
            raw = raw[1:-1].strip() if raw.startswith("<") else raw
            if _SCHEME.match(raw) or (raw.startswith("#") and not raw[1:].strip()):
                continue
            path, _, anchor = raw.partition("#")
            path = unquote(path).strip()
            if path and not _is_note_target(path):
                continue
            if not path and not anchor:
                continue
            out.append(
                Link(path, _anchor(unquote(anchor)), m.group(2).strip(), bool(m.group(1)), "markdown", i + 1)
            )
    return out


def _strip_md(path: str) -> str:
    return path[:-3] if path.lower().endswith(".md") else path


def link_name(target: str) -> str:
    """What a link is looked up by: its last path segment, lowercased, without ``.md``."""
    return _strip_md(target.replace("\\", "/").rstrip("/")).rsplit("/", 1)[-1].strip().lower()


@dataclass(frozen=True)
class Target:
    """A note links can point at: its key and its path inside the vault (or inbox)."""

    key: str
    path: str  # vault-relative without .md ("Plugins/Audio recorder", "wiki/Backups"); memory: the slug
    aliases: tuple[str, ...] = ()
    agent: str = ""  # memory notes only


def vault_path(key: str, wiki_subfolder: str) -> str:
    """A key's path inside the vault (without .md): the wiki is one of its folders."""
    source, rest = key.split("/", 1)
    if source == "wiki":
        return f"{wiki_subfolder.strip('/')}/{rest}"
    if source == "memory":
        return rest.split("/", 1)[1]
    return rest


class Resolver:
    """Link path -> key over a set of notes, by the rules in the module docstring."""

    def __init__(self, targets: Iterable[Target]) -> None:
        self.by_path: dict[str, str] = {}
        self.by_name: dict[str, list[Target]] = defaultdict(list)
        self.by_alias: dict[str, list[Target]] = defaultdict(list)
        self.memory: dict[tuple[str, str], str] = {}
        self.paths: dict[str, str] = {}
        for t in targets:
            self.paths[t.key] = t.path
            if t.agent:
                self.memory[t.agent, t.path.lower()] = t.key
                continue
            self.by_path[t.path.lower()] = t.key
            self.by_name[t.path.rsplit("/", 1)[-1].lower()].append(t)
            for a in t.aliases:
                if a.strip():
                    self.by_alias[a.strip().lower()].append(t)

    def resolve(self, target: str, src_key: str) -> tuple[str | None, int]:  # noqa: PLR0911 - one rule each
        """(key or None, how many notes the name could mean) for a link written in ``src_key``."""
        t = _strip_md(target.replace("\\", "/").strip()).strip()
        if not t:
            return src_key, 1
        low = t.lower()
        src_path = self.paths.get(src_key, "")
        src_dir = posixpath.dirname(src_path).lower() if not src_key.startswith("memory/") else ""
        if src_key.startswith("memory/"):
            agent = src_key.split("/", 2)[1]
            own = self.memory.get((agent, low))
            if own is not None:
                return own, 1
        if low.startswith("/"):
            hit = self.by_path.get(posixpath.normpath(low.lstrip("/")))
            return hit, int(hit is not None)
        if low.startswith(("./", "../")):
            joined = posixpath.normpath(posixpath.join(src_dir, low))
            hit = self.by_path.get(joined)
            return hit, int(hit is not None)
        exact = self.by_path.get(low)
        if exact is not None:
            return exact, 1
        name = low.rsplit("/", 1)[-1]
        matches = [c for c in self.by_name.get(name, ()) if c.path.lower().endswith("/" + low)]
        if not matches and "/" not in low:
            matches = list(self.by_alias.get(low, ()))
        if not matches:
            return None, 0
        best = min(
            matches,
            key=lambda c: (
                posixpath.dirname(c.path).lower() != src_dir,
                c.path.count("/"),
                len(c.path),
                c.path,
            ),
        )
        return best.key, len({c.key for c in matches})


# --- storage in the manifest -------------------------------------------------------------------


def ensure_schema(db: sqlite3.Connection) -> bool:
    """Create the links table; True when it is new (the notes must be read again to fill it)."""
    existed = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'links'").fetchone()
    db.executescript(_SCHEMA)
    return existed is None


def aliases_of(front_matter: Any) -> tuple[str, ...]:
    """A note's aliases as link names: a list, or one string (commas separate several)."""
    value = front_matter.get("aliases", front_matter.get("alias")) if isinstance(front_matter, dict) else None
    if isinstance(value, str):
        return tuple(a.strip() for a in value.split(",") if a.strip())
    if isinstance(value, list):
        return tuple(str(a).strip() for a in value if isinstance(a, str | int | float) and str(a).strip())
    return ()


def _targets(db: sqlite3.Connection, wiki_subfolder: str) -> list[Target]:
    out: list[Target] = []
    for key, source, agent, front_matter in db.execute(
        "SELECT key, source, agent, front_matter FROM files WHERE state IN ('indexed', 'skipped', 'indexing')"
    ):
        aliases: tuple[str, ...] = ()
        if source != "memory":
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


def replace_links(db: sqlite3.Connection, key: str, links: Sequence[Link]) -> None:
    """A note's links, replaced inside the caller's transaction (resolved by ``reresolve``)."""
    db.execute("DELETE FROM links WHERE src = ?", (key,))
    db.executemany(
        "INSERT INTO links(src, ord, target, name, anchor, display, embed, kind, line, dst, candidates) "
        "VALUES (?,?,?,?,?,?,?,?,?,NULL,0)",
        [
            (
                key,
                i,
                link.target,
                link_name(link.target),
                link.anchor,
                link.display,
                int(link.embed),
                link.kind,
                link.line,
            )
            for i, link in enumerate(links)
        ],
    )


def drop_links(db: sqlite3.Connection, keys: Sequence[str]) -> None:
    db.executemany("DELETE FROM links WHERE src = ?", [(k,) for k in keys])


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
    resolver = Resolver(_targets(db, wiki_subfolder))
    rows: dict[tuple[str, int], tuple[str, str | None, int]] = {}
    if everything:
        query: list[tuple[str, Sequence[Any]]] = [("SELECT src, ord, target, dst, candidates FROM links", ())]
    else:
        query = []
        name_list = sorted(set(names) | {""})
        for start in range(0, len(name_list), 500):
            part = name_list[start : start + 500]
            marks = ",".join("?" * len(part))
            query.append(
                (f"SELECT src, ord, target, dst, candidates FROM links WHERE name IN ({marks})", part)
            )
        for start in range(0, len(keys), 250):
            part2 = list(keys[start : start + 250])
            marks = ",".join("?" * len(part2))
            query.append(
                (
                    "SELECT src, ord, target, dst, candidates FROM links "
                    f"WHERE dst IN ({marks}) OR src IN ({marks})",
                    part2 + part2,
                )
            )
    changed: list[tuple[str | None, int, str, int]] = []
    for sql, args in query:
        for src, ord_, target, dst, candidates in db.execute(sql, args):
            if (src, ord_) in rows:
                continue
            new, n = resolver.resolve(target, src)
            rows[src, ord_] = (target, new, n)
            if (new, n) != (dst, candidates):
                changed.append((new, n, src, ord_))
    db.executemany("UPDATE links SET dst = ?, candidates = ? WHERE src = ? AND ord = ?", changed)
    return len(changed)


# --- reading the graph -------------------------------------------------------------------------


def _visible(key: str, agent: str | None) -> bool:
    """An agent sees the vault, the wiki and its own memory; no agent (the CLI) sees everything."""
    return agent is None or not key.startswith("memory/") or key.startswith(f"memory/{agent}/")


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
        }
        for r in db_rows
    ]


class LinkGraph:
    """Read access to the links table through the manifest's connection."""

    def __init__(self, query: Any) -> None:
        self._query = query  # Manifest.read: (sql, args) -> rows

    def links_of(self, key: str, agent: str | None = None) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT dst, target, anchor, display, embed, line, candidates FROM links "
            "WHERE src = ? ORDER BY ord",
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
        where, args = ("AND src = ?", (key,)) if key is not None else ("", ())
        return [
            (r[0], r[1], r[2])
            for r in self._query(
                f"SELECT src, target, line FROM links WHERE dst IS NULL {where} ORDER BY src, ord", args
            )
        ]

    def totals(self) -> dict[str, int]:
        """How many links the notes hold, and how many of them name no note."""
        n, dangling = self._query("SELECT count(*), coalesce(sum(dst IS NULL), 0) FROM links")[0]
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
        out_rows = q(
            "SELECT DISTINCT dst FROM links WHERE src = ? AND dst IS NOT NULL AND dst != ?", (key, key)
        )
        in_rows = q("SELECT DISTINCT src FROM links WHERE dst = ? AND src != ?", (key, key))
        outs = {r[0] for r in out_rows}
        ins = {r[0] for r in in_rows}
        scores: dict[str, float] = defaultdict(float)
        why: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for other in [*outs, *ins]:  # linked both ways counts twice
            scores[other] += 100.0
        indeg = dict(q("SELECT dst, count(DISTINCT src) FROM links WHERE dst IS NOT NULL GROUP BY dst"))
        outdeg = dict(q("SELECT src, count(DISTINCT dst) FROM links WHERE dst IS NOT NULL GROUP BY src"))
        for t in outs:  # notes that link to what this note links to
            w = 1.0 / math.log2(1 + indeg.get(t, 1))
            for (other,) in q("SELECT DISTINCT src FROM links WHERE dst = ?", (t,)):
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
            for r in q("SELECT key, title, tags FROM files WHERE state = 'indexed'")
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
