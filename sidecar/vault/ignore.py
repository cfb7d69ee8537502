"""Which notes to leave out: ``index.exclude`` (gitignore patterns), Obsidian's "Excluded files"
and the folder Obsidian's templates are kept in.

Paths are matched relative to the vault, with ``.md`` (the wiki is its folder ``<wikiSubfolder>/``),
so ``Templates/``, ``*.excalidraw.md``, ``/Archive`` and ``!Archive/keep.md`` mean what they mean
in a ``.gitignore`` (the last matching pattern decides). Obsidian's setting
(``.obsidian/app.json``, ``userIgnoreFilters``) holds path prefixes (``Archive/``) or regular
expressions written ``/…/``. Memory inboxes are never excluded. The templates folder (the
Templates core plugin's ``.obsidian/templates.json`` ``folder``, Templater's ``templates_folder``)
is left out as well (``index.obsidianTemplates``): a template is a form with placeholders, never
what the user did or wrote, and it matched every question of "what did I do". A plugin switched
off leaves its folder in, unless the Daily notes or Periodic Notes plugin makes notes from a
template in it (``settingsfile.note_templates``). Each settings file
is read with the same safeguards (``sidecar.vault.settingsfile``: read again when it changes, kept
while unreadable or missing for a while, across a restart too). Of the project it
imports only the settings files' reader (``sidecar.vault.settingsfile``), ``printable`` of the
confined reads and the Canvas file names (``sidecar.vault.canvas``).
"""

from __future__ import annotations

import itertools
import logging
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Obsidian's filters are regular expressions from the vault: not ours to trust. The regex engine
# takes a deadline per match; one that backtracks without end (/^(a|aa)+$/) would hold the GIL
# and freeze the daemon under the standard library's re.
import regex
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from sidecar.vault.canvas import is_canvas_name
from sidecar.vault.confine import printable
from sidecar.vault.settingsfile import SETTINGS_GRACE_S, SettingsFile, note_templates, switched_off

log = logging.getLogger(__name__)
# A filter matches a short path in microseconds; past this it is backtracking without end.
_REGEX_TIMEOUT_S = 0.05
__all__ = ["OWN_RULES", "SETTINGS_GRACE_S", "TEMPLATES_ORIGIN", "IgnoreRules"]  # the grace: its tests
APP_SETTINGS = Path(".obsidian/app.json")
OWN_RULES = "index.exclude"  # the origin of sidecar's own rules, as a rule describes itself
# The plugins that keep templates in a folder, the key of that folder in their settings, and the
# plugin's id in the list of core or community plugins switched on: a plugin switched off keeps
# its settings file, and its folder then holds the user's notes like any other.
TEMPLATE_SETTINGS = (
    (Path(".obsidian/templates.json"), "folder", ("templates", True)),
    (
        Path(".obsidian/plugins/templater-obsidian/data.json"),
        "templates_folder",
        ("templater-obsidian", False),
    ),
)
_PLUGIN_NAMES = {"templates": "Templates", "templater-obsidian": "Templater"}  # as Obsidian shows them
TEMPLATES_ORIGIN = "Obsidian templates folder"


@dataclass(frozen=True)
class _Rule:
    origin: str  # "index.exclude" | "Obsidian excluded files" | "Obsidian templates folder"
    text: str
    pattern: GitIgnoreSpecPattern | None = None
    regex: Any = None  # a compiled pattern of the regex engine
    # Set when the pattern ran past its deadline once: from then on it decides nothing.
    stuck: list[bool] = field(default_factory=lambda: [False], compare=False)

    def decides(self, path: str) -> bool | None:
        """True: excludes ``path``; False: a negation takes it back in; None: no opinion."""
        if self.pattern is not None:
            if self.pattern.include is None or self.pattern.match_file(path) is None:
                return None
            return bool(self.pattern.include)
        if self.regex is not None:
            if self.stuck[0]:
                return None
            try:
                return True if self.regex.search(path, timeout=_REGEX_TIMEOUT_S) else None
            except TimeoutError:
                self.stuck[0] = True
                log.warning("obsidian_filter_ignored filter=%s reason=too slow", printable(self.text))
                return None
        return True if path.startswith(self.text) else None

    def describe(self) -> str:
        return f"{self.origin}: {self.text}"


def _folder(value: Any) -> str:
    """A settings folder as Obsidian normalises it ("\\" as "/", no "./" nor slashes around it)."""
    if not isinstance(value, str):
        return ""
    folder = unicodedata.normalize("NFC", value.strip().replace("\\", "/")).strip("/")
    while folder.startswith("./"):
        folder = folder[2:].lstrip("/")
    return "" if folder == "." else folder


def _filters(settings: Any) -> list[str]:
    value = settings.get("userIgnoreFilters")
    return [f for f in value if isinstance(f, str)] if isinstance(value, list) else []


def _template_folder(key: str) -> Callable[[Any], list[str]]:
    def extract(settings: Any) -> list[str]:
        folder = _folder(settings.get(key))
        # No folder set: the templates lie anywhere, and the vault is not left out.
        return [f"{folder}/"] if folder else []

    return extract


def _compile(filters: Any) -> tuple[list[_Rule], list[str]]:
    """Obsidian's ``userIgnoreFilters`` as rules, and those that are no regular expression."""
    rules: list[_Rule] = []
    invalid: list[str] = []
    for item in filters if isinstance(filters, list) else []:
        if not isinstance(item, str) or not item.strip():
            continue
        f = unicodedata.normalize("NFC", item.strip())
        if len(f) > 2 and f.startswith("/") and f.endswith("/"):
            try:
                rules.append(_Rule("Obsidian excluded files", f, regex=regex.compile(f[1:-1])))
            except (regex.error, RecursionError, ValueError):
                log.warning("obsidian_filter_invalid filter=%s", printable(f))
                invalid.append(f)
        else:
            rules.append(_Rule("Obsidian excluded files", f))
    return rules, invalid


class IgnoreRules:
    """The exclusion rules of one vault; ``match`` names the rule that leaves a note out."""

    def __init__(
        self,
        patterns: Sequence[str],
        vault: Path | None,
        obsidian: bool = True,
        clock: Callable[[], float] = time.monotonic,
        templates: bool = True,
    ) -> None:
        self.patterns = tuple(patterns)
        self.clock = clock
        self.vault = vault
        self.obsidian = obsidian
        self.templates = templates
        self._own: list[_Rule] = []
        for text in self.patterns:
            line = unicodedata.normalize("NFC", text.strip())
            if not line or line.startswith("#"):
                continue
            self._own.append(_Rule(OWN_RULES, line, pattern=GitIgnoreSpecPattern(line)))

        def now() -> float:  # the clock as set now (tests set it after construction)
            return self.clock()

        self._app_file: SettingsFile | None = None
        if obsidian and vault is not None:
            self._app_file = SettingsFile(vault / APP_SETTINGS, _filters, "Excluded files rule", now)
        self._app_texts: list[str] = []
        self._app: list[_Rule] = []
        self._invalid: str | None = None  # filters that are no regular expression, for status
        # settings file (relative) -> its reader, and the templates folder it names
        self._template_files: dict[str, SettingsFile] = {}
        self._template_plugins: dict[str, tuple[str, bool]] = {}  # settings file -> (plugin id, core)
        if templates and vault is not None:
            for rel, key, plugin in TEMPLATE_SETTINGS:
                self._template_files[rel.as_posix()] = SettingsFile(
                    vault / rel, _template_folder(key), "templates folder rule", now
                )
                self._template_plugins[rel.as_posix()] = plugin
        self._template_state: dict[str, str] = {}  # settings file (relative) -> its folder ("Vorlagen/")
        # settings file (relative) -> the folder it names, indexed as notes: its plugin is off
        self._template_off: dict[str, str] = {}

    @property
    def trouble(self) -> str | None:
        """What is wrong with Obsidian's settings as last read (unreadable, missing for now,
        filters that are no regular expression), for status: a log line
        alone left the user wondering why a folder they excluded in Obsidian is searched."""
        files = [self._app_file, *self._template_files.values()]
        parts = [f.trouble for f in files if f is not None and f.trouble]
        parts += [self._invalid] if self._invalid else []
        return "; ".join(parts) or None

    def _obsidian_rules(self) -> list[_Rule]:
        if self._app_file is None:
            return []
        texts = self._app_file.read()
        if texts == self._app_texts:
            return self._app
        rules, invalid = _compile(texts)
        if rules:
            log.info("obsidian_excluded_files count=%d", len(rules))
        self._app_texts, self._app, self._invalid = texts, rules, None
        if invalid:
            shown = ", ".join(printable(f[:80]) for f in invalid[:3]) + (" …" if len(invalid) > 3 else "")
            self._invalid = (
                f"{len(invalid)} of Obsidian's Excluded files filters are no regular expression and leave "
                f"nothing out: {shown}"
            )
        return rules

    def carry_over(self, before: IgnoreRules) -> None:
        """Obsidian's rules as ``before`` (the rules replaced by a configuration reload) read
        them: a settings file missing at the reload keeps them for what is left of its grace."""
        if self._app_file is not None and before._app_file is not None and self.vault == before.vault:
            self._app_file.take_over(before._app_file)
            self._app_texts, self._app, self._invalid = before._app_texts, before._app, before._invalid
        if self.templates and before.templates and self.vault == before.vault:
            for rel, file in self._template_files.items():
                if rel in before._template_files:
                    file.take_over(before._template_files[rel])
            self._template_state = dict(before._template_state)
            self._template_off = dict(before._template_off)

    def kept(self) -> dict[str, Any] | None:
        """Obsidian's rules as last read, and since when (wall clock) their file is missing, and
        the templates folders so, for the index to keep: a daemon started while a file is missing
        uses them (``resume``)."""
        if self.vault is None or (self._app_file is None and not self._template_files):
            return None
        out: dict[str, Any] = {"vault": str(self.vault)}
        if self._app_file is not None:
            out.update(self._app_file.kept())
        templates = {rel: file.kept() for rel, file in self._template_files.items() if file.values}
        if templates:
            out["templates"] = templates
        return out

    def resume(self, kept: dict[str, Any]) -> None:
        """At a start, the rules a run before read (``kept``): in force while the settings file
        stays missing, for what is left of the grace since it went, or from now if it went while
        no daemon ran. A settings file that is there is read as ever and replaces them. A restart
        while a sync tool replaced .obsidian indexed every excluded note at once."""
        if self.vault is None or kept.get("vault") != str(self.vault):
            return
        if self._app_file is not None and not self._app:
            self._app_file.resume(kept)
            self._app, _ = _compile(self._app_file.values)
            self._app_texts = list(self._app_file.values)
        templates = kept.get("templates")
        for rel, file in self._template_files.items():
            entry = templates.get(rel) if isinstance(templates, dict) else None
            if not isinstance(entry, dict):
                continue
            file.resume(entry)
            if len(file.values) == 1:
                self._template_state[rel] = file.values[0]

    def refresh(self) -> None:
        """Re-read Obsidian's settings if they changed (called once per sweep)."""
        self._obsidian_rules()
        self._template_rules()

    def rules(self) -> list[str]:
        return [r.describe() for r in [*self._own, *self._app, *self._templates()]]

    def _templates(self) -> list[_Rule]:
        """The templates folders in force (one rule per folder, named by either plugin)."""
        return [_Rule(TEMPLATES_ORIGIN, f) for f in dict.fromkeys(self._template_state.values())]

    def _template_rules(self) -> None:
        """Read the template plugins' settings that changed; a folder read applies at once."""
        for rel, file in self._template_files.items():
            plugin, core = self._template_plugins[rel]
            values = file.read()
            folder = values[0] if values else None
            # Switched off, the plugin's folder holds notes like any other, unless the Daily
            # notes or Periodic Notes plugin still makes notes from a template in it: the folder
            # is then still one of forms (the whole of it: its other templates are forms too).
            off = (
                folder is not None
                and self.vault is not None
                and switched_off(self.vault, plugin, core=core)
                and not _holds_a_template(folder, note_templates(self.vault))
            )
            if off and folder is not None:
                self._template_off[rel] = folder
                folder = None
                if rel in self._template_state:
                    log.info("templates_folder_off path=%s plugin=%s", file.path, plugin)
            else:
                self._template_off.pop(rel, None)
            if folder is None:
                self._template_state.pop(rel, None)
            elif self._template_state.get(rel) != folder:
                log.info("templates_folder path=%s folder=%s", file.path, printable(folder))
                self._template_state[rel] = folder

    def templates_indexed(self, indexed: Callable[[str], bool], wiki_subfolder: str) -> list[dict[str, str]]:
        """The templates folders indexed as notes because their plugin is switched off in
        Obsidian (``folder``, the ``plugin``'s name, the settings ``file`` naming the folder), for
        status: the folder came back into the index and the count of notes jumped, unexplained.
        Only a folder with a note in the index (``indexed``: whether a note is indexed under a key
        prefix): one the other templates plugin names (Templater beside the core plugin switched
        off), one in Obsidian's Excluded files or ``index.exclude``, or one that is missing or
        empty was said indexed and excluded at once. The index is asked, never the disk: status
        asks at every call, and a walk of a share that hangs hung it (the index follows the disk
        at the next sweep)."""
        if not self.templates or self.vault is None:
            return []
        return [
            {"folder": folder, "plugin": _PLUGIN_NAMES[self._template_plugins[rel][0]], "file": rel}
            # A copy: the sweep's thread may read the settings anew meanwhile.
            for rel, folder in list(self._template_off.items())
            if any(indexed(prefix) for prefix in _key_prefixes(folder, wiki_subfolder))
        ]

    def match(self, vault_rel: str) -> str | None:
        """The rule that excludes a note at ``vault_rel`` (POSIX, with .md), or None. Names and
        rules are compared in one Unicode form (NFC): a folder a Mac named in NFD is the folder
        the user excluded by typing its name."""
        vault_rel = unicodedata.normalize("NFC", vault_rel)
        decided: _Rule | None = None
        for rule in self._own:
            verdict = rule.decides(vault_rel)
            if verdict is not None:
                decided = rule if verdict else None
        if decided is not None:
            return decided.describe()
        for rule in [*self._app, *self._templates()]:
            if rule.decides(vault_rel):
                return rule.describe()
        return None

    def match_key(self, key: str, wiki_subfolder: str) -> str | None:
        """The rule that excludes the note behind an index key (memory keys: never)."""
        rel = _vault_rel(key, wiki_subfolder)
        return None if rel is None else self.match(rel)


def _holds_a_template(folder: str, templates: Sequence[str]) -> bool:
    """Whether a templates folder ("Vorlagen/") holds one of ``templates`` ("Vorlagen/Tagesnotiz",
    written with or without ".md", "/" or "\\" as it was typed)."""
    inside = unicodedata.normalize("NFC", folder.strip("/")) + "/"
    for t in templates:
        path = unicodedata.normalize("NFC", t.strip().replace("\\", "/").lstrip("/"))
        if path.startswith(inside):
            return True
    return False


def _key_prefixes(folder: str, wiki_subfolder: str) -> list[str]:
    """The index key prefixes of the notes in the vault's ``folder`` ("Vorlagen/"): its vault
    notes (ending in "/": "Tmpl/" holds nothing of "Tmpl2/"), and wiki notes where the folder is
    the wiki, lies in it or around it; each in NFC (as the folder is read) and NFD (as a Mac may
    name it on disk: keys keep the name as it is), part by part: a folder named in NFD by a Mac
    inside one typed in NFC holds keys in neither form whole."""
    inside = folder.strip("/")
    wiki = wiki_subfolder.strip("/")
    if not inside:
        return []
    if inside == wiki or inside.startswith(wiki + "/"):
        rest = inside[len(wiki) :].strip("/")
        prefixes = [f"wiki/{rest}/" if rest else "wiki/"]
    else:
        prefixes = [f"vault/{inside}/", *(["wiki/"] if wiki.startswith(inside + "/") else [])]
    return list(dict.fromkeys(spelled for p in prefixes for spelled in _each_form(p)))


def _each_form(prefix: str) -> list[str]:
    """``prefix`` with each of its parts in NFC and in NFD, every mix of them (at most 64: a
    deeper path of non-ASCII names is read in whole forms past its sixth such part)."""
    parts = prefix.split("/")
    forms = [sorted({unicodedata.normalize(f, p) for f in ("NFC", "NFD")}) for p in parts]
    if sum(len(f) > 1 for f in forms) > 6:
        return list(dict.fromkeys(unicodedata.normalize(f, prefix) for f in ("NFC", "NFD")))
    return ["/".join(mix) for mix in itertools.product(*forms)]


def _vault_rel(key: str, wiki_subfolder: str) -> str | None:
    """The vault-relative file name of the note behind an index key (memory keys: None)."""
    source, _, rest = key.partition("/")
    if source == "memory" or not rest:
        return None
    rel = f"{wiki_subfolder.strip('/')}/{rest}" if source == "wiki" else rest
    return rel if is_canvas_name(rel) else rel + ".md"  # a Canvas's key keeps its name
