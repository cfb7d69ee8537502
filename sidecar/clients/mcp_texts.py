"""What the MCP tools say in words: the text content of each tool's answer, and the status an
agent reads of the daemon's ``health``. Names, references, titles and headings in the text are
``shown``: a file name holding a line break forged hits and notes in it (the structured content
keeps them exact)."""

from __future__ import annotations

import re
import time
from typing import Any

from sidecar.clients.foreground import time_left
from sidecar.contracts.notices import (
    DELETION_HELD_MARK,
    WIDER_LOOK_MARK,
    catching_up_note,
    clock_said,
    ignored_phrase_note,
    indexing_note,
    modified_said,
    offline_note,
    pending_note,
    stale_note,
    switch_note,
    window_said,
)
from sidecar.contracts.plainerror import plain_error
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.wire_json import parse_window

LEGEND = "[wiki] curated pages · [vault] the user's notes · [memory] your own earlier notes"


def masked_note(counts: dict[str, int]) -> str:
    kinds = ", ".join(f"{n}× {k}" for k, n in sorted(counts.items()))
    return f"Secrets in the notes are shown as [REDACTED:kind] ({kinds})."


def trash_dropped_note(names: list[str]) -> str:
    """What an agent is told when keeping a text made .trash let older ones go."""
    listed = ", ".join(map(shown, names[:5])) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        ".trash passed its cap (memory.maxTrashBytes or maxTrashFiles): the oldest kept "
        f"text{'s' if len(names) > 1 else ''} "
        f"{listed} can no longer be restored."
    )


def building_note(building: dict[str, int]) -> str:
    """An answer's ``indexing`` ({"done", "total"}) in words, for an agent."""
    return f"note: {indexing_note(building['done'], building['total'])}; memory_status shows progress"


def _state_notes(result: dict[str, Any]) -> list[str]:
    """What an answer says of the index's state: the vector arm, an offline root, the build,
    failing updates, changes being caught up with."""
    lines = []
    if result.get("degraded"):
        lines.append(f"note: {result['degraded']}")
    # Not the chunks each indexing of a note written continuously leaves (no backlog: said on
    # every answer for hours, the notice would be ignored).
    if waiting := max(int(result.get("pendingVectors") or 0) - int(result.get("pendingContinuous") or 0), 0):
        lines.append(f"note: {pending_note(waiting)}")
    if left := int(result.get("leftToSwitch") or 0):
        lines.append(f"note: {switch_note(left)}")
    if result.get("offline"):
        lines.append(f"note: {offline_note(result['offline'])}")
    if result.get("inboxRefused"):
        lines.append(refused_note(result["inboxRefused"]))
    if result.get("todayIgnored"):
        lines.append(f"note: {shown(result['todayIgnored'])}")
    if result.get("filterNoValue"):
        lines.append(f"note: {shown(result['filterNoValue'])}")
    if building := result.get("indexing"):
        lines.append(building_note(building))
    if result.get("staleSince") is not None:
        lines.append(f"note: {stale_note(result['staleSince'])}")
    if catching := result.get("catchingUp"):
        lines.append(
            f"note: {catching_up_note(catching['done'], catching['total'], catching.get('recut', 0))}"
        )
    return lines


def text_of_search(query: str, result: dict[str, Any]) -> str:
    hits = result.get("hits", [])
    lines = [f'{len(hits)} hit(s) for "{shown(query)}"  ({LEGEND})', *_state_notes(result)]
    building = result.get("indexing")
    if result.get("listed"):
        lines.append(
            f"The query holds filters alone: {result['listed']} hit(s) (relevance 0) are the notes they "
            "select, newest first, not ranked by any word."
        )
    window = result.get("window")
    if window and window["applied"]:
        said = window_said(parse_window(window), "the since/until given")
        lines.append(f"'{shown(window['phrase'])}': only {shown(said)}.")
        if window.get("listed"):
            lines.append(
                f"{window['listed']} hit(s) (relevance 0) are notes of that period listed by date "
                "(newest first, notes dated by name or property first), not ranked by the query's words."
            )
    elif window:
        note = ignored_phrase_note(
            window["phrase"], window.get("why"), window.get("since"), window.get("until")
        )
        lines.append(f"{shown(note)}.")
    looks = [int(h.get("widerLook") or 0) for h in hits]
    for i, h in enumerate(hits, 1):
        head = shown(" › ".join(h.get("headings") or []))
        # Where the pool's own hits end (and each wider look's): the relevance after it is of
        # another ranking, and may be higher than the hit above.
        wider = looks[i - 1] and (i == 1 or looks[i - 2] != looks[i - 1])
        lines.append(
            f"\n{i}. [{h['source']}] {shown(h['reference'])} (lines {h['lines'][0]}-{h['lines'][1]}, "
            f"relevance {h.get('relevance', 0.0):.2f}{_dated(h)}"
            + (f"; {h['rankedUp']}" if h.get("rankedUp") else "")
            + (f"; {WIDER_LOOK_MARK.format(pool=looks[i - 1])}" if wider else "")
            + (f"; {DELETION_HELD_MARK}" if h.get("deletionHeld") else "")
            + ")"
            + (f"\n   section: {head}" if head else "")
        )
        lines.extend("   " + line for line in h["text"].splitlines())
    if not hits and building:
        lines.append("Nothing found so far; ask again once the index is built.")
    elif not hits and result.get("listed") is not None:
        lines.append("No note matches these filters (the query holds filters alone).")
    elif not hits:
        lines.append("Nothing relevant found; try other words, a wider date, or memory_list to browse.")
    if result.get("masked"):
        lines.append(masked_note(result["masked"]))
    return "\n".join(lines)


_DATED_BY = {"name": "its name", "property": "its date property", "modified": "its last change"}


def _dated(hit: dict[str, Any]) -> str:
    """A hit's day, when a date window judged it: which day of the period the note belongs to."""
    if not hit.get("date"):
        return ""
    if hit.get("modifiedAhead"):
        ahead = hit["modifiedAhead"]
        return (
            f", dated {hit['date']} by its last change seen here (its file's date {ahead} lies in the future)"
        )
    by = _DATED_BY.get(str(hit.get("datedBy")), "")
    return f", dated {hit['date']}" + (f" by {by}" if by else "")


def text_of_write(result: dict[str, Any]) -> str:
    size = f"{result['bytes']} bytes" if "bytes" in result else "written"
    lines = [f"{shown(result['reference'])} {result['action']} ({size})."]
    if result.get("previous"):
        lines.append(f"The previous text was kept in {shown(result['previous'])}.")
    if result.get("trashDropped"):
        lines.append(trash_dropped_note(result["trashDropped"]))
    if result.get("warning"):
        lines.append(str(result["warning"]))
    elif result.get("searchable"):
        lines.append("It is searchable now.")
    if result.get("redacted"):
        kinds = ", ".join(f"{n}× {k}" for k, n in result["redacted"].items())
        lines.append(f"Secrets were replaced by [REDACTED:kind] markers before writing: {kinds}.")
    for d in result.get("duplicates", []):
        lines.append(
            f"Near copy: {shown(d['reference'])} ({d['similarity']:.0%} similar); "
            + (
                "consider memory_edit on it instead of keeping two."
                if d["reference"].startswith("memory/")
                else "the user's note already says this."
            )
        )
    if result.get("duplicatesChecked") is False:
        lines.append("Copies were not looked for (no embedding model is loaded).")
    return "\n".join(lines)


def refused_note(reason: str) -> str:
    return shown(
        f"note: your memory inbox is not read ({reason}): its notes are neither searched nor listed "
        "until the user makes it a private folder again"
    )


def text_of_list(r: dict[str, Any]) -> str:
    head = [refused_note(r["inboxRefused"])] if r.get("inboxRefused") else []
    if not r["notes"]:
        return "\n".join([*head, "No notes match."])
    first = f" (first {len(r['notes'])} shown)" if r["truncated"] else ""
    lines = [*head, f"{r['total']} note(s){first}:"]
    for n in r["notes"]:
        tags = f"  #{' #'.join(n['tags'])}" if n.get("tags") else ""
        desc = f": {n['description']}" if n.get("description") else ""
        state = "" if n.get("indexed", True) else f"  [not searchable: {n.get('why', 'not indexed')}]"
        line = f"[{n['source']}] {n['reference']} {n['title']}{desc} ({modified_said(n)}){tags}{state}"
        lines.append(f"- {shown(line)}")
    return "\n".join(lines)


def _another_agents(text: str, agent: str | None) -> bool:
    """Whether ``text`` (a root's name, a problem) is about another agent's memory."""
    roots = set(_MEMORY_ROOT.findall(text)) | set(_INBOX_PATH.findall(text))
    return bool(roots - {agent}) or (" inbox" in text and f"the {agent} inbox" not in text)


# Another agent named in a problem or root: memory/<agent>, or a path .../agents/<agent>/...
_MEMORY_ROOT = re.compile(r"\bmemory/([a-z0-9][a-z0-9_-]{0,63})")
_INBOX_PATH = re.compile(r"/agents/([a-z0-9][a-z0-9_-]{0,63})/")


def _index_said(idx: dict[str, Any], state: str) -> str:
    """The index's state for memory_status: ``state``, or read-only while a file of the index is
    immutable ("index ready" alone read as if memory writes were searchable)."""
    frozen = idx.get("immutable")
    if not frozen:
        return state
    return (
        f"index read-only: {frozen} is immutable (a backup tool's or an admin's flag): searches "
        "answer from the index as it is, memory writes are saved but not searchable until the "
        "person lifts the flag (chattr -i)"
    )


def status_of(health: dict[str, Any], agent: str | None = None) -> dict[str, Any]:
    """What an agent needs of the daemon's ``health``; other agents' inboxes are left out (their
    names, paths and failed notes are theirs)."""
    if refusing := health.get("refusing"):
        return _refusing_status(health, str(refusing), agent)
    emb = health.get("embedder", {})
    idx = health.get("index", {})
    progress = idx.get("progress", {})
    offline = [
        {
            "name": r.get("name", "?"),
            "path": r.get("path", ""),
            "why": plain_error(r.get("error") or "unreachable"),
            "mode": r.get("mode"),
        }
        for r in health.get("roots", [])
        if r.get("mode") in ("offline", "held") and not _another_agents(r.get("name", ""), agent)
    ]
    keyword_only = emb.get("state") != "ok" or (health.get("vectors") or {}).get("serving") is None
    index = {
        "state": idx.get("state", "building"),
        "phase": idx.get("phase", ""),
        "done": progress.get("done", 0),
        "total": progress.get("total", 0),
        "files": idx.get("files", 0),
        "chunks": idx.get("chunks", 0),
        **_searchable(idx, agent),
        "pendingVectors": idx.get("pending_vectors", 0),
        # Cut again during a model switch: no vector serves them until it ends (not in pendingVectors).
        "leftToSwitch": idx.get("left_to_switch", 0),
    }
    continuous = idx.get("continuous") or {}
    # Of pendingVectors, the chunks of notes written continuously (their vectors follow each
    # indexing): no backlog.
    waiting = max(index["pendingVectors"] - int(continuous.get("pending_vectors") or 0), 0)
    # While building: notes read so far during the sweep, then the vectors (the sweep's counter
    # stays at its end while chunks wait for theirs).
    vec = health.get("vectors") or {}
    pace = _pace(health, index, waiting)
    building = ""
    if index["state"] == "building":
        if index["total"] and index["done"] < index["total"]:
            building = f" ({index['done']}/{index['total']} notes read{_left(pace.get('notes'))})"
        elif waiting:
            building = " (computing vectors)"
    elif not idx.get("complete", True):
        building = " (not every note is read yet: notes not read cannot be found)"
    parts = [
        _index_said(idx, f"index {index['state']}{building}"),
        f"{index['files']} notes, {index['chunks']} chunks",
    ]
    if catching := idx.get("catching_up"):
        parts.append(catching_up_note(catching["done"], catching["total"], catching.get("recut", 0)))
    if waiting:
        parts.append(
            f"{waiting} chunks wait for their vector (found by keywords only){_left(pace.get('vectors'))}"
        )
    if continuous:
        n = continuous.get("notes", 0)
        parts.append(
            f"{n} note{' is' if n == 1 else 's are'} written continuously: each change indexed at most a "
            "minute later, what each indexing adds found by its words at once, by meaning once its vectors "
            "are computed"
        )
    if vec.get("building"):
        parts.append(
            f"switching models: {vec.get('building_pending', 0)} chunks still wait for the new model's "
            f"vectors{_left(pace.get('switch'))}; search uses {vec.get('serving_model')} until then"
            + (
                f" ({index['leftToSwitch']} chunks cut again for the new model are found by keywords only "
                "until the switch ends)"
                if index["leftToSwitch"]
                else ""
            )
        )
    if keyword_only:
        parts.append(f"keyword-only search (embedder {emb.get('state', 'unknown')})")
    if health.get("clock"):
        parts.append(shown(clock_said(health["clock"])))
    parts.extend(
        shown(f"{r['name']} {'deletions held' if r['mode'] == 'held' else 'offline'}: {r['why']}")
        for r in offline
    )
    # Errors in status' plain words, as `sidecar status` says them: an engine's debug dump and
    # a multi-line error's later lines (the file, the cause) read as the person's words.
    problems = [
        {"area": p.get("area", ""), "error": plain_error(p.get("error", ""))}
        for p in (health.get("problems") or {}).get("active", [])
        if not (
            (p.get("area", "").startswith("memory_") or p.get("area") == "unreadable")
            and _another_agents(p.get("error", ""), agent)
        )
    ]
    parts.extend(shown(f"problem in {p['area']}: {p['error']}") for p in problems)
    inbox = health.get("inbox")
    if inbox:
        limit = inbox.get("max_bytes", 0)
        of = f" of {_size(limit)} ({inbox['bytes'] * 100 // limit} %)" if limit > 0 else ""
        notes = inbox.get("notes", 0)
        used = _size(inbox.get("bytes", 0))
        # The last count, when the inbox did not answer in time (a share that hangs).
        when = inbox.get("counted_at")
        then = ""
        if when:
            then = f" (counted at {_when(when)}: {inbox.get('stale')})"
        parts.append(f"your memory: {notes} note{'' if notes == 1 else 's'}, {used}{of}{then}")
        if copies := inbox.get("copies", 0):
            # Only the person can merge them (they are no note an agent can read by reference),
            # and nothing else told the agent they were there.
            parts.append(
                f"{copies} file{' is' if copies == 1 else 's are'} in your inbox beside the notes, "
                "copies holding the person's text not merged yet (a sync tool's conflict copy, "
                "'<slug> (1).md'): not searchable; memory_list names them, ask the person to merge "
                "them into the notes"
            )
    return {
        "daemon": "running",
        "message": "; ".join(parts) + ".",
        "embedder": {
            "state": emb.get("state", ""),
            "model": emb.get("model"),
            # Only an error there is: plain_error("") is a placeholder sentence, said on every
            # call while the model was fine.
            **({"error": plain_error(emb["error"])} if emb.get("error") else {}),
            # The configured model and why it failed, while ``model`` answers in its place.
            **({"fallback": emb["fallback"]} if emb.get("fallback") else {}),
        },
        "index": index,
        "keywordOnly": keyword_only,
        "offlineRoots": offline,
        "problems": problems,
        **({"inbox": _inbox(inbox)} if inbox else {}),
        **({"pace": pace} if pace else {}),
    }


def _refusing_status(health: dict[str, Any], refusing: str, agent: str | None) -> dict[str, Any]:
    """memory_status of a daemon that cannot read its index (health's ``refusing`` record: no
    embedder, no counters): its words, what to do included, and its other problems. The shim
    said "an answer this shim cannot read", sending the agent after another program."""
    problems = [
        {"area": p.get("area", ""), "error": plain_error(p.get("error", ""))}
        for p in (health.get("problems") or {}).get("active", [])
        if p.get("area") != "index"  # the refusal itself, said once
        and not (
            (p.get("area", "").startswith("memory_") or p.get("area") == "unreadable")
            and _another_agents(p.get("error", ""), agent)
        )
    ]
    parts = [
        f"the index cannot be used now, so search and memory_get find nothing: {refusing}",
        "memory_write, memory_edit, memory_delete and memory_list still work on your inbox",
    ]
    parts.extend(f"problem in {p['area']}: {p['error']}" for p in problems)
    return {
        "daemon": "running",
        "message": shown("; ".join(parts) + "."),
        "refusing": shown(refusing),
        "problems": problems,
    }


def _pace(health: dict[str, Any], index: dict[str, Any], waiting: int) -> dict[str, dict[str, Any]]:
    """The paces `sidecar status` turns into "about 3h 57m left", for the work that has one: the
    sweep's notes, the vectors waiting, a model switch's vectors (those two while the model is ok).
    ``secondsLeft`` is null while
    storing vectors fails (nothing moves); ``rough`` while the pace still settles."""
    idx, vec = health.get("index") or {}, health.get("vectors") or {}
    progress = idx.get("progress") or {}
    stalled = any(p.get("area") == "embedding" for p in (health.get("problems") or {}).get("active", []))
    # Vectors have a pace only while the model computes them (as `sidecar status`): loading or
    # failed, the last known rate says nothing of when they come.
    computing = (health.get("embedder") or {}).get("state") == "ok"
    work = {
        "notes": (
            progress.get("notes_per_second"),
            progress.get("rough"),
            index["total"] - index["done"],
            False,
        ),
        "vectors": (
            idx.get("embed_rate_chunks_per_second") if computing else None,
            idx.get("embed_rate_rough"),
            waiting,
            stalled,
        ),
        "switch": (
            vec.get("building_rate_chunks_per_second") if vec.get("building") and computing else None,
            vec.get("building_rate_rough"),
            int(vec.get("building_pending") or 0),
            stalled,
        ),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, (rate, rough, left, paused) in work.items():
        if rate and left > 0:
            out[name] = {
                "perSecond": rate,
                "left": left,
                "secondsLeft": None if paused else round(left / rate, 1),
                "rough": bool(rough),
            }
    return out


def _left(pace: dict[str, Any] | None) -> str:
    """ ", about 3m left" (and whether it is rough) from one of ``_pace``'s entries; "" without."""
    if pace is None:
        return ""
    if pace["secondsLeft"] is None:
        return ", paused: storing vectors fails (see the problem below)"
    return time_left(pace["left"], pace["perSecond"], pace["rough"])


def _searchable(idx: dict[str, Any], agent: str | None) -> dict[str, int]:
    """The notes and chunks an agent can search: the vault, the wiki and its own memory (the
    totals counted every agent's memory: another agent's notes, their number and growth)."""
    by_source = idx.get("by_source")
    if agent is None or by_source is None:
        return {}
    own = (idx.get("by_agent") or {}).get(agent, {})
    counts = [c for source, c in by_source.items() if source != "memory"] + [own]
    return {k: sum(c.get(k, 0) for c in counts) for k in ("files", "chunks")}


def _inbox(usage: dict[str, Any]) -> dict[str, Any]:
    inbox = {
        "notes": usage.get("notes", 0),
        "bytes": usage.get("bytes", 0),
        "maxBytes": usage.get("max_bytes", 0),
        "trashBytes": usage.get("trash_bytes", 0),
        "copies": usage.get("copies", 0),
    }
    # An earlier count (the inbox did not answer in time) looked like a fresh one to a client
    # reading the structured content.
    if usage.get("stale"):
        inbox["countedAt"] = usage.get("counted_at")
        inbox["stale"] = usage["stale"]
    return inbox


def _when(epoch: float) -> str:
    """A time of today as HH:MM, another day's with its date (a share hung for days read as today)."""
    then = time.localtime(epoch)
    today = time.localtime()
    return time.strftime("%H:%M" if then[:3] == today[:3] else "%Y-%m-%d %H:%M", then)


def _size(n: int) -> str:
    """A byte count as a person reads it (KB and MB of 1,024)."""
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
