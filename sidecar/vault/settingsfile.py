"""One of Obsidian's settings files that say what to leave out (``app.json``'s Excluded files, the
templates folder of ``templates.json`` or Templater's ``data.json``), read with the same
safeguards for each: read again only when its (mtime, size) changed, opened as a note is and read
up to a cap; what was read before stays in force while the file cannot be read (said in
``trouble``), and for ``SETTINGS_GRACE_S`` after it went missing (Obsidian rewriting it, a sync
tool replacing ``.obsidian``: the sweep its removal started indexed every excluded note at once);
``kept``/``resume`` carry that across a restart. What the values mean is the caller's (filters, a
folder). Of the project it imports only the confined reads (``sidecar.vault.confine``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.vault.confine import open_regular, printable, read_fd

log = logging.getLogger(__name__)

# Obsidian's settings files hold a few settings: a file far larger is not one to read whole.
MAX_SETTINGS_BYTES = 1 << 20
# How long values read before stay in force while their file (or all of .obsidian) is missing.
# Longer than a sync takes to put it back; a vault that stopped being one of Obsidian's is
# followed after it.
SETTINGS_GRACE_S = 30 * 60.0


def read_settings_json(path: Path, encoding: str = "utf-8") -> Any:
    """The JSON of one of Obsidian's settings files, opened as a note is (never a blocking read of
    a pipe, a device is refused) and read up to ``MAX_SETTINGS_BYTES``: the file is the vault's,
    whatever it holds. Raises OSError or ValueError (RecursionError for absurd nesting)."""
    raw = read_fd(open_regular(path), MAX_SETTINGS_BYTES + 1)
    if len(raw) > MAX_SETTINGS_BYTES:
        raise ValueError(f"larger than {MAX_SETTINGS_BYTES} bytes")
    return json.loads(raw.decode(encoding))


# The plugins switched on: community plugins as a list of ids; core plugins as a list of ids
# (older Obsidian) or a map of id -> on (newer). Obsidian keeps a switched-off plugin's settings.
COMMUNITY_PLUGINS = Path(".obsidian/community-plugins.json")
CORE_PLUGINS = Path(".obsidian/core-plugins.json")


def switched_off(vault: Path, plugin: str, *, core: bool = False) -> bool:
    """Whether the vault's list of plugins switched on (core or community) leaves ``plugin`` out.
    False when there is no list, it cannot be read, or it does not name the plugin in the map
    form (as before: no list is no proof it is off)."""
    try:
        enabled = read_settings_json(vault / (CORE_PLUGINS if core else COMMUNITY_PLUGINS), "utf-8-sig")
    except (OSError, ValueError, RecursionError):
        return False
    if isinstance(enabled, list):
        return plugin not in enabled
    if core and isinstance(enabled, dict):
        return enabled.get(plugin) is False
    return False


# The settings of the plugins that make a note from a template of their own: the Daily notes core
# plugin ("template"), Periodic Notes (each period's "template", 0.x; "templatePath" in the
# calendar sets of 1.x).
DAILY_NOTES = Path(".obsidian/daily-notes.json")
PERIODIC_NOTES = Path(".obsidian/plugins/periodic-notes/data.json")
_PERIODS = ("daily", "weekly", "monthly", "quarterly", "yearly", "day", "week", "month", "quarter", "year")


def note_templates(vault: Path) -> list[str]:
    """The templates the Daily notes core plugin and Periodic Notes make notes from, as written
    ("Vorlagen/Tagesnotiz"), of the plugins not switched off; none of a file that cannot be read."""
    found: list[Any] = []
    if not switched_off(vault, "daily-notes", core=True):
        settings = _settings_or_none(vault / DAILY_NOTES)
        if isinstance(settings, dict):
            found.append(settings.get("template"))
    periodic = None if switched_off(vault, "periodic-notes") else _settings_or_none(vault / PERIODIC_NOTES)
    if isinstance(periodic, dict):
        sets = periodic.get("calendarSets")
        for each in [periodic, *(sets if isinstance(sets, list) else [])]:
            for period in _PERIODS:
                entry = each.get(period) if isinstance(each, dict) else None
                if isinstance(entry, dict) and entry.get("enabled", True) is not False:
                    found += [entry.get("template"), entry.get("templatePath")]
    return [t for t in found if isinstance(t, str) and t.strip()]


def _settings_or_none(path: Path) -> Any:
    try:
        return read_settings_json(path, "utf-8-sig")
    except (OSError, ValueError, RecursionError):
        return None


class SettingsFile:
    """The values one settings file gives (``extract`` of its JSON), as they are in force."""

    def __init__(
        self,
        path: Path,
        extract: Callable[[Any], list[str]],
        what: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.extract = extract
        self.what = what  # "Excluded files rules", "templates folder": as status names them
        self.clock = clock
        self.values: list[str] = []
        self._stamp: tuple[int, int] | None = None
        self._missing_since: float | None = None  # read before, not found since then (clock)
        self._missing_wall: float | None = None  # the same as wall-clock time (kept across a restart)
        self.trouble: str | None = None  # what is wrong with the file as last looked at

    def read(self) -> list[str]:
        """The values in force now, the file read again if it changed."""
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return self._missing()
        except OSError:
            return self.values  # cannot tell now (a share that fails): the values in force stay
        if self._missing_since is not None:  # back: read again, which says what is wrong with it now
            self._missing_since, self._missing_wall, self._stamp = None, None, None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self.values
        try:
            values = self.extract(read_settings_json(self.path))
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            # Said once per version of the file; the values in force stay (a note the user left
            # out is not indexed because the file could not be read this time).
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            log.warning("obsidian_settings_unreadable path=%s error=%s", self.path, printable(why))
            self._stamp = stamp
            n = len(self.values)
            stay = "stays" if n == 1 else "stay"
            kept = f"the {_rules(n)} read before {stay}" if n else "no rule of it applies"
            self.trouble = f"{self.path} cannot be read ({printable(why)}); {kept}"
            return self.values
        # Both at once: a read that hung past its deadline and ends later replaces the whole list.
        self._stamp, self.values = stamp, values
        self.trouble = None
        return values

    def _missing(self) -> list[str]:
        """No file: no values, except that values read before stay for ``SETTINGS_GRACE_S``
        after it went (said in ``trouble`` meanwhile)."""
        now = self.clock()
        if self.values and self._missing_since is None:
            self._missing_since, self._missing_wall = now, time.time()
            log.warning("obsidian_settings_missing path=%s rules_kept=%d", self.path, len(self.values))
        if self.values and self._missing_since is not None and now - self._missing_since < SETTINGS_GRACE_S:
            left = SETTINGS_GRACE_S - (now - self._missing_since)
            n = len(self.values)
            self.trouble = (
                f"{self.path} is missing; the {n} {self.what}{'' if n == 1 else 's'} read before "
                f"{'stays' if n == 1 else 'stay'} "
                f"in force until it is back, or for {max(1, round(left / 60))} more min"
            )
            return self.values
        if self.values:
            log.warning("obsidian_settings_gone path=%s rules_dropped=%d", self.path, len(self.values))
        self._stamp, self.values, self._missing_since, self._missing_wall = None, [], None, None
        self.trouble = None
        return []

    def take_over(self, before: SettingsFile) -> None:
        """The state of ``before`` (the same file, read by the rules a reload replaced)."""
        self.values, self._stamp, self.trouble = before.values, before._stamp, before.trouble
        self._missing_since, self._missing_wall = before._missing_since, before._missing_wall

    def kept(self) -> dict[str, Any]:
        """The values as last read, and since when (wall clock) the file is missing."""
        return {"filters": list(self.values), "missing_since": self._missing_wall}

    def resume(self, kept: Any) -> None:
        """At a start, the values a run before read (``kept``): in force while the file stays
        missing, for what is left of the grace since it went, or from now if it went while no
        daemon ran. A file that is there is read as ever and replaces them."""
        if self.values or not isinstance(kept, dict):
            return
        values = kept.get("filters")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values) or not values:
            return
        self.values = list(values)
        since = kept.get("missing_since")
        if isinstance(since, int | float) and not isinstance(since, bool):
            self._missing_wall = float(since)
            self._missing_since = self.clock() - max(0.0, time.time() - float(since))


def _rules(n: int) -> str:
    return f"{n} rule" if n == 1 else f"{n} rules"
