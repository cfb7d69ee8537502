"""The layered loader: CLI flag > ``SIDECAR_*`` environment > YAML file > default, each value
checked, every problem reported at once, and the folders and socket path resolved."""

import contextlib
import dataclasses
import hashlib
import os
import re
import threading
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from sidecar.config.embedding import MODEL_DEFAULTS
from sidecar.config.fields import env_name
from sidecar.config.root import Config
from sidecar.config.settings import Setting, _coerce, settings
from sidecar.contracts.errors import ConfigError

# A Unix socket path must fit sun_path (104 bytes on macOS, 108 on Linux) with a margin.
_MAX_SOCKET_PATH = 100


def _replace_at(obj: Any, attrs: tuple[str, ...], value: Any) -> Any:
    if len(attrs) == 1:
        return dataclasses.replace(obj, **{attrs[0]: value})
    return dataclasses.replace(obj, **{attrs[0]: _replace_at(getattr(obj, attrs[0]), attrs[1:], value)})


def _with_model(cfg: Config, origins: dict[str, str]) -> Config:
    """The chosen model's own settings where none were given (their origin says so)."""
    model = cfg.embedder.model
    attrs = {s.dotted: s.attrs for s in settings()}
    for dotted, value in MODEL_DEFAULTS.get(model, {}).items():
        if origins[dotted] == "default":
            cfg = _replace_at(cfg, attrs[dotted], value)
            origins[dotted] = f"model {model}"
    return cfg


# Keys that were renamed, old -> new: a file or environment written for an older release still
# loads (with a warning saying what to write instead) rather than failing as an unknown key.
RENAMED = {
    # It counts notes since the rare-word count moved to whole notes.
    "search.rareTermChunks": "search.rareTermNotes",
    "index.debounceMs": "watch.debounceMs",  # with the other settings of file events
}
# Settings that are gone, and why: a file from an older version still loads (a warning says to
# delete the key). As an unknown key it stopped the daemon (exit 3, which a service does not
# restart) with a message that read like a typo.
RETIRED = {
    "search.vectorMinSpread": "fusion calibrates each arm's scores on their own scale now",
    "embedder.optimization": "the model's kernels are chosen for the CPU at its first start",
}

# Variables of the project's own tooling (CI's venv), not configuration keys: never a warning.
# A path written as on Windows: a drive letter (C:\\Users, C:/Users) or a UNC share (\\\\server).
_WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")
_QUOTED_WINDOWS_PATH = re.compile(r"""["'](?:[A-Za-z]:[\\/]|\\\\)""")
_WINDOWS_TODO = (
    "sidecar runs on Linux and macOS; write the folder's path on this machine, e.g. "
    "/home/you/Obsidian/Main or ~/Obsidian/Main (a vault on a Windows share: its mount point)"
)
_NOT_KEYS = frozenset({"SIDECAR_CONFIG", "SIDECAR_CI_VENV", "SIDECAR_PARENT_PID"})  # last: runtime.orphan
EXAMPLE_HINT = "`sidecar config example` prints every key with its default"


def file_sets(path: Path, dotted: str) -> bool:
    """Whether the file at ``path`` gives the key ``dotted`` (``vault.path``); False when it cannot
    be read or parsed (a file cut short)."""
    try:
        return dotted in _read_yaml(path)
    except ConfigError:
        return False


def _flatten(data: Mapping[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: key {key!r} is not text (expected a name such as vault)")
        dotted = prefix + key
        if isinstance(value, Mapping):
            out.update(_flatten(value, where, dotted + "."))
        else:
            out[dotted] = value
    return out


def _read_yaml(path: Path, warnings: list[str] | None = None) -> dict[str, Any]:
    """The file's keys, flattened; a key given twice in one mapping is said in ``warnings`` (YAML
    keeps the last one silently: the first was what a user edited)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the configuration file is not UTF-8") from exc
    import yaml  # only when there is a file: a thin client without one starts faster

    twice: list[str | _Merged] = []
    merged_at: dict[int, tuple[_Merged, Any]] = {}  # id of a merged section -> its record, node

    def section(value: Any) -> bool:  # a mapping, or nothing at all (`vault:` left empty)
        return isinstance(value, yaml.MappingNode) or (
            isinstance(value, yaml.ScalarNode) and value.tag == "tag:yaml.org,2002:null"
        )

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # A section given twice (`vault:` on two lines) is read as one, key by key: YAML keeps
            # the second whole, which dropped the first's vault.path; an error instead stopped
            # configs that ran for years (the example with a `vault:` snippet appended). A key
            # in both copies is then a key given twice, the later one used, said below.
            pairs: list[tuple[Any, Any]] = []
            seen: dict[Any, tuple[int, int]] = {}  # key -> its first line, its place in pairs
            for key_node, value in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                at = key_node.start_mark.line + 1
                if key is None or key not in seen:
                    if key is not None:
                        seen[key] = (at, len(pairs))
                    pairs.append((key_node, value))
                    continue
                first, place = seen[key]
                earlier = pairs[place][1]
                if (
                    section(earlier)
                    and section(value)
                    and (isinstance(earlier, yaml.MappingNode) or isinstance(value, yaml.MappingNode))
                ):
                    keys = [n for v in (earlier, value) if isinstance(v, yaml.MappingNode) for n in v.value]
                    mark = earlier if isinstance(earlier, yaml.MappingNode) else value
                    merged = yaml.MappingNode(mark.tag, keys, mark.start_mark, mark.end_mark, mark.flow_style)
                    pairs[place] = (pairs[place][0], merged)
                    record = merged_at[id(earlier)][0] if id(earlier) in merged_at else None
                    if record is None:
                        record = _Merged(key, [first])
                        twice.append(record)
                    record.lines.append(at)
                    merged_at[id(merged)] = (record, merged)  # the node kept: its id stays its own
                    continue
                inside = merged_at.get(id(node))
                if inside is not None:  # a key in two copies of a section: said in the section's line
                    inside[0].keys.setdefault(key, [first]).append(at)
                else:
                    lines = f"lines {first} and {at}"
                    twice.append(f"{path}: {key!r} given twice in one section ({lines}): the last is used")
                pairs[place] = (pairs[place][0], value)
            node = yaml.MappingNode(node.tag, pairs, node.start_mark, node.end_mark, node.flow_style)
            return super().construct_mapping(node, deep=deep)

    try:
        data = yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        # One line, as every user error: where, and what the parser missed.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {what}{_yaml_hint(what, line)}") from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    if warnings is not None:
        warnings.extend(w if isinstance(w, str) else w.said(path) for w in twice)
    return _flatten(data, str(path))


@dataclasses.dataclass
class _Merged:
    """A section given more than once in a file (read as one), and its keys given in more than one
    copy: one warning for all of it, not one for the section and one per key."""

    key: Any
    lines: list[int]
    keys: dict[Any, list[int]] = dataclasses.field(default_factory=dict)  # key -> its lines

    def said(self, path: Path) -> str:
        times = "twice" if len(self.lines) == 2 else f"{len(self.lines)} times"
        text = f"{path}: {self.key!r} given {times} (lines {_and(self.lines)}): read as one section"
        if self.keys:
            keys = ", ".join(f"{k!r} (lines {_and(lines)})" for k, lines in self.keys.items())
            text += f", where {keys} given more than once: the last is used"
        return text + "; write its keys under one"


def _and(lines: list[int]) -> str:
    """``1, 3 and 5``."""
    return ", ".join(str(n) for n in sorted(set(lines))[:-1]) + f" and {max(lines)}"


# Each XDG folder sidecar uses and its default below the user's home (XDG Base Directory
# specification).
XDG_DEFAULTS = {"XDG_CONFIG_HOME": ".config", "XDG_STATE_HOME": ".local/state"}


def xdg_base(env: Mapping[str, str], name: str, home: Path | None = None) -> Path:
    """The folder the XDG variable ``name`` names: its value when it is an absolute path (a
    relative one is to be ignored, XDG Base Directory specification, as systemd does for its
    units), else its default below ``home`` (the user's home by default). The one rule for the
    configuration file, the state folder, and the service's unit folder and view of both."""
    base = env.get(name, "")
    if base and Path(base).is_absolute():
        return Path(base)
    return (home if home is not None else Path.home()) / XDG_DEFAULTS[name]


def _yaml_hint(problem: str, line: str = "") -> str:
    """What to do about a YAML error whose own words do not say it (``line``: the line it is in)."""
    if "escape" in problem and _QUOTED_WINDOWS_PATH.search(line):
        # Quotes or forward slashes would only lead to the Windows-path refusal: say that now.
        return f" (a Windows path: {_WINDOWS_TODO})"
    if "escape" in problem:  # "C:\Users\me" in double quotes: \U starts an escape sequence
        return (
            " (inside double quotes a backslash starts an escape sequence: write the value in single "
            "quotes, or a path with forward slashes)"
        )
    if "'\\t'" in problem:  # "found character '\t' that cannot start any token"
        return " (YAML does not allow tabs for indentation: indent with spaces)"
    return ""


def default_config_file(env: Mapping[str, str]) -> Path:
    """The file every command reads when none is named (no --config, no SIDECAR_CONFIG):
    $XDG_CONFIG_HOME/sidecar/config.yaml (``xdg_base``)."""
    return xdg_base(env, "XDG_CONFIG_HOME") / "sidecar" / "config.yaml"


def ignored_config_file(flag: str | None, env: Mapping[str, str], cwd: Path) -> str | None:
    """A warning when no file is named and XDG_CONFIG_HOME is set but relative, and so ignored,
    while the file it named from this folder is there: earlier releases read it, and without a
    word the daemon started without its vault. None when nothing is there to be missed."""
    if _default_config_path(flag, env)[1]:
        return None  # a file named by --config or SIDECAR_CONFIG
    base = env.get("XDG_CONFIG_HOME", "")
    if not base or Path(base).is_absolute():
        return None
    missed = cwd / base / "sidecar" / "config.yaml"
    try:
        if not missed.is_file():
            return None
    except OSError:  # a folder that cannot be looked into: nothing read from it either way
        return None
    return (
        f"XDG_CONFIG_HOME={base!r} is not an absolute path and is ignored (XDG Base Directory "
        f"specification): {missed} is no longer read, "
        f"{default_config_file(env)} is; set XDG_CONFIG_HOME to an absolute path, or name the "
        "file with --config or SIDECAR_CONFIG"
    )


def _config_to_read(
    flag: str | None, env: Mapping[str, str], cwd: Path, warnings: list[str]
) -> tuple[Path, bool]:
    """``_default_config_path``, and the warning of a relative XDG_CONFIG_HOME when no file is named."""
    path, required = _default_config_path(flag, env)
    ignored = ignored_config_file(flag, env, cwd)
    if ignored is not None:
        warnings.append(ignored)
    return path, required


def config_file_path(flag: str | None, env: Mapping[str, str]) -> Path:
    """The configuration file a command with this ``--config`` (or none) reads, whether it exists
    or not: `sidecar config path`, for the steps that write it."""
    return _default_config_path(flag, env)[0]


def holds_nothing(path: Path) -> bool:
    """Whether the file at ``path`` has nothing but blank and comment lines (one being written, or
    emptied by mistake: read as all defaults, it would drop every exclusion). False when it cannot
    be read (a missing file is the loader's error)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def _default_config_path(flag: str | None, env: Mapping[str, str]) -> tuple[Path, bool]:
    """The config file to read and whether it must exist (named explicitly)."""
    if flag:
        return Path(flag).expanduser(), True
    if env.get("SIDECAR_CONFIG"):
        return Path(env["SIDECAR_CONFIG"]).expanduser(), True
    return default_config_file(env), False


def _default_socket(home: Path, env: Mapping[str, str], uid: int) -> Path:
    """$XDG_RUNTIME_DIR/sidecar-<hash of home>/, else <home>/run/, else /tmp/sidecar-<uid>/ if too long."""
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:10]
    runtime = env.get("XDG_RUNTIME_DIR")
    candidate = (
        Path(runtime) / f"sidecar-{digest}" / "sidecar.sock" if runtime else home / "run" / "sidecar.sock"
    )
    if len(os.fsencode(candidate)) <= _MAX_SOCKET_PATH:
        return candidate
    return Path("/tmp") / f"sidecar-{uid}" / f"{digest}.sock"  # noqa: S108 - private 0700 dir, owner checked


def _build(cls: type, values: Mapping[tuple[str, ...], Any], attrs: tuple[str, ...] = ()) -> Any:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        path = (*attrs, f.name)
        if dataclasses.is_dataclass(f.type):
            kwargs[f.name] = _build(typing.cast(type, f.type), values, path)
        elif path in values:
            kwargs[f.name] = values[path]
    return cls(**kwargs)


def _unknown_key(where: Path, dotted: str, raw: Any, known: Mapping[str, Setting]) -> str:
    """The message for a key that is not a setting, with the likeliest intended one."""
    section = [k for k in known if k.startswith(dotted + ".")]
    if section:  # `vault: /path` written where a section belongs
        first = section[0].split(".")[-1]
        return (
            f"{where}: {dotted} = {raw!r}: {dotted} is a section, not a value; write it as "
            f"`{dotted}:` with `{first}: {raw}` indented on the next line ({section[0]})"
        )
    import difflib  # only for a wrong key: a thin client starts faster without it

    close = difflib.get_close_matches(dotted, list(known), n=1, cutoff=0.75)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{where}: unknown key {dotted!r} (value {raw!r}); {hint}{EXAMPLE_HINT}"


def _problems(problems: list[str], warnings: list[str]) -> ConfigError:
    # The warnings too: shown only once the errors were mended, a renamed key came to light a
    # round of editing later ("every problem at once").
    also = "".join(f"\nwarning: {w}" for w in warnings)
    if len(problems) == 1:
        return ConfigError(problems[0] + also)
    return ConfigError(f"{len(problems)} configuration problems:\n  " + "\n  ".join(problems) + also)


class _Layers:
    """Values gathered from the file, the environment and the flags, and what was wrong."""

    def __init__(self, known: dict[str, Setting], origins: dict[str, str]) -> None:
        self.known = known
        self.values: dict[tuple[str, ...], Any] = {}
        self.origins = origins
        self.problems: list[str] = []  # every one is reported at once
        self.warnings: list[str] = []
        # Those of keys an older release wrote (renamed or retired): the query commands an agent's
        # hook runs on every prompt leave them to `config check`, doctor, status and the log.
        self.outdated: list[str] = []
        self.setup_notes: list[str] = []  # said by config check, serve and doctor only
        self.file_defaults: set[str] = set()  # keys the file gives at their default value

    def put(self, setting: Setting, raw: Any, where: str, origin: str, base: Path) -> None:
        try:
            value = _coerce(setting, raw, where)
        except ConfigError as exc:
            self.problems.append(str(exc))
            return
        if isinstance(value, Path) and isinstance(raw, str) and _WINDOWS_PATH.match(raw):
            # Read as a relative path, it was joined onto the config file's folder and accepted.
            self.problems.append(
                f"{where}: {setting.dotted} = {raw!r} is a Windows path (a drive letter or a \\\\server "
                f"share): {_WINDOWS_TODO}"
            )
            return
        if isinstance(value, Path) and not value.is_absolute():
            value = base / value
        self.values[setting.attrs] = value
        self.origins[setting.dotted] = origin

    def renamed(self, where: str, old: str, new: str, both: bool) -> bool:
        """Whether a renamed key's value is taken (under ``new``; a warning says what to write
        instead): not when the new name is given too, which is a problem (which one is meant?)."""
        if both:
            self.problems.append(f"{where}: {old} and {new} are one setting: keep {new}")
            return False
        self.outdated.append(f"{where}: {old} is now {new}; its value is used, rename it there")
        self.warnings.append(self.outdated[-1])
        return True

    def read_file(self, path: Path, source_file: Path) -> None:
        values = _read_yaml(path, self.warnings)
        for written, raw in values.items():
            dotted = RENAMED.get(written, written)
            if dotted != written and not self.renamed(str(path), written, dotted, dotted in values):
                continue
            setting = self.known.get(dotted)
            if dotted in RETIRED:
                self.outdated.append(
                    f"{path}: {dotted} is no longer a setting ({RETIRED[dotted]}); it is ignored: delete it"
                )
                self.warnings.append(self.outdated[-1])
            elif setting is None:
                self.problems.append(_unknown_key(path, dotted, raw, self.known))
            else:
                self.put(setting, raw, str(path), f"file {source_file}", source_file.parent)
                if _is_default(setting, raw):
                    self.file_defaults.add(dotted)

    def read_env(self, env: Mapping[str, str], cwd: Path) -> None:
        by_env = {env_name(s.dotted): s for s in self.known.values()}
        renamed = {env_name(old): env_name(new) for old, new in RENAMED.items()}
        for written, raw in env.items():
            if not written.startswith("SIDECAR_") or written in _NOT_KEYS:
                continue
            name = renamed.get(written, written)
            if name != written and not self.renamed("environment", written, name, name in env):
                continue
            setting = by_env.get(name)
            if setting is None:  # a typo or another tool's variable: ignored, not fatal
                import difflib

                close = difflib.get_close_matches(name, list(by_env), n=1, cutoff=0.8)
                hint = f" (did you mean {close[0]}?)" if close else ""
                self.warnings.append(f"environment: {name} is not a sidecar setting and is ignored{hint}")
            else:
                self.put(setting, raw, f"environment {name}", f"environment {name}", cwd)

    def read_flags(self, flags: Mapping[str, Any], cwd: Path) -> None:
        for dotted, raw in flags.items():
            if raw is not None:
                self.put(
                    self.known[dotted],
                    str(raw) if isinstance(raw, Path) else raw,
                    "command line",
                    "flag",
                    cwd,
                )


def daemon_address(
    config_file: str | None,
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Config:
    """For a thin client whose configuration file does not load: the defaults, with only where
    the daemon is (``home``, ``socket``) taken from the file (from its plain top-level lines when
    it no longer parses as YAML). The daemon keeps serving with the configuration it started
    with; one typo must not cut every client (each agent's MCP shim) off from it."""
    env = dict(os.environ) if env is None else env
    path, required = _default_config_path(config_file, env)
    if path is not None and required and not _file_exists(path, required, []):
        raise ConfigError(f"{path}: configuration file not found")  # a file named is not a guess
    where: dict[str, Any] = {}
    if path is not None:
        try:
            raw: Mapping[str, Any] = _read_yaml(path)
        except ConfigError:
            raw = _top_level_lines(path)  # not YAML any more: its plain `home:` / `socket:` lines
        with contextlib.suppress(OSError, ValueError):
            for key in ("home", "socket"):
                value = None if env.get(env_name(key)) else raw.get(key)  # the environment wins
                if isinstance(value, str) and value.strip() and "\0" not in value:
                    full = Path(value).expanduser()  # relative: to the real file, as load_config
                    where[key] = str(full if full.is_absolute() else path.resolve().parent / full)
    given = {k: v for k, v in flags.items() if v is not None}
    cfg = load_config(flags={**where, **given}, env=env, cwd=cwd, read_file=False)
    # Still the file the daemon is started with (the "no daemon" hint names it, fixed or not).
    return dataclasses.replace(cfg, source_file=path.resolve()) if path is not None else cfg


_TOP_LEVEL = re.compile(
    r"^(home|socket):[ \t]*"  # a top-level key at the start of a line
    r"(?:\"([^\"]*)\"|'([^']*)'|([^#\s][^#]*?))"  # its value: double-, single- or unquoted
    r"[ \t]*(?:#.*)?$",
    re.M,
)


def _top_level_lines(path: Path) -> dict[str, str]:
    """``home:`` and ``socket:`` written on lines of their own at the top level of a file that no
    longer parses as YAML (a typo elsewhere), so clients still find the daemon."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return {m[1]: m[2] or m[3] or m[4] for m in _TOP_LEVEL.finditer(text)}


def _file_exists(path: Path, required: bool, warnings: list[str]) -> bool:
    """Whether the configuration file is there. A folder on its way this user may not enter (the
    default file under another user's home, after ``sudo -u``): a named file is an error that
    says so, the default one a warning (it was a traceback)."""
    try:
        return path.exists()
    except OSError as exc:
        problem = f"{path}: the configuration file cannot be checked: {exc.strerror or exc}"
        if required:
            raise ConfigError(problem) from exc
        warnings.append(f"{problem}; not read (name one with --config or SIDECAR_CONFIG)")
        return False


def load_config(
    *,
    config_file: str | None = None,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    read_file: bool = True,
) -> Config:
    """Build the effective configuration. ``flags`` maps dotted keys (``vault.path``) to raw values."""
    env = dict(os.environ) if env is None else env
    cwd = cwd or Path.cwd()
    known = {s.dotted: s for s in settings()}
    layers = _Layers(known, origins={s.dotted: "default" for s in known.values()})

    path, required = _config_to_read(config_file, env, cwd, layers.warnings) if read_file else (None, False)
    source_file: Path | None = None
    if path is not None and _file_exists(path, required, layers.warnings):
        source_file = path.resolve()
        layers.read_file(path, source_file)
    elif path is not None and required:
        raise ConfigError(f"{path}: configuration file not found")
    layers.read_env(env, cwd)
    layers.read_flags(flags or {}, cwd)
    values, origins, problems, warnings = layers.values, layers.origins, layers.problems, layers.warnings

    if problems:
        raise _problems(problems, warnings)
    cfg = _with_model(_build(Config, values), origins)
    # Every command loads the configuration (status, search, each MCP shim's start): a hung
    # share must not hold them. A share slower than this keeps the path as written (only a path
    # through a symlink differs; its mount state is judged on the real path anyway).
    wait = min(_RESOLVE_WAIT_S, cfg.watch.probe_timeout_seconds)
    home = cfg.home.expanduser()
    home = _resolved(home if home.is_absolute() else cwd / home, wait)
    vault = cfg.vault
    if vault.path is not None:
        path = vault.path.expanduser()
        vault = dataclasses.replace(vault, path=_resolved(path, wait))
    wiki = vault.wiki_subfolder
    if Path(wiki).expanduser().is_absolute():
        # A full path is taken when it names a folder inside the vault (as written or resolved);
        # anything else was silently read as relative, a folder nobody meant.
        full, base = Path(wiki).expanduser(), vault.path
        if base is not None and not full.is_relative_to(base):
            full = _resolved(full, wait)
        wiki = full.relative_to(base).as_posix() if base is not None and full.is_relative_to(base) else ""
    wiki = wiki.strip("/")
    if not wiki or ".." in Path(wiki).parts or wiki.startswith("."):
        raise ConfigError(
            f"{_where(origins, 'vault.wikiSubfolder')}: vault.wikiSubfolder = {vault.wiki_subfolder!r}: "
            "must be a relative folder inside the vault"
        )
    vault = dataclasses.replace(vault, wiki_subfolder=wiki)
    _home_in_vault(home, vault.path, layers)
    socket = cfg.socket.expanduser() if cfg.socket else _default_socket(home, env, os.getuid())
    if len(os.fsencode(socket)) > _MAX_SOCKET_PATH + 4:
        raise ConfigError(f"socket = {str(socket)!r}: path too long for a Unix socket")
    for pattern in cfg.index.exclude:
        line = pattern.strip()
        if line and not line.startswith("#"):
            try:  # as the index reads it: a pattern it cannot read failed the start with a traceback
                GitIgnoreSpecPattern(line)
            except (ValueError, TypeError) as exc:
                raise ConfigError(
                    f"{_where(origins, 'index.exclude')}: index.exclude pattern {pattern!r} is not a "
                    f"gitignore pattern ({exc})"
                ) from None
    if cfg.chunking.max_tokens > cfg.embedder.max_length - 2:
        # Two keys, each perhaps from elsewhere (the file, the environment, a default): each is
        # named with its origin, not all blamed on the file.
        raise ConfigError(
            f"chunking.maxTokens = {cfg.chunking.max_tokens} ({origins['chunking.maxTokens']}): must "
            "leave room for the model's two special tokens within embedder.maxLength = "
            f"{cfg.embedder.max_length} ({origins['embedder.maxLength']})"
        )
    return dataclasses.replace(
        cfg,
        home=home,
        socket=socket,
        vault=vault,
        source_file=source_file,
        origins=origins,
        journald=bool(env.get("JOURNAL_STREAM")),
        notify_socket=env.get("NOTIFY_SOCKET") or None,
        watchdog_usec=int(env["WATCHDOG_USEC"]) if env.get("WATCHDOG_USEC", "").isdigit() else None,
        warnings=tuple(warnings),
        outdated=tuple(layers.outdated),
        setup_notes=tuple(layers.setup_notes),
        file_defaults=frozenset(k for k in layers.file_defaults if origins[k].startswith("file ")),
        state_dir=_default_state_dir(env),
        default_file=default_config_file(env),
        system_locale=_default_system_locale(env),
        time_zone=env.get("TZ") or None,
    )


def _is_default(setting: Setting, raw: Any) -> bool:
    """Whether a file's value is the key's default as the example file writes it (not a key a
    model sets: its default is the model's, which a value written pins)."""
    if any(setting.dotted in own for own in MODEL_DEFAULTS.values()):
        return False
    default = setting.default
    shown = str(default) if isinstance(default, Path) else default  # as the example writes it
    shown = list(shown) if isinstance(shown, tuple) else shown
    if isinstance(raw, bool) != isinstance(shown, bool) or isinstance(raw, str) != isinstance(shown, str):
        return False  # `true` is not 1, "10" is not 10
    return bool(raw == shown)


def _default_system_locale(env: Mapping[str, str]) -> str | None:
    """The system's language as Obsidian (Electron, Chromium) picks its own on Linux: the first of
    LANGUAGE's list, else LC_ALL, else LC_MESSAGES, else LANG. Not LC_TIME: the Calendar plugin's
    "Same as system" follows the language the app runs in, not the format dates are written in."""
    first = env.get("LANGUAGE", "").split(":")[0].strip()
    return first or next((env[n] for n in ("LC_ALL", "LC_MESSAGES", "LANG") if env.get(n)), None)


def _default_state_dir(env: Mapping[str, str]) -> Path:
    """$XDG_STATE_HOME/sidecar (``xdg_base``)."""
    return xdg_base(env, "XDG_STATE_HOME") / "sidecar"


_RESOLVE_WAIT_S = 2.0


def _home_in_vault(home: Path, vault: Path | None, layers: _Layers) -> None:
    """A home inside the vault: refused, unless in a hidden folder (then a warning)."""
    if vault is None or not home.is_relative_to(vault):
        return
    if not _hidden_below(home, vault):
        # sidecar never writes into the vault's notes; a home there would also be indexed as
        # notes, every agent's memory with it. A hidden folder (a vault of ~ and the home
        # ~/.sidecar) is never scanned, as Obsidian never shows it.
        raise ConfigError(
            f"home {home} lies inside the vault {vault}: the index "
            "and every agent's memory would be written into the vault and found as its notes; use a "
            "folder outside it"
        )
    # Never scanned (hidden, as Obsidian hides it), so search is right; but README promises
    # no writes into the vault, and whatever syncs the vault (Syncthing, iCloud, git) carries
    # a live index. A warning, not a refusal: a vault of ~ with the default home ~/.sidecar
    # is such a setup, and has run for years. Said where a setup is looked at, not by every command.
    layers.setup_notes.append(
        f"the home {home} lies in a hidden folder inside the vault {vault}: it is not indexed, "
        "but the index and every agent's memory are written into the vault's folder, and whatever "
        "syncs or versions the vault (Syncthing, iCloud, git) carries them; a home outside the "
        "vault avoids that (home: in the configuration file; move the folder there first)"
    )
    layers.warnings.append(layers.setup_notes[-1])


def _where(origins: Mapping[str, str], dotted: str) -> str:
    """Where a key's value came from, as a value error names it: the file's path, ``environment
    SIDECAR_…``, ``command line``, ``default``."""
    origin = origins.get(dotted, "configuration")
    return origin.removeprefix("file ")


def _resolved(path: Path, timeout: float) -> Path:
    """The real path of ``path``, or its absolute spelling when the file system does not answer
    within ``timeout`` (a hung share): the daemon then starts and reports the share offline
    instead of hanging here, before it could say anything."""
    box: list[Path] = []

    def resolve() -> None:
        with contextlib.suppress(OSError, RuntimeError):
            box.append(path.resolve())

    thread = threading.Thread(target=resolve, name="resolve-path", daemon=True)
    thread.start()
    thread.join(timeout)
    return box[0] if box else Path(os.path.normpath(os.path.abspath(path)))


def _hidden_below(path: Path, top: Path) -> bool:
    """Whether ``path`` lies in a hidden folder (a name starting with '.') below ``top``."""
    return any(part.startswith(".") for part in path.relative_to(top).parts)
