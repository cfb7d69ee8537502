"""The vault's daily-note name formats, from Obsidian's settings: the core Daily notes plugin
(``.obsidian/daily-notes.json``, ``format``) and the Periodic Notes plugin
(``.obsidian/plugins/periodic-notes/data.json``: ``daily.format``, or each ``calendarSets[].day``
of its 1.x versions). Read beside Obsidian's Excluded files (``sidecar.vault.ignore``), once per
sweep, each file again only when its size or mtime changed. The formats are returned as written
(``sidecar.notes.dayformat`` reads them). Imports only the confined reads (``sidecar.vault.confine``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sidecar.vault.confine import open_regular, printable, read_fd

log = logging.getLogger(__name__)
_MAX_SETTINGS_BYTES = 1 << 20  # a few settings: a file far larger is not one to read whole
_FILES = (Path(".obsidian/daily-notes.json"), Path(".obsidian/plugins/periodic-notes/data.json"))


def _formats_in(settings: Any) -> list[str]:
    """The daily formats one settings file names (either plugin's layout)."""
    if not isinstance(settings, dict):
        return []
    found = [settings.get("format")]  # Daily notes
    daily = settings.get("daily")  # Periodic Notes 0.x
    if isinstance(daily, dict) and daily.get("enabled", True) is not False:
        found.append(daily.get("format"))
    sets = settings.get("calendarSets")  # Periodic Notes 1.x
    for item in sets if isinstance(sets, list) else []:
        day = item.get("day") if isinstance(item, dict) else None
        if isinstance(day, dict) and day.get("enabled", True) is not False:
            found.append(day.get("format"))
    return [f.strip() for f in found if isinstance(f, str) and f.strip()]


class DailyNoteFormats:
    """The daily-note formats one vault's settings name, kept up to date by ``refresh``."""

    def __init__(self, vault: Path | None) -> None:
        self.vault = vault
        self._read: dict[Path, tuple[tuple[int, int], list[str]]] = {}  # file -> (stamp, formats)

    def refresh(self) -> tuple[str, ...]:
        """Read the settings files that changed; the formats of all of them, each once."""
        if self.vault is None:
            return ()
        formats: list[str] = []
        for rel in _FILES:
            formats.extend(self._file(self.vault / rel))
        return tuple(dict.fromkeys(formats))

    def _file(self, path: Path) -> list[str]:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._read.pop(path, None)  # the plugin's settings are gone: its format no longer counts
            return []
        except OSError:  # cannot tell now (a share that fails): what was read stays
            return self._read.get(path, ((0, 0), []))[1]
        stamp = (st.st_mtime_ns, st.st_size)
        if path in self._read and self._read[path][0] == stamp:
            return self._read[path][1]
        try:
            # Opened as a note is (never a blocking read of a pipe) and read up to a cap.
            raw = read_fd(open_regular(path), _MAX_SETTINGS_BYTES + 1)
            if len(raw) > _MAX_SETTINGS_BYTES:
                raise ValueError(f"larger than {_MAX_SETTINGS_BYTES} bytes")
            formats = _formats_in(json.loads(raw.decode("utf-8")))
        except (OSError, ValueError, RecursionError) as exc:
            # A file half-written by Obsidian: the formats read before stay until it reads well.
            log.warning("daily_note_settings_unreadable path=%s error=%s", path, printable(exc))
            return self._read.get(path, ((0, 0), []))[1]
        if formats != self._read.get(path, ((0, 0), []))[1]:
            log.info("daily_note_formats path=%s formats=%s", path, printable(", ".join(formats)))
        self._read[path] = (stamp, formats)
        return formats
