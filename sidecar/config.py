"""One frozen, typed configuration, loaded once at the edge.

Precedence: CLI flag > ``SIDECAR_*`` environment > YAML file > default. No other module reads the
environment or the file. Every key of the YAML file is checked: an unknown key or a bad value is a
:class:`ConfigError` naming the file, the key and the value. Imports only ``errors``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.errors import ConfigError

_AGENT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# A Unix socket path must fit sun_path (104 bytes on macOS, 108 on Linux) with a margin.
_MAX_SOCKET_PATH = 100


def _opt(default: Any, doc: str, **checks: Any) -> Any:
    """A config field with its documentation and value checks (min, max, choices)."""
    return field(default=default, metadata={"doc": doc, **checks})


@dataclass(frozen=True)
class VaultConfig:
    path: Path | None = _opt(None, "The Obsidian vault folder (required to index notes).")
    wiki_subfolder: str = _opt("wiki", "Curated subfolder of the vault, indexed as source `wiki`.")


@dataclass(frozen=True)
class IndexConfig:
    rescan_minutes: float = _opt(10.0, "Full sweep interval in minutes.", min=0.1)
    max_file_bytes: int = _opt(5_000_000, "Notes larger than this are skipped (and counted).", min=1024)
    batch_files: int = _opt(128, "Notes written to the stores per batch during a sweep.", min=1, max=10_000)
    mass_deletion_share: float = _opt(
        0.5,
        "A sweep that finds more than this share of a root's notes gone (same mount, not empty) holds "
        "the deletions for massDeletionHoldMinutes, or until `sidecar index --confirm-deletions ROOT`.",
        min=0.0,
        max=1.0,
    )
    mass_deletion_hold_minutes: float = _opt(
        360.0,
        "Wall-clock time a mass deletion stays held before it is applied (an emptied, unmounted or "
        "replaced share is held for as long as it stays so, whatever this says).",
        min=0.0,
    )
    keep_deleted_vectors_hours: float = _opt(
        168.0,
        "Vectors of deleted chunks are kept this long, by text: a note that comes back is not re-embedded.",
        min=0.0,
    )
    keep_deleted_vectors_max: int = _opt(
        20_000, "At most this many kept vectors of deleted chunks (oldest go first).", min=0, max=10**7
    )
    optimize_minutes: float = _opt(
        60.0, "Compact the vector table (and drop old versions) this often.", min=1.0
    )
    optimize_every_writes: int = _opt(
        100, "Also compact after this many vector writes (0: only on the schedule).", min=0, max=1_000_000
    )
    exclude: tuple[str, ...] = _opt(
        (),
        "Notes to leave out, as gitignore patterns relative to the vault (e.g. [Templates/, "
        "Archive/, '*.excalidraw.md']); excluded notes leave the index on the next sweep.",
    )
    obsidian_excludes: bool = _opt(
        True, "Also leave out what Obsidian's 'Excluded files' setting (.obsidian/app.json) names."
    )


@dataclass(frozen=True)
class WatchConfig:
    events: bool = _opt(True, "Use file events (inotify/FSEvents); false: sweeps and polling only.")
    debounce_ms: int = _opt(
        300, "File events are collected this long before a sweep runs.", min=0, max=60_000
    )
    poll_seconds: float = _opt(
        60.0,
        "Stat sweep interval for roots on network shares (no file events arrive from other machines).",
        min=1.0,
    )
    retry_base_seconds: float = _opt(30.0, "First retry of an unreachable root; doubles each time.", min=0.1)
    retry_max_seconds: float = _opt(600.0, "Longest wait between retries of an unreachable root.", min=1.0)
    fault_retry_max_seconds: float = _opt(
        5.0, "Longest wait before an index update that failed (disk full, read-only) is tried again.", min=0.1
    )
    probe_timeout_seconds: float = _opt(
        10.0, "A root whose listing takes longer is treated as unreachable (hung share).", min=0.1
    )
    scan_timeout_seconds: float = _opt(600.0, "Longest a full scan of one root may take.", min=1.0)
    mount_table: Path | None = _opt(
        None, "Mount table to read filesystem types from (default /proc/self/mountinfo; macOS: mount)."
    )


@dataclass(frozen=True)
class ChunkingConfig:
    max_tokens: int = _opt(
        200, "Largest chunk in model tokens, title and heading path included.", min=32, max=8192
    )
    overlap: float = _opt(0.2, "Share of a chunk repeated at the start of the next one.", min=0.0, max=0.5)


@dataclass(frozen=True)
class EmbedderConfig:
    enabled: bool = _opt(True, "false: BM25 only, no model is loaded.")
    model: str = _opt(
        "multilingual-e5-small",
        "Model name; also the folder name under <home>/models/. Built in: multilingual-e5-small "
        "(about 100 languages) and all-MiniLM-L6-v2 (English, about 3x faster); each sets its own "
        "maxLength, pooling, prefixes and languages unless they are given here.",
    )
    path: Path | None = _opt(None, "Folder with model.onnx and tokenizer.json (overrides resolution).")
    max_length: int = _opt(256, "Tokens the model sees; longer input is cut.", min=16, max=8192)
    pooling: str = _opt("mean", "How token states become one vector.", choices=("mean", "cls"))
    normalize: bool = _opt(True, "L2-normalise vectors (cosine similarity).")
    query_prefix: str = _opt("", "Text put before every query ('query: ' for e5 models).")
    passage_prefix: str = _opt("", "Text put before every chunk (e.g. 'passage: ').")
    batch_tokens: int = _opt(2048, "Token budget of one inference batch.", min=64)
    max_batch: int = _opt(32, "Most texts in one inference batch.", min=1, max=1024)
    batch_cells: int = _opt(
        80_000,
        "Bound on texts x longest-text-tokens squared per batch: attention memory grows with it "
        "(about 1.2 KB per cell measured for all-MiniLM-L6-v2).",
        min=1024,
    )
    retry_minutes: float = _opt(5.0, "A model that failed to load is tried again this often.", min=0.1)
    languages: str = _opt(
        "en", "Languages the model embeds well (comma-separated); other queries lean on BM25 (all: any)."
    )
    threads: int = _opt(0, "onnxruntime intra-op threads; 0 = number of cores.", min=0, max=256)
    int8_kernels: bool = _opt(
        True,
        "Run an int8 model's weights with int8 kernels (about 60 MB less memory, vectors within "
        "cosine 0.9997); false expands them to float32 once.",
    )
    cache_dir: Path | None = _opt(
        None,
        "Where converted models and int8-kernel copies are kept; default <home>/models/.prepared/.",
    )


# Settings each built-in model needs (dotted keys); a value from the file, the environment or a
# flag wins. e5 models were trained with "query: " / "passage: " in front and mean pooling. Their
# cosines sit higher than MiniLM's: ranking and the duplicate check read them on the model's own
# scale (``embedder.cosine_range``), so their thresholds are the same for every model.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "multilingual-e5-small": {
        "embedder.maxLength": 256,
        "embedder.pooling": "mean",
        "embedder.queryPrefix": "query: ",
        "embedder.passagePrefix": "passage: ",
        "embedder.languages": "all",
    },
    "all-MiniLM-L6-v2": {
        "embedder.maxLength": 256,
        "embedder.pooling": "mean",
        "embedder.queryPrefix": "",
        "embedder.passagePrefix": "",
        "embedder.languages": "en",
    },
}


def model_settings(ecfg: EmbedderConfig, model: str) -> EmbedderConfig:
    """``ecfg`` for ``model`` with all of that model's own ``embedder.*`` settings (how the
    previous model of a migration is loaded: the configured values were meant for the new one)."""
    own = {
        name: value
        for name, value in MODEL_DEFAULTS.get(model, {}).items()
        if name.startswith("embedder.") and name.count(".") == 1
    }
    by_dotted = {f"embedder.{camel(f.name)}": f.name for f in dataclasses.fields(EmbedderConfig)}
    return dataclasses.replace(ecfg, model=model, **{by_dotted[k]: v for k, v in own.items()})


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


@dataclass(frozen=True)
class SourceBoosts:
    vault: float = _opt(0.65, "Score factor for vault notes.", min=0.0, max=10.0)
    wiki: float = _opt(1.4, "Score factor for wiki pages.", min=0.0, max=10.0)
    memory: float = _opt(0.85, "Score factor for agent memory notes.", min=0.0, max=10.0)


@dataclass(frozen=True)
class SearchConfig:
    limit: int = _opt(10, "Hits returned when a request names no limit.", min=1, max=200)
    mask_secrets: bool = _opt(
        True,
        "Mask secrets (keys, tokens, passwords, card numbers, connection strings) in the text of "
        "search hits, recall blocks and get; the notes themselves are never changed.",
    )
    min_score: float = _opt(
        0.1,
        "Hits whose relevance is below this are dropped. Relevance is absolute: 0 is what unrelated "
        "text scores, 1 a clear match in both arms; below 0.1 is noise (text matching nothing).",
        min=0.0,
    )
    fusion: str = _opt(
        "calibrated",
        "How the two arms are put on one scale before the weighted sum: calibrated (raw cosine and "
        "BM25 on absolute scales), rrf (ranks only) or minmax (each arm's best 1, worst 0).",
        choices=("calibrated", "rrf", "minmax"),
    )
    cosine_floor: float | None = _opt(
        None, "Cosine that counts as unrelated (relevance 0); default: the model's own.", min=-1.0, max=1.0
    )
    cosine_full: float | None = _opt(
        None,
        "Cosine that counts as a clear match (relevance 1); default: the model's own.",
        min=-1.0,
        max=1.0,
    )
    hub_damping: float = _opt(
        # help set (77 q, e5) MRR@10 0.688 -> 0.705, XQuAD-de nDCG@10 0.968 -> 0.969 (BENCHMARKS.md)
        0.5,
        "Share of a chunk's nearness to the centre of all vectors taken off its cosine: a chunk "
        "about everything a little (a command list) stops topping unrelated questions. 0: off.",
        min=0.0,
        max=2.0,
    )
    link_lift: float = _opt(
        0.0,
        "Lift for a note that the best notes of a result link to: its score times 1 + this x (share "
        "of the top 10 notes linking to it). 0: off (see BENCHMARKS.md for the measured effect).",
        min=0.0,
        max=2.0,
    )
    candidates: int = _opt(60, "Candidates each arm fetches before fusion (at least 3x limit).", min=10)
    vector_weight: float = _opt(0.7, "Share of the vector arm in the fused score.", min=0.0, max=1.0)
    short_query_bm25_weight: float = _opt(
        0.5, "BM25 share for queries of one or two content words.", min=0.0, max=1.0
    )
    rare_term_chunks: int = _opt(
        5,
        "A query word the model splits into pieces (a name, code or identifier) and that at most "
        "this many chunks contain makes keywords lead (rareTermVectorWeight). 0: off.",
        min=0,
    )
    rare_term_share: float = _opt(
        0.0005,
        "In a smaller index, rare means at most this share of its chunks (at least one): in 300 "
        "chunks nearly every word is in fewer than five.",
        min=0.0,
        max=1.0,
    )
    rare_term_vector_weight: float = _opt(
        0.3, "Vector share for queries with such a rare word.", min=0.0, max=1.0
    )
    rare_term_boost: float = _opt(
        1.5, "Factor for a chunk that contains such a rare word of the query.", min=0.0, max=10.0
    )
    boosts: SourceBoosts = field(default_factory=SourceBoosts)
    slug_boost: float = _opt(
        # Off, unlike the seed's 1.15: nearly every title shares a generic query word ("notes",
        # "Notiz", "sync"), so the factor rewarded the wrong pages. Help sets (77 / 45 q, e5)
        # MRR@10 0.674 -> 0.688 / 0.773 -> 0.794; XQuAD-de unchanged (BENCHMARKS.md).
        1.0,
        "Factor for a note whose file name or title contains a content word of the query. 1.0 "
        "(off) differs from the seed's 1.15: most titles share a generic query word, so it lifted "
        "wrong pages (BENCHMARKS.md); the multi-word fullNameBoost still applies.",
        min=0.0,
        max=10.0,
    )
    full_name_boost: float = _opt(
        1.3,
        "Factor when the query contains every word of a note's title or alias (2+ words).",
        min=0.0,
        max=10.0,
    )
    log_folder: str = _opt("logs", "Folder of the wiki that holds change logs.")
    log_demotion: float = _opt(
        0.6, "Factor for wiki log pages unless the query is about dates or changes.", min=0.0, max=10.0
    )
    page_support: float = _opt(
        # nDCG@10 SciFact / help set: 0 -> 0.709 / 0.726, 0.05 -> 0.703, 0.1 -> 0.699 / 0.740,
        # 0.2 -> 0.696 / 0.724 (BENCHMARKS.md)
        0.05,
        "A page's best chunk gains this share of its next two chunks reaching half its score.",
        min=0.0,
        max=1.0,
    )
    max_hits_per_note: int = _opt(2, "Most hits of one note in a result (0: no cap).", min=0, max=100)
    fold: str = _opt(
        "overlap",
        "Fold a chunk into a better hit of the same note that contains it (contained) or also one it "
        "overlaps (overlap); off keeps all.",
        choices=("overlap", "contained", "off"),
    )
    ann_threshold: int = _opt(
        20_000,
        "Chunks from which vector search uses an IVF index instead of an exact scan (0: never).",
        min=0,
    )
    ann_index: str = _opt(
        "ivf_pq",
        "Kind of vector index above annThreshold: ivf_pq (least memory), ivf_sq, ivf_rq, ivf_hnsw_sq.",
        choices=("ivf_pq", "ivf_sq", "ivf_rq", "ivf_hnsw_sq"),
    )
    ann_probes: int = _opt(12, "IVF partitions searched per query (more: closer to exact, slower).", min=1)
    foreign_vector_weight: float = _opt(
        0.25,  # XQuAD-de sweep: 0.10 -> 0.930, 0.20 -> 0.931, 0.25 -> 0.932, 0.35 -> 0.929 nDCG@10
        "Vector share for queries in a language the model does not know (embedder.languages).",
        min=0.0,
        max=1.0,
    )


@dataclass(frozen=True)
class RecallConfig:
    limit: int = _opt(5, "Most notes in an injected context block.", min=1, max=50)
    token_budget: int = _opt(1500, "Token budget of the context block.", min=100, max=50_000)
    score_floor: float = _opt(0.35, "Hits whose relevance is below this stay out of the block.", min=0.0)
    min_similarity: float = _opt(
        0.4,
        "Hits whose calibrated cosine to the message (0 unrelated, 1 a clear match; see "
        "search.cosineFloor) is below this stay out (keeps small talk empty).",
        min=0.0,
        max=1.0,
    )
    history_turns: int = _opt(3, "Previous turns blended into the query vector.", min=0, max=20)
    history_head_chars: int = _opt(400, "Only the head of each previous turn is embedded.", min=20)
    history_words: int = _opt(
        24, "Most content words of the previous turns added to the keyword query (newest first).", min=0
    )
    history_weight_none: float = _opt(
        0.7, "History share of the query vector for a message without content words.", min=0.0, max=1.0
    )
    history_weight_short: float = _opt(
        0.4, "History share for a message of one or two content words.", min=0.0, max=1.0
    )
    history_weight_long: float = _opt(
        0.2, "History share for a message of three or more content words.", min=0.0, max=1.0
    )


@dataclass(frozen=True)
class MemoryWriteConfig:
    on_duplicate: str = _opt(
        "warn",
        "A write close to an existing note: warn (write and report) or reject.",
        choices=("warn", "reject"),
    )
    duplicate_threshold: float = _opt(
        0.9, "Cosine similarity from which a note counts as a near-duplicate.", min=0.0, max=1.0
    )


@dataclass(frozen=True)
class MemoryConfig:
    max_note_bytes: int = _opt(100_000, "Largest memory note an agent may write.", min=256)
    redact_secrets: bool = _opt(True, "Replace keys, tokens and passwords by [REDACTED:kind] before writing.")
    write: MemoryWriteConfig = field(default_factory=MemoryWriteConfig)


@dataclass(frozen=True)
class ServerConfig:
    max_frame_bytes: int = _opt(1_048_576, "Largest request line accepted.", min=1024)
    workers: int = _opt(4, "Threads that run searches and other reads.", min=1, max=64)
    write_workers: int = _opt(
        2, "Threads that run memory writes and index requests (searches never wait for them).", min=1, max=16
    )
    idle_timeout_seconds: float = _opt(300.0, "A connection silent this long is closed.", min=1.0)
    max_connections: int = _opt(1024, "Open connections beyond this are refused with an error.", min=1)
    max_buffered_bytes: int = _opt(
        64 << 20,
        "Unfinished request bytes held over all connections; beyond, a connection is refused.",
        min=1024,
    )
    request_timeout_seconds: float = _opt(
        120.0, "A request running longer is answered with a timeout error.", min=1.0
    )


@dataclass(frozen=True)
class LoggingConfig:
    level: str = _opt("info", "Log level.", choices=("debug", "info", "warning", "error"))


@dataclass(frozen=True)
class Config:
    home: Path = _opt(Path("~/.sidecar"), "Holds agents/, index/, models/ (and the socket by default).")
    socket: Path | None = _opt(None, "Socket path; default in $XDG_RUNTIME_DIR or <home>/run/.")
    vault: VaultConfig = field(default_factory=VaultConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    # Not settable: where the file came from and where each value came from.
    source_file: Path | None = field(default=None, metadata={"internal": True})
    origins: Mapping[str, str] = field(default_factory=dict, metadata={"internal": True})
    journald: bool = field(default=False, metadata={"internal": True})  # stderr goes to journald
    notify_socket: str | None = field(default=None, metadata={"internal": True})  # systemd Type=notify
    watchdog_usec: int | None = field(default=None, metadata={"internal": True})
    # Not fatal, shown by every command and by `config check` (an unknown SIDECAR_* variable).
    warnings: tuple[str, ...] = field(default=(), metadata={"internal": True})

    @property
    def index_dir(self) -> Path:
        return self.home / "index"

    @property
    def agents_dir(self) -> Path:
        return self.home / "agents"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def prepared_dir(self) -> Path:
        return self.embedder.cache_dir or self.models_dir / ".prepared"

    @property
    def socket_path(self) -> Path:
        assert self.socket is not None  # always resolved by load_config
        return self.socket


def camel(name: str) -> str:
    """``wiki_subfolder`` -> ``wikiSubfolder`` (YAML keys are camelCase)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def env_name(dotted: str) -> str:
    """``search.vectorWeight`` -> ``SIDECAR_SEARCH_VECTOR_WEIGHT``."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", dotted).replace(".", "_")
    return "SIDECAR_" + snake.upper()


@dataclass(frozen=True)
class Setting:
    """One settable leaf of the configuration."""

    dotted: str  # camelCase YAML path, e.g. "search.boosts.wiki"
    attrs: tuple[str, ...]  # dataclass attribute path
    type: Any
    default: Any
    doc: str
    checks: Mapping[str, Any]


def settings(cls: type = Config, prefix: str = "", attrs: tuple[str, ...] = ()) -> list[Setting]:
    """Every settable key, in declaration order (the example file and `config check` use it)."""
    out: list[Setting] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        dotted = f"{prefix}{camel(f.name)}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.extend(settings(typing.cast(type, tp), dotted + ".", (*attrs, f.name)))
            continue
        checks = {k: v for k, v in f.metadata.items() if k != "doc"}
        out.append(Setting(dotted, (*attrs, f.name), tp, f.default, f.metadata.get("doc", ""), checks))
    return out


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = raw.strip().lower() if isinstance(raw, str) else None
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError("expected true or false")


def _to_str_tuple(raw: Any) -> tuple[str, ...]:
    """A YAML list of strings, or one string with items separated by commas (environment, flags)."""
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected a list of strings")
    return tuple(i.strip() for i in items if i.strip())


def _to_number(raw: Any, base: type, checks: Mapping[str, Any]) -> int | float:
    kind = "an integer" if base is int else "a number"
    if isinstance(raw, bool) or (base is int and isinstance(raw, float)):
        raise ValueError(f"expected {kind}")
    try:
        value: int | float = base(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise ValueError(f"expected {kind}") from None
    if "min" in checks and value < checks["min"]:
        raise ValueError(f"must be at least {checks['min']}")
    if "max" in checks and value > checks["max"]:
        raise ValueError(f"must be at most {checks['max']}")
    return value


def _to_str(raw: Any, checks: Mapping[str, Any]) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ValueError("expected text")
    value = str(raw)
    choices = checks.get("choices")
    if choices and value not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}")
    return value


def _to_path(raw: Any) -> Path:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("expected a path")
    if "\0" in raw:
        raise ValueError("a path cannot contain NUL")
    return Path(raw).expanduser()


def _coerce(setting: Setting, raw: Any, where: str) -> Any:
    """Turn a YAML or string value into the setting's type, or raise naming where it came from."""
    tp = setting.type
    optional = isinstance(tp, types.UnionType) and type(None) in typing.get_args(tp)
    base = next(a for a in typing.get_args(tp) if a is not type(None)) if optional else tp
    empty = raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "null", "none"))
    try:
        if optional and empty:
            return None
        if raw is None:
            raise ValueError("a value is required")
        if base is bool:
            return _to_bool(raw)
        if base in (int, float):
            return _to_number(raw, base, setting.checks)
        if base is str:
            return _to_str(raw, setting.checks)
        if base is Path:
            return _to_path(raw)
        if base == tuple[str, ...]:
            return _to_str_tuple(raw)
        raise ValueError(f"unsupported type {tp}")  # pragma: no cover - every declared type is handled
    except ValueError as exc:
        raise ConfigError(f"{where}: {setting.dotted} = {raw!r}: {exc}") from None


# Variables of the project's own tooling (CI's venv), not configuration keys: never a warning.
_NOT_KEYS = frozenset({"SIDECAR_CONFIG", "SIDECAR_CI_VENV"})
EXAMPLE_HINT = "`sidecar config example` prints every key with its default"


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


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the configuration file is not UTF-8") from exc
    import yaml  # only when there is a file: a thin client without one starts faster

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return _flatten(data, str(path))


def _default_config_path(flag: str | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """The config file to read and whether it must exist (named explicitly)."""
    if flag:
        return Path(flag).expanduser(), True
    if env.get("SIDECAR_CONFIG"):
        return Path(env["SIDECAR_CONFIG"]).expanduser(), True
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path("~/.config").expanduser()
    return base / "sidecar" / "config.yaml", False


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
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        path = (*attrs, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = _build(typing.cast(type, hints[f.name]), values, path)
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
    close = difflib.get_close_matches(dotted, list(known), n=1, cutoff=0.75)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{where}: unknown key {dotted!r} (value {raw!r}); {hint}{EXAMPLE_HINT}"


def _problems(problems: list[str]) -> ConfigError:
    if len(problems) == 1:
        return ConfigError(problems[0])
    return ConfigError(f"{len(problems)} configuration problems:\n  " + "\n  ".join(problems))


@dataclass
class _Layers:
    """Values gathered from the file, the environment and the flags, and what was wrong."""

    known: dict[str, Setting]
    values: dict[tuple[str, ...], Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # every one is reported at once
    warnings: list[str] = field(default_factory=list)

    def put(self, setting: Setting, raw: Any, where: str, origin: str, base: Path) -> None:
        try:
            value = _coerce(setting, raw, where)
        except ConfigError as exc:
            self.problems.append(str(exc))
            return
        if isinstance(value, Path) and not value.is_absolute():
            value = base / value
        self.values[setting.attrs] = value
        self.origins[setting.dotted] = origin

    def read_file(self, path: Path, source_file: Path) -> None:
        for dotted, raw in _read_yaml(path).items():
            setting = self.known.get(dotted)
            if setting is None:
                self.problems.append(_unknown_key(path, dotted, raw, self.known))
            else:
                self.put(setting, raw, str(path), f"file {source_file}", source_file.parent)

    def read_env(self, env: Mapping[str, str], cwd: Path) -> None:
        by_env = {env_name(s.dotted): s for s in self.known.values()}
        for name, raw in env.items():
            if not name.startswith("SIDECAR_") or name in _NOT_KEYS:
                continue
            setting = by_env.get(name)
            if setting is None:  # a typo or another tool's variable: ignored, not fatal
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


def load_config(
    *,
    config_file: str | None = None,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Config:
    """Build the effective configuration. ``flags`` maps dotted keys (``vault.path``) to raw values."""
    env = dict(os.environ) if env is None else env
    cwd = cwd or Path.cwd()
    known = {s.dotted: s for s in settings()}
    layers = _Layers(known, origins={s.dotted: "default" for s in known.values()})

    path, required = _default_config_path(config_file, env)
    source_file: Path | None = None
    if path is not None and (required or path.exists()):
        if not path.exists():
            raise ConfigError(f"{path}: configuration file not found")
        source_file = path.resolve()
        layers.read_file(path, source_file)
    layers.read_env(env, cwd)
    layers.read_flags(flags or {}, cwd)
    values, origins, problems, warnings = layers.values, layers.origins, layers.problems, layers.warnings

    if problems:
        raise _problems(problems)
    cfg = _with_model(_build(Config, values), origins)
    home = cfg.home.expanduser()
    home = (home if home.is_absolute() else cwd / home).resolve()
    vault = cfg.vault
    if vault.path is not None:
        vault = dataclasses.replace(vault, path=vault.path.expanduser().resolve())
    wiki = vault.wiki_subfolder.strip("/")
    if not wiki or ".." in Path(wiki).parts or wiki.startswith("."):
        raise ConfigError(
            f"{source_file or 'configuration'}: vault.wikiSubfolder = {vault.wiki_subfolder!r}: "
            "must be a relative folder inside the vault"
        )
    vault = dataclasses.replace(vault, wiki_subfolder=wiki)
    socket = cfg.socket.expanduser() if cfg.socket else _default_socket(home, env, os.getuid())
    if len(os.fsencode(socket)) > _MAX_SOCKET_PATH + 4:
        raise ConfigError(f"socket = {str(socket)!r}: path too long for a Unix socket")
    if cfg.chunking.max_tokens > cfg.embedder.max_length - 2:
        raise ConfigError(
            f"{source_file or 'configuration'}: chunking.maxTokens = {cfg.chunking.max_tokens}: must leave "
            f"room for the model's two special tokens within embedder.maxLength = {cfg.embedder.max_length}"
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
    )


def valid_agent(name: str) -> bool:
    """Agent names as the protocol accepts them."""
    return bool(_AGENT_RE.fullmatch(name))


def render_example() -> str:
    """The documented example file (kept in config/sidecar.example.yaml; a test compares them)."""
    lines = [
        "# sidecar configuration: every key with its default.",
        "# Precedence: command-line flag > SIDECAR_* environment variable > this file > default.",
        "# The environment variable of a key is SIDECAR_ plus its path in upper snake case,",
        "# e.g. search.vectorWeight -> SIDECAR_SEARCH_VECTOR_WEIGHT. Unknown keys are an error,",
        "# unknown SIDECAR_* variables a warning.",
        "",
    ]
    current: tuple[str, ...] = ()
    for s in settings():
        parts = s.dotted.split(".")
        section = tuple(parts[:-1])
        for depth in range(len(section)):
            if section[: depth + 1] != current[: depth + 1]:
                lines.append("  " * depth + f"{section[depth]}:")
        current = section
        indent = "  " * len(section)
        default = s.default
        if isinstance(default, Path):
            shown = str(default)
        elif default is None:
            shown = "null"
        elif isinstance(default, bool):
            shown = "true" if default else "false"
        elif isinstance(default, str):
            shown = default or '""'
        elif isinstance(default, tuple):
            shown = json.dumps(list(default))
        else:
            shown = str(default)
        extra = ""
        if "choices" in s.checks:
            extra = f" One of: {', '.join(s.checks['choices'])}."
        own = MODEL_DEFAULTS[EmbedderConfig.model].get(s.dotted)
        if own is not None:  # set by the model: a copied example must not pin one model's value
            lines.append(f"{indent}# {s.doc}{extra} Default: the model's own.")
            lines.append(f"{indent}# {parts[-1]}: {json.dumps(own) if isinstance(own, str) else own}")
            continue
        lines.append(f"{indent}# {s.doc}{extra}")
        lines.append(f"{indent}{parts[-1]}: {shown}")
    return "\n".join(lines) + "\n"
