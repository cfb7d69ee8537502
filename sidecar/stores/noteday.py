"""The day a note is about (pure): read from what the manifest keeps of it, its front matter's
``date``, ``updated`` or ``created`` and its name (a daily note, in the vault's daily-note formats),
never stored, so a format set later dates notes indexed before. Imports ``notes.dayformat`` only.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import unicodedata
from typing import Any

from sidecar.notes.dayformat import DayFormats, day_of_path

_DAY = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")


def note_date(front_matter: str, key: str, day_formats: DayFormats = ()) -> str:
    """The day a note is about (``note_day``); '' when none says (callers use the mtime)."""
    return note_day(front_matter, key, day_formats)[0]


@functools.lru_cache(maxsize=16_384)  # a search reads the same notes' views again and again
def note_day(front_matter: str, key: str, day_formats: DayFormats = ()) -> tuple[str, str]:
    """The day a note is about and what gave it (``property``, ``name``): front matter ``date``,
    ``updated`` or ``created``, else a ``YYYY-MM-DD`` file name (daily notes) or a vault or wiki
    note's name in one of the vault's daily-note ``day_formats`` (``DD.MM.YYYY``, in its folder);
    ('', '') when none says. Read from what the manifest keeps, never stored: a format set later
    dates notes indexed before."""
    try:
        fm = json.loads(front_matter)
    except ValueError:
        fm = {}
    if isinstance(fm, dict):
        # A memory note's created/updated are the inbox's own stamps, on every note: the time it
        # was written, not the day it is about (every note written in a period was "of" it).
        names = ("date",) if key.startswith("memory/") else ("date", "updated", "created")
        props = {str(k).lower(): v for k, v in reversed(fm.items())}  # "Date:" too; the first wins
        formats = () if key.startswith("memory/") else tuple(f for f, _ in day_formats)
        for name in names:
            day = _property_day(props.get(name), formats)
            if day:
                # A daily note whose template writes its day as a property too is named by it.
                return day, "name" if name_date(key, day_formats) == day else "property"
    day = name_date(key, day_formats)
    return (day, "name") if day else ("", "")


_PROPERTY_DAY = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")


def _property_day(value: Any, day_formats: tuple[str, ...]) -> str:
    """The ISO day a date property gives: ``2026-11-19`` (a time after it), ``2026/11/19``, a
    link to the daily note (``"[[2026-11-19]]"``, or unquoted, which YAML reads as a list in a
    list), the first of a list, or a day in the vault's daily-note format (``19.11.2026``)."""
    while isinstance(value, list) and value:
        value = value[0]
    if not isinstance(value, str):
        return ""
    text = value.strip().removeprefix("[[").split("]]", 1)[0].split("|", 1)[0].strip()
    m = _PROPERTY_DAY.match(text)
    if m:
        try:
            return dt.date(int(m[1]), int(m[2]), int(m[3])).isoformat()
        except ValueError:
            return ""
    return day_of_path(text, day_formats) if day_formats and text else ""


@functools.lru_cache(maxsize=16_384)
def name_date(key: str, day_formats: DayFormats = ()) -> str:
    """The day a note's name gives (a daily note): ``YYYY-MM-DD`` in it, or its path in one of
    the vault's ``day_formats``: a vault note inside the format's folder (any note when the folder
    is the vault's top; Obsidian's daily notes are made there, "Projects/12.11.2025 Meeting" is
    none), a wiki note only for a format without a folder; ''."""
    m = _DAY.search(key.rsplit("/", 1)[-1])
    if m:
        return m.group(0)
    # Memory notes are no Obsidian daily notes: the vault's format says nothing about their names.
    source, _, path = key.partition("/")
    if not day_formats or source == "memory":
        return ""
    return day_of_path(path, tuple(f for f, folder in day_formats if _inside(source, path, folder)))


def daily_note(key: str, day_formats: DayFormats = ()) -> bool:
    """Whether a note whose name gives its day (``name_date``) is a daily note, listed first for
    a period: with a daily-note folder set, only a note inside it (at any depth: a format such as
    ``YYYY/MM/YYYY-MM-DD`` nests notes by year and month, and Obsidian's calendar views find them
    there too); "Meetings/2026-11-20 Standup" elsewhere is dated by its name, but is no daily note.
    Without a folder (no settings, or a format made at the vault's top), any note so named."""
    if not name_date(key, day_formats):
        return False
    folders = {folder for _, folder in day_formats}
    if not folders or "" in folders:
        return True
    source, _, path = key.partition("/")
    return any(_inside(source, path, folder) for folder in folders)


def _inside(source: str, path: str, folder: str) -> bool:
    """Whether a note's path lies in a vault-relative folder ('' is the whole vault), compared
    as Obsidian on a Mac would: in one Unicode form, any case. Wiki paths are relative to the
    wiki's own folder, so only the whole vault holds them."""
    if not folder:
        return True
    if source != "vault":
        return False
    fold = unicodedata.normalize("NFC", folder).lower() + "/"
    return unicodedata.normalize("NFC", path).lower().startswith(fold)
