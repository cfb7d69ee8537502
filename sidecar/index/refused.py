"""Agents' inboxes a sweep refused (a symbolic link, another user's folder), said as problems.

A refused inbox is neither read nor served, so the notes of it indexed before leave the index:
a loss of recall said plainly, one problem per refused folder. The folder is the inbox itself,
its agent's folder (subject the agent) or the whole agents folder (one entry for every agent,
subject empty): an agents folder behind a link made one line per agent, each naming the inbox
as the folder to mend. How many notes of each left the index is kept in the manifest's meta
table (``REFUSED_META``): a restart would find them gone and say 0. Imports nothing from sidecar
but the problems and the printing of names.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sidecar.contracts.printable import few_names
from sidecar.index.problems import Problems

log = logging.getLogger(__name__)

_SHOWN = 3  # agents named in a line; the count says how many more
# The meta row keeping each refused inbox's folder, cause and notes that left the index.
REFUSED_META = "refused_inboxes"


class _Meta(Protocol):
    def get_meta(self, name: str) -> str | None: ...
    def set_meta(self, name: str, value: str) -> None: ...


@dataclass
class _Refused:
    agent: str
    folder: str  # the refused folder below the home: agents, agents/<agent> or agents/<agent>/memory
    cause: str  # "is a symbolic link or not a folder", "belongs to another user"
    left: int = 0  # its notes that left the index since it was refused (kept across restarts)
    new: int = 0  # of those, left at the sweep under way (logged once, when it ends)


def named(agents: list[str]) -> str:
    """At most three agents, "and N more"."""
    return few_names(agents, _SHOWN)


def parsed(agents_dir: Path, agent: str, why: str) -> _Refused:
    """The folder a refusal names ("inbox (agents/ops) is a symbolic link ...; refused")."""
    label, sep, tail = why.partition(") ")
    if sep and label.startswith("inbox ("):
        return _Refused(agent, label.removeprefix("inbox ("), tail.removesuffix("; refused"))
    return _Refused(agent, f"{agents_dir.name}/{agent}/memory", why.removesuffix("; refused"))


def grouped(agents_dir: Path, refusals: Iterable[_Refused]) -> dict[str, list[_Refused]]:
    """The refusals one group per refused folder, keyed by its subject: "" for the agents folder
    (every agent behind it), else the agent (its inbox or its agent folder)."""
    groups: dict[str, list[_Refused]] = {}
    for r in sorted(refusals, key=lambda r: r.agent):
        groups.setdefault("" if r.folder == agents_dir.name else r.agent, []).append(r)
    return groups


def rebuild_said(agents_dir: Path, refused: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """What a rebuild's refusal says of refused inboxes (agent -> why), and what to do: the agents
    folder named as such when it is the refused folder; the other folders (an inbox, an agent's
    folder) one line per cause, at most 3 named ("and N more"; hundreds of agents made tens of
    KB of one cause repeated)."""
    what: list[str] = []
    then: list[str] = []
    by_cause: dict[str, list[str]] = {}
    for subject, members in grouped(
        agents_dir, [parsed(agents_dir, a, w) for a, w in refused.items()]
    ).items():
        if subject:
            by_cause.setdefault(members[0].cause, []).append(subject)
            continue
        n = len(members)
        inboxes = "the memory inbox of 1 agent is" if n == 1 else f"the memory inboxes of {n} agents are"
        what.append(
            f"the agents folder {agents_dir} {members[0].cause}: {inboxes} not read (with notes indexed)"
        )
        then.append("make the agents folder a folder of your own again (no symbolic link)")
    for cause, names in by_cause.items():
        n = len(names)
        shown = few_names([f"memory/{a}" for a in names])
        what_is = cause.removeprefix("is ")
        if n == 1:
            what.append(f"a memory inbox with notes indexed is not read ({shown}: {what_is})")
        else:
            what.append(f"{n} memory inboxes with notes indexed are not read ({shown}: {what_is})")
        then.append(
            f"make {'it a folder' if n == 1 else 'them folders'} of your own again (no symbolic link)"
        )
    return what, list(dict.fromkeys(then))


class RefusedInboxes:
    def __init__(self, agents_dir: Path, problems: Problems, meta: _Meta | None = None) -> None:
        self._agents_dir = agents_dir
        self._problems = problems
        self._meta = meta
        self._by_root: dict[str, _Refused] = {}  # "memory/<agent>" -> why it is refused
        self._said: set[str] = set()  # subjects with a problem reported
        # As the last process kept them: a refusal found again (same folder and cause) goes on
        # counting from there; one its first sweep finds read or gone is forgotten with it.
        self._kept: dict[str, _Refused] = self._load()
        self._saved = self._rows()

    def _load(self) -> dict[str, _Refused]:
        """The refusals the meta row keeps (a row of another shape is dropped)."""
        try:
            raw = self._meta.get_meta(REFUSED_META) if self._meta is not None else None
            rows = json.loads(raw) if raw else []
            return {
                str(name): _Refused(str(agent), str(folder), str(cause), int(left))
                for name, agent, folder, cause, left in rows
            }
        except (ValueError, TypeError, sqlite3.Error) as exc:
            log.warning("refused_inboxes_not_read error=%s", exc)
            return {}

    def _rows(self) -> list[list[Any]]:
        every = {**self._kept, **self._by_root}
        return [[n, r.agent, r.folder, r.cause, r.left] for n, r in sorted(every.items()) if r.left]

    def save(self) -> None:
        """The counts kept in the meta row when they changed (once per full sweep); a failed
        write (a full disk, an index served read-only) keeps them for the next sweep."""
        rows = self._rows()
        if self._meta is None or rows == self._saved:
            return
        try:
            self._meta.set_meta(REFUSED_META, json.dumps(rows) if rows else "")
        except sqlite3.Error as exc:
            log.warning("refused_inboxes_not_saved error=%s", exc)
            return
        self._saved = rows

    def listed(self, name: str, agent: str, why: str | None, missing: int) -> None:
        """An inbox's scan: refused (``why``) with ``missing`` notes leaving the index, or read."""
        kept = self._kept.pop(name, None)
        if why is None:
            self._by_root.pop(name, None)
            return
        now = parsed(self._agents_dir, agent, why)
        was = self._by_root.get(name, kept)
        if was is not None and (was.folder, was.cause) == (now.folder, now.cause):
            now.left, now.new = was.left, was.new
        now.left += missing
        now.new += missing
        self._by_root[name] = now

    def forget(self, names: Collection[str]) -> None:
        """The refused inboxes no longer among the roots ``names`` (removed) are no longer said."""
        for name in [n for n in self._by_root if n not in names]:
            del self._by_root[name]
        self._kept = {n: r for n, r in self._kept.items() if n in names}

    def tell(self) -> None:
        """Report each refused folder once (what left at this sweep logged once), clear the rest."""
        groups = grouped(self._agents_dir, self._by_root.values())
        for subject in self._said - set(groups):
            self._problems.clear("inbox", subject=subject)
        self._said = set(groups)
        for subject, members in groups.items():
            first = members[0]
            new = [r for r in members if r.new]
            if new:
                log.warning(
                    "inbox_refused_dropped folder=%s inboxes=%d notes=%d why=%s",
                    first.folder, len(new), sum(r.new for r in new), first.cause,
                )  # fmt: skip
            for r in new:
                r.new = 0
            self._problems.report("inbox", self._text(subject, members), subject=subject)

    def _text(self, subject: str, members: list[_Refused]) -> str:
        first = members[0]
        path = self._agents_dir.parent / first.folder
        left = sum(r.left for r in members)
        if subject:  # one agent's inbox, or its agent folder
            gone = f"{left} of its notes left the index" if left else "its notes are not indexed"
            return (
                f"inbox ({first.folder}) {first.cause}; refused: {gone}, as a refused inbox is neither "
                f"read nor served (nor written); make {path} a folder of your own again and its notes "
                "are indexed at the next sweep"
            )
        agents = [r.agent for r in members]
        whose = f"the memory inbox of 1 agent ({agents[0]})" if len(agents) == 1 else (
            f"the memory inboxes of {len(agents)} agents ({named(agents)})"
        )  # fmt: skip
        gone = f"{left} of their notes left the index" if left else "their notes are not indexed"
        return (
            f"the agents folder ({first.folder}) {first.cause}; refused: {whose}: {gone}, as a refused "
            f"inbox is neither read nor served (nor written); make {path} a folder of your own again "
            "and their notes are indexed at the next sweep"
        )

    def summary(self) -> list[dict[str, Any]]:
        """The refused folders now: folder, why, the agents (named) and notes that left the index."""
        groups = grouped(self._agents_dir, self._by_root.values())
        return [
            {
                "folder": m[0].folder,
                "why": m[0].cause,
                "agents": [r.agent for r in m],
                "notes": sum(r.left for r in m),
            }
            for m in groups.values()
        ]
