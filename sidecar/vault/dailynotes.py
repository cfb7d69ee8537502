"""The vault's daily-note name formats, from Obsidian's settings: the core Daily notes plugin
(``.obsidian/daily-notes.json``, ``format``) and the Periodic Notes plugin
(``.obsidian/plugins/periodic-notes/data.json``: ``daily.format``, or each ``calendarSets[].day``
of its 1.x versions). Read beside Obsidian's Excluded files (``sidecar.vault.ignore``), once per
sweep, each file again only when its size or mtime changed. A plugin switched off in Obsidian
keeps its settings file, which Obsidian then ignores: so does this (its formats are described as
off). The formats are returned as written, each with the folder its notes are made in
(``sidecar.notes.dayformat`` reads them). Imports only the settings read
(``sidecar.vault.settingsfile``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from sidecar.vault.confine import printable
from sidecar.vault.settingsfile import DAILY_NOTES, PERIODIC_NOTES, read_settings_json, switched_off

log = logging.getLogger(__name__)
_FILES = (DAILY_NOTES, PERIODIC_NOTES)
# Each file's plugin: its id in the list of core or community plugins switched on, and its name.
_PLUGINS = {
    DAILY_NOTES: ("daily-notes", True, "Daily notes"),
    PERIODIC_NOTES: ("periodic-notes", False, "Periodic Notes"),
}


def _folder(value: Any) -> str:
    """A folder as Obsidian normalises it: "\\" is "/" (typed on Windows), no "./" or slashes
    around it ("Journal\\" matched nothing)."""
    if not isinstance(value, str):
        return ""
    folder = value.strip().replace("\\", "/").strip("/")
    while folder.startswith("./"):
        folder = folder[2:].lstrip("/")
    return "" if folder == "." else folder


def _formats_in(settings: Any) -> list[tuple[str, str]]:
    """The daily formats one settings file names, each with its folder (either plugin's layout)."""
    if not isinstance(settings, dict):
        return []
    found = [(settings.get("format"), settings.get("folder"))]  # Daily notes
    daily = settings.get("daily")  # Periodic Notes 0.x
    if isinstance(daily, dict) and daily.get("enabled", True) is not False:
        found.append((daily.get("format"), daily.get("folder")))
    sets = settings.get("calendarSets")  # Periodic Notes 1.x
    for item in sets if isinstance(sets, list) else []:
        day = item.get("day") if isinstance(item, dict) else None
        if isinstance(day, dict) and day.get("enabled", True) is not False:
            found.append((day.get("format"), day.get("folder")))
    # A folder set without a format keeps Obsidian's default format (the file then holds only
    # {"folder": "Daily"}: it was read as no daily notes at all).
    return [
        (f.strip() if isinstance(f, str) and f.strip() else _DEFAULT_FORMAT, _folder(folder))
        for f, folder in found
        if (isinstance(f, str) and f.strip()) or _folder(folder)
    ]


_DEFAULT_FORMAT = "YYYY-MM-DD"


class DailyNoteFormats:
    """The daily-note formats one vault's settings name, kept up to date by ``refresh``; what was
    read from which file (``describe``) and what could not be read (``trouble``), for status."""

    def __init__(self, vault: Path | None) -> None:
        self.vault = vault
        # file -> (stamp, formats, why it cannot be read or None)
        self._read: dict[Path, tuple[tuple[int, int], list[tuple[str, str]], str | None]] = {}
        self._off: set[Path] = set()  # the settings files (relative) of plugins switched off

    def refresh(self) -> tuple[tuple[str, str], ...]:
        """Read the settings files that changed; the formats of all of them, each once, but those
        of a plugin switched off (looked at again each time: the list of plugins is a file of
        its own)."""
        if self.vault is None:
            return ()
        formats: list[tuple[str, str]] = []
        off: set[Path] = set()
        for rel in _FILES:
            plugin, core, name = _PLUGINS[rel]
            # Off whatever its file holds: Obsidian ignores it, broken too (a broken one was a
            # warning to fix a file nothing reads).
            is_off = switched_off(self.vault, plugin, core=core)
            found = self._file(self.vault / rel, quiet=is_off)
            if is_off:
                off.add(rel)
                if rel not in self._off and found:
                    log.info("daily_note_plugin_off path=%s plugin=%s", self.vault / rel, name)
                continue
            formats.extend(found)
        self._off = off
        return tuple(dict.fromkeys(formats))

    def describe(self) -> list[dict[str, Any]]:
        """Each format read: ``format``, ``folder`` ('' for anywhere) and the settings ``file``
        (vault-relative) it was read from; one of a plugin switched off with ``off``, the plugin's
        name (not in force)."""
        return [
            {"format": fmt, "folder": folder, "file": str(rel)}
            | ({"off": _PLUGINS[rel][2]} if rel in self._off else {})
            for rel in _FILES
            if self.vault is not None and (read := self._read.get(self.vault / rel))
            for fmt, folder in read[1]
        ]

    def kept(self) -> list[list[str]]:
        """The formats in force as ``[format, folder, file]``, for the index to keep: a daemon
        started while the vault's share is away dates its daily notes by them (``resume``)."""
        return [[d["format"], d["folder"], d["file"]] for d in self.describe() if "off" not in d]

    def resume(self, kept: object) -> None:
        """At a start, the formats a run before read (``kept``): in force until the settings
        files are read again, which happens only while the vault is there (an unmounted share
        left daily notes in a format of their own undated for the whole outage)."""
        if self.vault is None or self._read or not isinstance(kept, list):
            return
        for item in kept:
            if isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item):
                fmt, folder, rel = item
                if Path(rel) in _FILES:
                    # Stamp (0, 0): a file that is there is read again and replaces them.
                    _, formats, _ = self._read.setdefault(self.vault / rel, ((0, 0), [], None))
                    formats.append((fmt, folder))

    def formats(self) -> tuple[tuple[str, str], ...]:
        """The formats in force as last read (nothing read again)."""
        if self.vault is None:
            return ()
        read = [self._read.get(self.vault / rel) for rel in _FILES if rel not in self._off]
        return tuple(dict.fromkeys(f for r in read if r is not None for f in r[1]))

    @property
    def trouble(self) -> str | None:
        """What is wrong with the daily-note settings as last read, or None."""
        off = {self.vault / rel for rel in self._off} if self.vault is not None else set()
        return "; ".join(t for path, (_, _, t) in self._read.items() if t and path not in off) or None

    def _file(self, path: Path, *, quiet: bool = False) -> list[tuple[str, str]]:
        """The formats ``path`` gives (read again when it changed); ``quiet``: its plugin is off,
        a file that cannot be read is logged as no warning."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._read.pop(path, None)  # the plugin's settings are gone: its format no longer counts
            return []
        except OSError:  # cannot tell now (a share that fails): what was read stays
            return self._read.get(path, ((0, 0), [], None))[1]
        stamp = (st.st_mtime_ns, st.st_size)
        before = self._read.get(path, ((0, 0), [], None))
        if path in self._read and before[0] == stamp:
            return before[1]
        try:
            formats = _formats_in(read_settings_json(path))
        except (OSError, ValueError, RecursionError) as exc:
            # A file half-written by Obsidian: the formats read before stay until it reads well;
            # said once per version of the file, and in status (a log line alone left the user
            # wondering why their daily notes are dated by their last change).
            why = printable(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
            (log.info if quiet else log.warning)("daily_note_settings_unreadable path=%s error=%s", path, why)
            kept = ", ".join(f for f, _ in before[1])
            kept = f"the daily-note format read before stays ({kept})" if kept else "no format of it is used"
            trouble = f"{path} cannot be read ({why}); {kept}"
            self._read[path] = (stamp, before[1], trouble)
            return before[1]
        if formats != before[1]:
            shown = ", ".join(f"{f} in {folder or 'any folder'}" for f, folder in formats)
            log.info("daily_note_formats path=%s formats=%s", path, printable(shown))
        self._read[path] = (stamp, formats, None)
        return formats
