"""The weekday the vault's weeks begin on, as Obsidian's Calendar plugin shows them
(``.obsidian/plugins/calendar/data.json``: ``weekStart``, a weekday's name, or ``"locale"``, then
its ``localeOverride``): time phrases ("this week", "last week") read weeks so. Monday when the
vault records none (Obsidian's own language setting is kept outside the vault; Monday is
the German and ISO week, and Obsidian's English locale, en-gb, begins on Monday too). Read beside
the daily-note settings, once per sweep, again only when the file's size or mtime changed.
Imports only the confined reads and the settings read (``sidecar.vault.settingsfile``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from sidecar.vault.confine import printable
from sidecar.vault.settingsfile import read_settings_json

log = logging.getLogger(__name__)
CALENDAR_SETTINGS = Path(".obsidian/plugins/calendar/data.json")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Moment.js locales whose week begins on Sunday, as the plugin's locale override names them.
_SUNDAY_LOCALES = frozenset({"en", "en-us", "en-ca", "ja", "ko", "he", "pt-br"})
MONDAY = 0


def week_start_in(settings: Any) -> int:
    """The first weekday (0 Monday ... 6 Sunday) the plugin's settings give; Monday when they
    name none (``"locale"`` with the system's locale, which the vault does not record)."""
    if not isinstance(settings, dict):
        return MONDAY
    start = settings.get("weekStart")
    if isinstance(start, str) and start.strip().lower() in _WEEKDAYS:
        return _WEEKDAYS.index(start.strip().lower())
    locale = settings.get("localeOverride")
    if isinstance(locale, str) and locale.strip().lower() in _SUNDAY_LOCALES:
        return _WEEKDAYS.index("sunday")
    return MONDAY


class WeekStart:
    """One vault's week start, kept up to date by ``refresh``; ``value`` is read by searches."""

    def __init__(self, vault: Path | None) -> None:
        self.vault = vault
        self.value = MONDAY
        self._stamp: tuple[int, int] | None = None

    def refresh(self) -> int:
        """Read the plugin's settings when they changed; the week start in force."""
        if self.vault is None:
            return self.value
        path = self.vault / CALENDAR_SETTINGS
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._stamp, self.value = None, MONDAY  # the plugin's settings are gone
            return self.value
        except OSError:  # cannot tell now (a share that fails): what was read stays
            return self.value
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self.value
        try:
            start = week_start_in(read_settings_json(path, "utf-8-sig"))  # a BOM an editor added
        except (OSError, ValueError, RecursionError) as exc:
            # half-written by Obsidian: the week start read before stays until it reads well; a
            # file left malformed is told once per change, not at every sweep
            why = printable(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
            log.warning("week_start_settings_unreadable path=%s error=%s", path, why)
            if not isinstance(exc, OSError):
                self._stamp = stamp  # malformed: read again only when the file changes
            return self.value
        if start != self.value:
            log.info("week_start path=%s weekday=%s", path, _WEEKDAYS[start])
        self._stamp, self.value = stamp, start
        return self.value
