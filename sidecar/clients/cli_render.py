"""What the CLI prints for people: the ``status`` screen (and the daily-note formats doctor shows
too). A note's links and a hit's snippet: ``cli_hits``; the progress bar: ``cli_progress``."""

from __future__ import annotations

import time
from typing import Any

from sidecar import __version__
from sidecar.clients.foreground import all_vectors_words, backlog, duration, per_second, time_left
from sidecar.contracts.errors import is_io_fault
from sidecar.contracts.notices import catching_up_note, clock_said
from sidecar.contracts.plainerror import cause_of, plain_error
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.wire import hold_advice
from sidecar.runtime.notify import restart_words
from sidecar.runtime.release import build_id, said
from sidecar.stores.aside import KEEP_MOVED_ASIDE_DAYS


def waited_call(waiting: dict[str, Any]) -> str:
    """The call a sweep waits on, in words: the read of a note, the listing of a folder, the
    stat of an entry (``describe_waiting``; a daemon before ``call`` read notes only)."""
    what = {"listing": "the listing of", "stat": "the stat of"}.get(str(waiting.get("call")), "the read of")
    return f"{what} {shown(waiting['path'])}"


def _ago(ts: float | None) -> str:
    if ts is None:
        return "never"
    passed = time.time() - ts
    if passed < -1:  # the wall clock was set back since: a negative age says nothing
        return "before the clock was set back"
    return f"{duration(max(passed, 0.0))} ago"


def _until(ts: float) -> str:
    left = ts - time.time()
    return "at the next sweep" if left <= 0 else f"in {duration(left)}"


_PROBLEM_AREAS = {
    "index": "index updates",
    "embedding": "vectors",
    "vectors": "vector table",
    "embedder": "model",
    "keyword_search": "keyword search",
    "keyword_index": "keyword index",
    "vector_search": "vector search",
    "memory_write": "memory writes",
    "memory_audit": "memory audit log",
    "inbox": "memory inbox refused",
    "config": "configuration file",
    "restart": "restart needed",
    "stores": "index files",
    "unreadable": "unreadable folders or notes",
    "path_too_long": "paths too long",
    "home": "home folder",
    "rebuild": "rebuild not finished",
}


def problem_area(area: str) -> str:
    """A problem area in the words status uses (``vector_search``: "vector search")."""
    return _PROBLEM_AREAS.get(area, area)


# What to do while the home is not the recorded folder; the first-start case is named because a
# share mounted after sidecar first ran on its bare mount point is refused with the share there.
HOME_TODO = (
    "mount the home's share again (memory writes wait for it, nothing is deleted meanwhile); if the "
    "share is mounted and sidecar first started before it was, or the folder was replaced on purpose: "
    "`sidecar index --accept-home`"
)


# What to do about an index update that fails for a cause other than the disk (a keyword index
# file left by a commit cut short, a bug): sending the user to free space sent them the wrong way.
def index_todo(service: bool | None) -> str:
    return (
        "the index could not be updated, and not for lack of disk space (the PROBLEM line says why): "
        f"the daemon retries by itself; if the line stays, {restart_words(service)}, and if it comes "
        "back, run `sidecar index --rebuild`"
    )


# The words of a write refused for an immutable file (``stores.frozen.immutable_words``).
_IMMUTABLE = " is immutable (a backup tool's or an admin's flag)"
# What to do about it (the Index line or a PROBLEM line names the file): neither the disk's room
# nor a rebuild.
IMMUTABLE_TODO = (
    "lift the immutable flag the Index or PROBLEM line names (chattr -i FILE, or chattr -R -i on the "
    "index folder; chflags nouchg on macOS); the daemon catches up by itself"
)


def _disk_likely(problem: dict[str, Any]) -> bool:
    """Whether a problem most likely comes from the home's disk (full, read-only, permissions):
    every one of the areas that write to it, an index update only when its error says so."""
    if problem["area"] not in {"index", "embedding", "vectors", "memory_write", "memory_audit"}:
        return False
    error = str(problem["error"])
    if problem["area"] != "index":
        return True
    # A share's fault (os error 5, 116 ...) and a writer killed (a full quota: `df` shows room)
    # are the disk's too: a rebuild there fails or makes it worse.
    return (
        cause_of(error) is not None
        or is_io_fault(RuntimeError(error))
        or any(words in error for words in ("MB free", "no room", "writer was killed"))
    )


def _problem_lines(problems: dict[str, Any], todo: list[str], service: bool | None = None) -> list[str]:
    """What is wrong now (and what was repaired lately), in the words of health's problems;
    ``service``: health's, whether the service manager runs the daemon (how it is restarted)."""
    out = []
    for p in problems["active"]:
        area = _PROBLEM_AREAS.get(p["area"], p["area"])
        times = f", {p['count']} times" if p["count"] > 1 else ""
        out.append(f"PROBLEM ({area}, since {_ago(p['since'])}{times}): {shown(plain_error(p['error']))}")
    areas = {p["area"] for p in problems["active"]}
    # An immutable file (chattr +i) says which and what to do: neither the disk's room nor a rebuild.
    frozen = [p for p in problems["active"] if _IMMUTABLE in str(p["error"])]
    if frozen and IMMUTABLE_TODO not in todo:
        todo.append(IMMUTABLE_TODO)
    if any(_disk_likely(p) and p not in frozen for p in problems["active"]):
        todo.append("check free disk space and permissions of the home folder; the daemon retries by itself")
    if any(p["area"] == "index" and not _disk_likely(p) and p not in frozen for p in problems["active"]):
        todo.append(index_todo(service))
    if "home" in areas:
        todo.append(HOME_TODO)
    if "stores" in areas:
        todo.append(f"{restart_words(service)} so it rebuilds its index")
    for p, recovered in _recoveries(problems)[-3:]:
        area = _PROBLEM_AREAS.get(p["area"], p["area"])
        again = f", recovered {recovered} times" if recovered > 1 else ""
        out.append(f"Recovered ({area}, {_ago(p['cleared'])}{again}): {shown(plain_error(p['error']))}")
    return out


def _recoveries(problems: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """The latest recovery of each area and subject (an agent's inbox, a store) that does not
    fail now, and how many it had, the most recent last: a disk that filled up again and again
    showed one line per episode, and a "Recovered" beside the same "PROBLEM" read as if both were
    true. Keyed by subject too: two agents' recoveries, or two stores repaired at one start, are
    not one line with a count that mixes them."""
    failing = {(p["area"], p.get("subject", "")) for p in problems["active"]}
    latest: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
    for p in problems["recent"]:  # oldest first
        key = (p["area"], p.get("subject", ""))
        if key not in failing:
            _, times = latest.pop(key, (p, 0))
            latest[key] = (p, times + 1)
    return list(latest.values())


def _memory_all_lines(gap: dict[str, Any] | None) -> list[str]:
    """While a person's search reads each agent's own keyword index instead of the one of all
    memory: why, and whose memory it finds by no word meanwhile."""
    if not gap:
        return []
    state = {
        "filling": "being filled from the notes (seconds to a few minutes)",
        "damaged": "damaged, being rebuilt from the notes",
        "read-only": "not filled: the index is read-only (its disk is full)",
    }.get(str(gap.get("state")), str(gap.get("state")))
    n = int(gap.get("agents_not_searchable") or 0)
    missing = (
        f"; the memory of {n:,} agent{'' if n == 1 else 's'} whose own index was removed as unused "
        "(memory.indexIdleDays) is not found by its words until then"
        if n
        else ""
    )
    return [
        f"  keyword index of all agents' memory: {state}; a person's search reads each agent's own "
        f"index meanwhile{missing}"
    ]


# Changes to more notes than this at once are shown as work in progress.
_BUSY_NOTES = 20


def _release_lines(h: dict[str, Any], idx: dict[str, Any]) -> list[str]:
    """What status says of the code the daemon runs against the installation and the index's
    writers."""
    lines: list[str] = []
    # Installed anew, the daemon still runs what it started with: told by the release, and by the
    # build (the code's digest) where both are one release (a checkout, an upgrade that kept it).
    build = h.get("build")
    if h["version"] != __version__ or (build and build != build_id()):
        theirs = f"{h['version']}" + (f" (build {build})" if build else "")
        lines.append(
            f"  the daemon runs {shown(theirs)}, this installation is {__version__} (build {build_id()}): "
            "restart it "
            "to run the installed one (systemctl --user restart sidecar, or stop and start `sidecar serve`)"
        )
    newer = idx.get("newer_writer")
    if newer:
        lines.append(
            f"  the index was written by a newer sidecar ({shown(said(newer))}) than this daemon: run that "
            "one, or rebuild the index with this one (`sidecar index --rebuild` with the daemon stopped)"
        )
    other = idx.get("other_build")
    if other and not newer:
        lines.append(
            f"  the index was last written by build {shown(str(other.get('build')))} of this release, "
            f"later than this daemon's build {shown(str(build))} (a downgrade, judged by the order "
            "the builds first wrote the index): if that one is newer, run it; if this one is, nothing "
            "is wrong (said until this daemon's next start)"
        )
    return lines


def _compaction_said(c: dict[str, Any]) -> str:
    """A large vault's keyword index rewritten beside the live one, in its phase's words."""
    if c["phase"] == "filling":
        step = f"{c['done']:,} of {c['total']:,} chunks"
    else:  # the notes written meanwhile: one each time, often
        notes = f"{c['total']:,} note{'' if c['total'] == 1 else 's'} written meanwhile"
        catching = c["phase"] == "catching up"
        step = f"adding the {notes}" if catching else f"swapping it in, the {notes} added first"
    return (
        f"rewriting the keyword index beside the live one ({step}); searches answer from the live "
        "index, writes are slower meanwhile"
    )


# The last compaction beside, by its outcome: what status says of it.
_LAST_SAID = {
    "compacted": "last rewritten beside the live one",
    "compacted in place": "last rewritten in place",
    "skipped": "rewrite skipped",
    "stopped": "rewrite stopped",
    "gave way": "rewrite given up",
    "failed": "rewrite failed",
}


def _compaction_last_said(last: dict[str, Any]) -> str:
    """What came of the last run that found a large vault's keyword index due for a rewrite, as
    the index is now: documents deleted since a rewrite, a back-off after a give-way."""
    outcome = str(last["outcome"])
    what = _LAST_SAID.get(outcome, shown(outcome))
    age = last.get("age_seconds")  # the daemon's own age, sleep counted (an older daemon: its wall time)
    when = f"{duration(age)} ago" if isinstance(age, (int, float)) else _ago(last["at"])
    words = f"keyword index {what} {when}: {shown(last['reason'])}"
    if outcome in ("compacted", "compacted in place"):
        # Said until a restart as it was right after the rewrite, while the index went on.
        since = last.get("deleted_now") or 0
        if last.get("due_now"):
            return f"{words}; {since:,} documents deleted since, due again (the next run rewrites it)"
        return f"{words}; {since:,} documents deleted since" if since else words
    if backoff := last.get("backoff"):
        times = "once" if backoff["gave_way"] == 1 else f"{backoff['gave_way']:,} times"
        next_try = f"next try in about {duration(backoff['next_try_seconds'])}"
        if outcome == "gave way":
            words += f"; it gave way {times} in a row, {next_try}"
        elif outcome == "skipped":  # the reason says the give-ways already
            words += f"; {next_try}"
        else:  # a run that failed or stopped after give-ways: it neither gave way nor skipped
            words += f"; it had given way {times} before, {next_try}"
    # Said as it is now: Tantivy's merges drop the deleted documents with no compaction (an older
    # daemon sends no ``due_now``: nothing said of it).
    if last.get("due_now"):
        weigh = "weigh in its scores until a later run rewrites it"
        return f"{words}; its {last['deleted_now']:,} deleted documents {weigh}"
    if last.get("due_now") is False:
        return f"{words}; no longer due ({last['deleted_now']:,} deleted documents now)"
    return words


def _compaction_lines(idx: dict[str, Any]) -> list[str]:
    """A large vault's keyword compaction: the one under way, else what came of the last one."""
    if compaction := idx.get("keyword_compaction"):
        return [f"  {_compaction_said(compaction)}"]
    if last := idx.get("keyword_compaction_last"):
        return [f"  {_compaction_last_said(last)}"]
    return []


def render_status(h: dict[str, Any]) -> str:
    idx = h["index"]
    # The build as doctor and --version say it: the release alone (one version, many builds) did
    # not tell whether a restart after an upgrade took.
    runs = said({"version": str(h["version"]), **({"build": str(h["build"])} if h.get("build") else {})})
    lines = [
        f"{shown(runs)}: running since {_ago(h['started'])} (pid {h['pid']}), socket {shown(h['socket'])}"
    ]
    if refusing := h.get("refusing"):  # the index cannot be read: nothing else is known
        lines.append(f"Index: refusing: {shown(refusing)}")
        return "\n".join(lines)
    lines += _release_lines(h, idx)
    if h.get("clock"):
        lines.append(f"  {shown(clock_said(h['clock']))}")
    lines.append(_immutable_line(idx) or _index_line(h))
    in_place = idx.get("keyword_upgrade_in_place")
    if in_place:
        lines.append(
            "  keyword index: being rebuilt in place for this version's reading of words (the disk "
            "has no room for a copy beside the old one): keyword search finds nothing until it "
            f"ends ({in_place['done']:,} of {in_place['total']:,} chunks so far); notes and memory "
            "written meanwhile wait for it"
        )
    elif idx.get("keyword_upgrade"):
        lines.append(
            "  keyword index: being rebuilt in the background for this version's reading of words; "
            "searches answer from the old index until it is swapped in"
        )
    lines += _compaction_lines(idx)
    lines += _memory_all_lines(idx.get("memory_all"))
    waiting = idx.get("waiting")
    if waiting:  # a call that has not answered for a second or more: what indexing waits for
        why = (
            "(a slow share: a listing or stat of it took longer than watch.probeTimeoutSeconds; "
            "its scans wait up to watch.scanTimeoutSeconds)"
            if waiting.get("slow")
            else "(hung share?)"
        )
        lines.append(
            f"  waiting {waiting['seconds']:.0f} s for {shown(waiting['root'])} to answer "
            f"{waited_call(waiting)} {why}; after {waiting['timeout_seconds']:g} s the root "
            "goes offline and the others are indexed on"
        )
    lines += _count_lines(idx)
    todo: list[str] = [IMMUTABLE_TODO] if idx.get("immutable") else []
    lines += _vector_lines(h, todo)
    lines += _root_lines(h["roots"], todo)
    lines += skipped_lines(idx)
    if idx.get("excluded"):
        parts = ", ".join(f"{n} by {rule}" for rule, n in sorted(idx["excluded"].items()))
        lines.append(f"Excluded notes: {parts}")
    for t in idx.get("templates_indexed") or ():  # the notes' count grew by its notes: say why
        lines.append(
            f"Templates folder {shown(t['folder'])} is indexed as notes: the {shown(t['plugin'])} plugin "
            f"is switched off in Obsidian (its folder is set in {shown(t['file'])})"
        )
    if relink := idx.get("links_reread"):
        lines.append(
            f"Links read again after an upgrade: {relink['done']:,} of {relink['total']:,} notes "
            "(links only, nothing is embedded again; a link the old version read differently is "
            "right once its note is done)"
        )
        if relink.get("waiting"):
            lines.append(f"  waiting for {', '.join(relink['waiting'])} to answer again")
    if h.get("vault") and "daily_notes" in h:
        lines.append(f"Daily notes: {daily_notes_line([*h['daily_notes'], *h.get('daily_notes_off', ())])}")
    if h.get("vault") and (week := h.get("week_start")):
        lines.append(f"Weeks begin on: {week['weekday'].capitalize()} ({shown(week['source'])})")
    unread = idx.get("front_matter_unread") or {"notes": 0}
    if unread["notes"]:
        first = unread["examples"][0]
        more = f" and {unread['notes'] - 1:,} more" if unread["notes"] > 1 else ""
        lines.append(
            f"Front matter not read: {unread['notes']:,} note{'s' if unread['notes'] != 1 else ''} "
            "(found by their text, without their title, tags, aliases and dates): "
            f"{shown(first['reference'])} ({shown(first['reason'])}){more}"
        )
    lines += _problem_lines(h.get("problems") or {"active": [], "recent": []}, todo, h.get("service"))
    lines += _aside_lines(idx.get("moved_aside") or [], h["home"])
    if h["vault"] is None:
        todo.append("configure a vault (--vault or vault.path) to index notes")
    if todo:
        lines.append("To do: " + "; ".join(todo))
    return "\n".join(lines)


def _aside_lines(aside: list[dict[str, Any]], home: str) -> list[str]:
    """The copies of stores moved aside: the damaged ones, and apart a newer release's a rebuild
    replaced after a downgrade and a gone model's vectors (no damage). A daemon before ``newer``
    named such copies ``.broken-`` too: they are among the damaged ones here."""
    lines = []
    newer = "Index copies made by a newer release (replaced by a rebuild)"
    retired = "Previous model's vectors kept (not damage: its model is gone)"
    for label, copies in (
        ("Damaged index copies", [c for c in aside if not c.get("newer") and not c.get("retired")]),
        (newer, [c for c in aside if c.get("newer")]),
        (retired, [c for c in aside if c.get("retired")]),
    ):
        if copies:
            oldest = max(c["age_days"] for c in copies)
            lines.append(
                f"{label}: {len(copies)} moved aside in {home}/index "
                f"({', '.join(c['name'] for c in copies)}; the oldest {_days(oldest)} old), kept for "
                f"inspection and removed after {KEEP_MOVED_ASIDE_DAYS} days; `sidecar doctor` shows "
                "their size"
            )
    return lines


def _count_lines(idx: dict[str, Any]) -> list[str]:
    """The notes and chunks indexed, in all and by source. ``files`` counts a moved note once
    (by its new path) while its old entry is removed (``leaving``), which is said beside it."""
    catching = idx.get("catching_up") or {}
    leaving = catching.get("leaving", 0)
    more = f" (the old entries of {leaving:,} moved notes are being removed)" if leaving else ""
    lines = [f"  {idx['files']:,} notes{more}, {idx['chunks']:,} chunks"]
    for source, c in sorted(idx["by_source"].items()):
        lines.append(f"    {source:<7} {c['files']:>7,} notes {c['chunks']:>8,} chunks")
    return lines


def _immutable_line(idx: dict[str, Any]) -> str | None:
    """The Index line of `status` while a file of the index is immutable, else None: "Index:
    ready" beside a PROBLEM line saying nothing can be written read as if all were well."""
    frozen = idx.get("immutable")
    if not frozen:
        return None
    return (
        f"Index: read-only: {shown(frozen)}{_IMMUTABLE}; searches answer from the index as it is, "
        "changed notes and memory writes are not indexed until the flag is lifted"
    )


def _index_line(h: dict[str, Any]) -> str:
    """The Index line of `status`: building (what it waits for) or ready."""
    idx = h["index"]
    if idx.get("rebuilding"):
        return _rebuild_line(idx)
    if idx["state"] == "building":
        return _building_line(h)
    if catching := idx.get("catching_up"):
        # File changes wait or are being applied (a branch switch, a synced folder).
        said = catching_up_note(catching["done"], catching["total"], catching.get("recut", 0))
        return f"Index: ready; {said.removeprefix('the index is ')}"
    if idx["phase"] == "indexing" and idx["progress"]["total"] > _BUSY_NOTES:
        # Ready, and a batch of changes (a checkout, a synced folder) is being read in.
        prog = idx["progress"]
        return f"Index: ready; indexing changes ({prog['done']:,}/{prog['total']:,} notes)"
    if idx.get("complete", True):
        return "Index: ready"
    # The first sweep ended, but not every note is read (a folder offline, a build cut short).
    return "Index: ready, but not every note is read yet: notes not read cannot be found"


def _rebuild_line(idx: dict[str, Any]) -> str:
    """The Index line while a rebuild is asked: queued behind the sweep under way, or running."""
    busy = idx["phase"] in ("scanning", "indexing")
    at = _phase_words(idx)
    if idx.get("rebuild_queued"):
        # The progress is the sweep's under way (file changes): shown as the rebuild's, it read as
        # a rebuild nearly done before it began. The index is as it was until the rebuild begins.
        state = "ready" if idx["state"] == "ready" else "building"
        if busy:
            return (
                f"Index: {state}; a rebuild is queued behind the sweep under way ({at}): it begins after it"
            )
        return f"Index: {state}; a rebuild is queued: it begins in a moment"
    # At its first moment the index is empty: "0 notes" alone read as a rebuild that found none.
    where = at if busy else "starting"
    return f"Index: building (a rebuild is under way: {where}); notes are found again as they are read"


def _phase_words(idx: dict[str, Any]) -> str:
    """The sweep under way: its phase and progress. A sweep lists the roots before it knows what
    to index or remove: "scanning 0/0 notes" stood for a minute while 5,000 deletions were judged."""
    prog = idx["progress"]
    if idx["phase"] == "scanning" and not prog["total"]:
        return "looking for changes in the notes"
    rate = prog.get("notes_per_second")
    pace = f", {per_second(rate)} a second" if rate else ""
    left = time_left(prog["total"] - prog["done"], rate, prog.get("rough"))
    return f"{idx['phase']} {prog['done']:,}/{prog['total']:,} notes{pace}{left}"


def _building_line(h: dict[str, Any]) -> str:
    idx = h["index"]
    notes = [r for r in h.get("roots", []) if not r["name"].startswith("memory/")]
    if not idx["files"] and notes and all(r["mode"] == "offline" for r in notes):
        # A share not mounted yet: nothing is read, nothing computed (it said "every note is
        # searchable by keyword; vectors are being computed" over 0 notes).
        first = next((r for r in notes if r["name"] == "vault"), notes[0])  # the wiki lies in it
        return f"Index: waiting for {shown(first['path'])} to be readable (see Roots); nothing indexed yet"
    if idx["phase"] in ("scanning", "indexing", "starting"):
        waited = idx.get("tokenizer_wait_seconds")
        if waited is not None:
            # A first start over notes indexed without the model: they are cut again in its
            # tokens, once its tokenizer is there (it stood at "indexing 0/3 notes" for a minute).
            most = idx.get("tokenizer_wait_max_seconds")
            bound = f" (at most {most:.0f} s, then words are counted)" if most else ""
            return (
                f"Index: building ({_phase_words(idx)}; waiting "
                f"{waited:.0f} s for the model's tokenizer, which is being loaded or converted, to cut "
                f"notes in its tokens{bound}; search answers meanwhile)"
            )
        return f"Index: building ({_phase_words(idx)})"
    if not idx["pending_vectors"] and h["embedder"]["state"] == "loading":
        # A restart over a complete index: nothing is computed, the model only loads.
        return "Index: building (every note is searchable by keyword; by meaning once the model is loaded)"
    return "Index: building (every note is searchable by keyword; vectors are being computed)"


def _vector_lines(h: dict[str, Any], todo: list[str]) -> list[str]:
    """The Embedder and Vectors lines of `status` (a model switch in progress included)."""
    idx, emb = h["index"], h["embedder"]
    continuous = idx.get("continuous")
    # The chunks each indexing of a note written continuously leaves: said on a line of their own.
    pending = backlog(idx)
    # Less what the model computed of the batch it runs now (its time left counts those done): the
    # line says both, so that progress shows as the model works, not once a batch is stored
    # (minutes apart on a slow CPU), and the count waiting is the one every answer's note and
    # `status --json` give (the line said fewer than they did, a second apart). That batch may be a
    # continuous note's chunks, left out of ``pending``: only what it holds beyond those is the
    # backlog's.
    computing = int((h.get("vectors") or {}).get("computing") or 0)
    waiting = max(min(pending, int(idx["pending_vectors"]) - computing), 0)
    computed = (
        f" ({pending - waiting:,} of them computed, stored with the batch running now)"
        if pending > waiting
        else ""
    )
    lines: list[str] = []
    active = (h.get("problems") or {}).get("active", [])
    # While vectors cannot be stored (a full disk) nothing moves: no ETA, say why instead.
    stalled = any(p["area"] == "embedding" for p in active)

    def eta(left: int, rate: float | None, rough: bool | None) -> str:
        if stalled:
            return ", paused: storing vectors fails (see PROBLEM below)"
        return time_left(left, rate, rough)

    said_switch = False  # the chunks left to a model switch named on the Vectors line
    if emb["state"] == "ok":
        lines.append(f"Embedder: ok ({emb['model']}, from {emb['origin']}){_fallback_words(emb, todo)}")
        if waiting:
            left = eta(waiting, idx.get("embed_rate_chunks_per_second"), idx.get("embed_rate_rough"))
            lines.append(
                f"Vectors: {pending:,} chunks waiting for vectors{computed}"
                f"{_largest_words(idx, pending)}{left}; "
                "keyword search covers them already"
            )
        elif pending:
            lines.append(f"Vectors: storing the last {pending:,} computed")
        elif idx.get("rebuilding") and not idx.get("rebuild_queued"):
            lines.append("Vectors: computed for the notes as the rebuild reads them")
        else:
            lines.append(f"Vectors: {all_vectors_words(idx)}")
            said_switch = True
        lines += _continuous_lines(continuous)
        lines += _keyword_only_lines(idx.get("keyword_only"), todo)
        vec = h.get("vectors") or {}
        if vec.get("building"):  # a model switch: the old model's vectors answer meanwhile
            left = vec.get("building_pending", 0)
            when = eta(left, vec.get("building_rate_chunks_per_second"), vec.get("building_rate_rough"))
            # The chunks cut again for it have no serving vector (said here unless the Vectors
            # line said so).
            switch = int(idx.get("left_to_switch") or 0)
            only = f" ({switch:,} cut again found by keywords only)" if switch and not said_switch else ""
            lines.append(
                f"Model switch: {left:,} of {idx['chunks']:,} chunks still wait for {emb['model']}'s "
                f"vectors{when}; searches use {vec.get('serving_model')}'s until then{only}"
            )
        lines += _index_build_lines(vec)
        lines += _paused_lines(vec)
    else:
        lines.append(f"Embedder: {emb['state']}" + (f": {shown(emb['error'])}" if emb.get("error") else ""))
        if emb["state"] == "failed":
            lines.append(f"Vectors: {pending:,} chunks wait for the model; search is keyword-only")
            todo.append(
                "fix the model (see the embedder error above), then `sidecar reload` tries it at "
                "once (else every embedder.retryMinutes; a new embedder.path needs a restart)"
            )
        elif emb["state"] == "off":
            lines.append("Vectors: off; search is keyword-only (embedder.enabled: true turns them on)")
    return lines


# A note is named in the Vectors line when it holds at least half of the chunks waiting, and at
# least this many (a backfill batch: below it the queue is minutes long at most).
_LARGEST_NAMED = 256


def _largest_words(idx: dict[str, Any], pending: int) -> str:
    """The Vectors line's ", 7,800 of them from vault/x" when one note is most of the queue (a
    long note just saved); '' otherwise."""
    largest = idx.get("pending_largest")
    if not largest or largest["chunks"] < _LARGEST_NAMED or largest["chunks"] * 2 < pending:
        return ""
    return f", {largest['chunks']:,} of them from {shown(largest['reference'])}"


def _continuous_lines(continuous: dict[str, Any] | None) -> list[str]:
    """Notes written continuously (a log appended to all the time): what search has of them."""
    if not continuous:
        return []
    n, wait = continuous["notes"], continuous["pending_vectors"]
    named = ", ".join(shown(k) for k in continuous["examples"])
    which = f"{named} ({n} note{'' if n == 1 else 's'})" if named else f"{n} note{'' if n == 1 else 's'}"
    now = f"; {wait:,} of {'its' if n == 1 else 'their'} chunks without a vector now" if wait else ""
    return [
        f"Written continuously: {which}, each change indexed at most a minute later: what each indexing adds "
        f"is found by its words at once, by meaning once its vectors are computed{now} (not counted "
        "as waiting in search answers)"
    ]


def _keyword_only_lines(capped: dict[str, Any] | None, todo: list[str]) -> list[str]:
    """Notes longer than the per-note vector limit: their chunks past it are found by keywords only."""
    if not capped:
        return []
    named = [
        f"{shown(e['reference'])} ({e['keyword_only']:,} of {e['chunks']:,})" for e in capped["examples"]
    ]
    more = capped["notes"] - len(named)
    if more > 0:
        named.append(f"{more:,} more" if named else "in agents' memory")  # an agent's are not named
    notes = capped["notes"]
    todo.append(
        f"to have every chunk searched by meaning too, raise {capped['setting']} and run `sidecar reload`"
    )
    return [
        f"Keyword-only chunks: {capped['chunks']:,} in {notes:,} note{'s' if notes != 1 else ''} longer "
        f"than {capped['setting']} ({capped['limit']:,} chunks get vectors per note): " + ", ".join(named)
    ]


def skipped_lines(idx: dict[str, Any]) -> list[str]:
    """The Skipped files line: counts by reason ("too large" with its limit), then a few files."""
    if not idx["skipped"]:
        return []
    limit = idx.get("max_file_bytes")
    parts = []
    for reason, n in sorted(idx["skipped"].items()):
        over = f" (over index.maxFileBytes, {limit:,} bytes)" if reason == "too large" and limit else ""
        parts.append(f"{n} {shown(reason)}{over}")
    lines = [f"Skipped files: {', '.join(parts)}"]
    files = idx.get("skipped_files") or []
    if files:
        shown_files = [
            f"{shown(f['reference'])} ({f['bytes']:,} bytes)" if f.get("bytes") else shown(f["reference"])
            for f in files[:_SKIPPED_SHOWN]
        ]
        total = sum(idx["skipped"].values())
        more = f" and {total - len(shown_files):,} more" if total > len(shown_files) else ""
        lines.append(f"  {', '.join(shown_files)}{more}")
    return lines


_SKIPPED_SHOWN = 3


def _index_build_lines(vec: dict[str, Any]) -> list[str]:
    """An ANN index build running now: the first one holds new vectors back until it ends."""
    build = vec.get("index_build")
    if not build:
        return []
    last = f"; the last build took {duration(build['last_seconds'])}" if build.get("last_seconds") else ""
    since = time.strftime("%H:%M", time.localtime(build["since"]))
    what = "trained again" if build.get("reason") == "grown" else "built"
    if build.get("vectors_wait"):
        meanwhile = "new vectors wait until it is done (notes are searchable by keyword meanwhile)"
    else:
        meanwhile = "searches and new vectors go on meanwhile"
    return [f"Vector index: being {what} over {build['rows']:,} vectors since {since}{last}; {meanwhile}"]


def _paused_lines(vec: dict[str, Any]) -> list[str]:
    """A switch undone before it finished: its table is kept a while, so switching back resumes it."""
    paused = vec.get("paused")
    if not paused:
        return []
    until = (
        f" until {time.strftime('%Y-%m-%d %H:%M', time.localtime(paused['drop_at']))}"
        if paused.get("drop_at")
        else ""
    )
    return [
        f"Paused model switch: {paused['vectors']:,} vectors in {paused['table']} are kept{until}; "
        "switching back to that model resumes the switch, switching to another drops them"
    ]


def _fallback_words(emb: dict[str, Any], todo: list[str]) -> str:
    """While the configured model failed and the previous one answers in its place: say so."""
    fallback = emb.get("fallback")
    if not fallback:
        return ""
    todo.append(
        "fix the configured model (see its PROBLEM line) and restart the daemon: the switch to it "
        "then runs in the background"
    )
    configured = shown(fallback["configured"])
    return f", answering in place of the configured model {configured}, which failed to load"


# More agents' inboxes than this are summed up in one line, naming only those with a problem,
# at most ``_TROUBLED_INBOXES`` of them (300 agents printed 300 lines); `status --json` lists each.
_LISTED_INBOXES = 5
_TROUBLED_INBOXES = 10
# From this many inboxes on status says what they cost (each a root: file watches and a look at
# every sweep; a keyword index of its own while its agent uses it); `sidecar doctor` warns likewise.
_MANY_INBOXES = 200


def _troubled(root: dict[str, Any]) -> bool:
    """Whether a root has something to say beyond its mode and last listing."""
    return bool(
        root.get("error")
        or root.get("absent")
        or root.get("hold")
        or root.get("unreadable")
        or root.get("look_waiting")
        or root["mode"] in ("offline", "held")
    )


def _root_lines(roots: list[dict[str, Any]], todo: list[str]) -> list[str]:
    """The Roots block of `status`: mode, when last listed, held deletions and what to do about
    them; many inboxes in one line, with a line of each that has a problem."""
    inboxes = [r for r in roots if r["name"].startswith("memory/")]
    if len(inboxes) <= _LISTED_INBOXES:
        return ["Roots:", *_each_root(roots, todo)]
    others = [r for r in roots if not r["name"].startswith("memory/")]
    troubled = [r for r in inboxes if _troubled(r)]
    modes: dict[str, int] = {}
    for r in inboxes:
        modes[r["mode"]] = modes.get(r["mode"], 0) + 1
    counts = ", ".join(f"{n:,} {mode}" for mode, n in sorted(modes.items(), key=lambda m: -m[1]))
    unlisted = sum(1 for r in inboxes if r.get("last_sweep") is None)
    if unlisted:
        counts += f", {unlisted:,} not listed yet"
    named = f"; {len(troubled):,} with a problem" if troubled else "; none with a problem"
    summary = (
        f"  {'memory/*':<16} {len(inboxes):,} agents' inboxes: {counts}{named} "
        "(`sidecar status --json` lists each)"
    )
    shown_troubled, rest = troubled[:_TROUBLED_INBOXES], troubled[_TROUBLED_INBOXES:]
    lines = ["Roots:", *_each_root(others, todo), summary]
    if len(inboxes) >= _MANY_INBOXES:
        lines.append(
            f"{'':<19}each of the {len(inboxes):,} inboxes is watched (file watches) and looked at by "
            "every sweep, and keeps a keyword index of its own while its agent uses it "
            "(memory.indexIdleDays); name agents per project, not per session "
            '(README, "Agents named per session or per project")'
        )
    lines += _each_root(shown_troubled, todo)
    if rest:
        lines.append(f"    and {len(rest):,} more inboxes with a problem")
        if any(r["mode"] == "offline" for r in rest):
            todo.append(
                "check that the other offline inboxes (`sidecar status --json`) are mounted and readable"
            )
    return lines


def _listed(root: dict[str, Any]) -> str:
    """When a root's folder was last listed. An inbox an agent just made is not listed until the
    next sweep, while its notes are indexed as they are written ("listed never" beside them)."""
    if root.get("last_sweep") is not None:
        return f"listed {_ago(root['last_sweep'])}"
    if root["name"].startswith("memory/"):
        return "not listed yet (notes written through sidecar are indexed at once)"
    return "not listed yet"


def _no_wiki(path: str, roots: list[dict[str, Any]]) -> str:
    """The wiki folder is not there: optional, unless a folder of a near name is (`Wiki` for
    wiki/): then the one meant (asked of the vault with a short deadline)."""
    from pathlib import Path

    from sidecar.config import DEFAULT_WIKI
    from sidecar.vault.timeout import near_folder

    vault = next((r["path"] for r in roots if r["name"] == "vault"), None)
    wiki = Path(path)
    near = None
    if vault is not None and wiki.is_relative_to(vault):
        sub = wiki.relative_to(vault).as_posix()
        near = near_folder(Path(vault), sub, 1.0, loose=sub != DEFAULT_WIKI)
    if near:
        return f"  (no such folder; did you mean {near}/? set vault.wikiSubfolder: {near}, case-sensitive)"
    return "  (no wiki folder: optional; make it, or name yours with vault.wikiSubfolder)"


def _each_root(roots: list[dict[str, Any]], todo: list[str]) -> list[str]:
    lines = []
    vault_offline = any(r["name"] == "vault" and r["mode"] == "offline" for r in roots)
    for r in roots:
        extra = f"  PROBLEM: {shown(r['error'])}" if r.get("error") else ""  # may name a file
        with_vault = r["name"] == "wiki" and r["mode"] == "offline" and vault_offline
        if with_vault:  # the wiki lies in the vault: one problem, said once (on the vault's line)
            extra = "  (offline with the vault)"
        if r.get("absent") and not extra:
            # The wiki is optional and named by default: a quick start without one was told
            # something was wrong with a name it never set.
            extra = (
                _no_wiki(r["path"], roots)
                if r["name"] == "wiki"
                else "  (no such folder: no notes; is the name right?)"
            )
        lines.append(
            # When its folder was last listed: a sweep may still be writing what that listing found
            # ("last sweep 5s ago" read as a sweep done while the first one was at 1,920 of 40,004).
            f"  {shown(r['name']):<16} {r['mode']:<8} {_listed(r)}  {shown(r['path'])}{extra}"
        )
        hold = r.get("hold")
        if hold:
            when = (
                f"; applied {_until(hold['applies_at'])} unless the notes come back"
                if hold.get("applies_at")
                else "; held for as long as it stays so"
            )
            lines.append(
                f"    {r['held_deletions']:,} deletions held ({hold['kind']}) since {_ago(hold['since'])}"
                f"{when}; {hold_advice(hold['kind'], hold['confirm'])}"
            )
        if (look := r.get("look_waiting")) and not r.get("error"):
            # A slow share's call past probeTimeoutSeconds, no hang said: why a write is refused.
            by = "a request's look cut at its cap" if look["by"] == "look" else "its scan"
            lines.append(
                f"    slow: {by} waits {look['seconds']:.0f} s on {look['call']} {shown(look['path'])}; "
                "a request's look at it (a memory write's, a list's) is refused as slow until that "
                "call answers"
            )
        if r.get("waiting_deletions"):
            # A deletion under way (rm -r, a sync, a branch switch) is judged whole once it ends.
            lines.append(
                f"    {r['waiting_deletions']:,} deletions wait for the changes under way to end, "
                "then pass the mass-deletion guard"
            )
        if r["mode"] == "offline" and not with_vault:
            todo.append(f"check that {shown(r['path'])} is mounted and readable")
        elif r["mode"] == "held" and hold:
            todo.append(
                f"if those notes of {r['name']} were deleted on purpose: {hold['confirm']}; "
                "else put them back (nothing was removed from the index)"
            )
    return lines


def _days(days: float) -> str:
    return "under a day" if days < 1 else f"{days:.0f} day" + ("" if round(days) == 1 else "s")


def daily_notes_line(formats: list[dict[str, str]]) -> str:
    """The daily-note formats that date a note by its name, and where each was read (status and
    doctor): a user whose daily notes are not listed for "last week" sees which format counts,
    and why one set in a plugin switched off does not."""

    def said(f: dict[str, str]) -> str:
        where = shown(f["folder"]) + "/" if f["folder"] else "any folder"
        return f"{shown(f['format'])} in {where} (from {shown(f['file'])})"

    on = [said(f) for f in formats if not f.get("off")]
    off = [
        f"{said(f)} is not used: the {shown(f['off'])} plugin is switched off in Obsidian"
        for f in formats
        if f.get("off")
    ]
    if not on:
        on = ["named YYYY-MM-DD (no daily-note format set in Obsidian)" if not off else "named YYYY-MM-DD"]
    return "; ".join(on + off)
