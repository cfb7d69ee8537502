"""The weekday the vault's weeks begin on, as Obsidian's Calendar plugin shows them
(``.obsidian/plugins/calendar/data.json``): time phrases ("this week", "last week") read weeks so.

The plugin stores ``weekStart``, a weekday's name or ``"locale"`` (its default), and
``localeOverride``, a Moment.js locale or ``"system-default"`` (its default). "locale" begins weeks
on the day that locale begins them (Moment's table, ``data/week-start-locales.txt``: Sunday for
``en``/``en-us``, Saturday for ``ar``/``fa``, Monday for ``de``/``en-gb``). At ``"system-default"``
the plugin takes Obsidian's language (``en`` is ``en-gb``, Monday) and the system's locale only when
it is of that language; neither is in the vault. The daemon's own language (LANGUAGE, LC_ALL,
LC_MESSAGES, LANG, read by the configuration, as Electron reads its own on Linux) stands in for
both, assuming Obsidian runs in the system's language as most do; Monday (the ISO and German week)
when that names none ("C", unset) or one Moment does not know. A vault without the plugin
begins weeks on Monday, and so does one with the plugin switched off (Obsidian keeps its settings
file; ``.obsidian/community-plugins.json`` lists the plugins switched on: a vault without that
list is taken to have it on, as before). Read beside the daily-note settings, once per sweep,
again only when the file's size or mtime changed. Imports only the confined reads and the settings read.
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any

from sidecar.vault.confine import printable
from sidecar.vault.settingsfile import read_settings_json, switched_off

log = logging.getLogger(__name__)
CALENDAR_SETTINGS = Path(".obsidian/plugins/calendar/data.json")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONDAY = 0


def _locale_weeks() -> dict[str, int]:
    """Each Moment.js locale's first weekday (0 Monday ... 6 Sunday), from the package's data."""
    text = resources.files("sidecar").joinpath("data", "week-start-locales.txt").read_text(encoding="utf-8")
    pairs = (line.split() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {name: _WEEKDAYS.index(day) for name, day in pairs}


_LOCALE_WEEKS = _locale_weeks()


def moment_locale(name: str) -> str | None:
    """A locale as Moment.js names it ("en_US.UTF-8" and "en-US" are "en-us"); None for one that
    names no language ("C", "POSIX", "")."""
    base = name.strip().split(".")[0].split("@")[0].replace("_", "-").lower()
    return None if base in ("", "c", "posix") else base


def locale_week_start(name: str | None) -> int | None:
    """The first weekday of a locale as Moment.js looks it up (the most specific name it knows:
    "en-us" is "en", "de-at" is "de-at", "de-xx" is "de"); None when it knows none."""
    parts = (moment_locale(name) or "").split("-") if name else []
    for n in range(len(parts), 0, -1):
        start = _LOCALE_WEEKS.get("-".join(parts[:n]))
        if start is not None:
            return start
    return None


def week_start_in(settings: Any, system_locale: str | None = None) -> tuple[int, str]:
    """The first weekday (0 Monday ... 6 Sunday) the plugin's settings give, and how it was read
    (plain words for ``status``); the plugin's defaults where a key is missing."""
    if not isinstance(settings, dict):
        settings = {}
    start = settings.get("weekStart", "locale")
    if isinstance(start, str) and start.strip().lower() in _WEEKDAYS:
        return _WEEKDAYS.index(start.strip().lower()), "the Calendar plugin's setting"
    override = settings.get("localeOverride", "system-default")
    if isinstance(override, str) and override.strip() and override.strip() != "system-default":
        found = locale_week_start(override)
        if found is not None:
            return found, f"the Calendar plugin's locale {override.strip()}"
        return MONDAY, f"the Calendar plugin's locale {override.strip()}, not known: Monday"
    # The plugin begins weeks by Obsidian's language (kept outside the vault), refined by the
    # system's locale when that is of the same language: the system's stands in for both.
    found = locale_week_start(system_locale)
    if found is not None:
        return found, (
            f"the Calendar plugin's locale default, 'Same as system': the system locale {system_locale},"
            " assuming Obsidian runs in that language"
        )
    said = f"the system locale {system_locale} names none" if system_locale else "no system locale is set"
    return MONDAY, f"the Calendar plugin's locale default, 'Same as system'; {said}: Monday"


class WeekStart:
    """One vault's week start, kept up to date by ``refresh``; ``value`` is read by searches."""

    def __init__(self, vault: Path | None, system_locale: str | None = None) -> None:
        self.vault = vault
        self.system_locale = system_locale
        self.value = MONDAY
        self.source = "no Calendar plugin: Monday"
        self._stamp: tuple[int, int] | None = None

    def describe(self) -> dict[str, str]:
        """The week start in force and how it was read, for ``status``."""
        return {"weekday": _WEEKDAYS[self.value], "source": self.source}

    def refresh(self) -> int:
        """Read the plugin's settings when they changed; the week start in force."""
        if self.vault is None:
            return self.value
        path = self.vault / CALENDAR_SETTINGS
        if switched_off(self.vault, "calendar"):
            self._stamp = None  # read again once it is switched on
            self._set(path, MONDAY, "the Calendar plugin is switched off: Monday")
            return self.value
        return self._read(path)

    def _read(self, path: Path) -> int:
        """``refresh`` with the plugin not switched off: its settings file, read when changed."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            # no settings written: the plugin's defaults when it is installed, else Monday
            self._stamp = None
            if path.parent.is_dir():
                self._set(path, *week_start_in({}, self.system_locale))
            else:
                self._set(path, MONDAY, "no Calendar plugin: Monday")
            return self.value
        except OSError:  # cannot tell now (a share that fails): what was read stays
            return self.value
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self.value
        try:
            start, source = week_start_in(read_settings_json(path, "utf-8-sig"), self.system_locale)  # a BOM
        except (OSError, ValueError, RecursionError) as exc:
            # half-written by Obsidian: the week start read before stays until it reads well; a
            # file left malformed is told once per change, not at every sweep
            why = printable(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
            log.warning("week_start_settings_unreadable path=%s error=%s", path, why)
            if not isinstance(exc, OSError):
                self._stamp = stamp  # malformed: read again only when the file changes
            return self.value
        self._stamp = stamp
        self._set(path, start, source)
        return self.value

    def _set(self, path: Path, start: int, source: str) -> None:
        if start != self.value:
            log.info("week_start path=%s weekday=%s", path, _WEEKDAYS[start])
        self.value, self.source = start, source
