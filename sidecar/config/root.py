"""The whole configuration: one frozen record of every section, its derived folders, and the rule
for agent names."""

import re
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path

from sidecar.config.embedding import ChunkingConfig, EmbedderConfig
from sidecar.config.fields import _opt, section
from sidecar.config.indexing import IndexConfig, VaultConfig, WatchConfig
from sidecar.config.search import RecallConfig, SearchConfig
from sidecar.config.service import LoggingConfig, MemoryConfig, ServerConfig
from sidecar.contracts.printable import quoted

_AGENT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@section
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
    # Keys the file gives at their default value (`config example --write` writes every one):
    # `config check` says them as defaults, also written in the file.
    file_defaults: frozenset[str] = field(default=frozenset(), metadata={"internal": True})
    journald: bool = field(default=False, metadata={"internal": True})  # stderr goes to journald
    notify_socket: str | None = field(default=None, metadata={"internal": True})  # systemd Type=notify
    watchdog_usec: int | None = field(default=None, metadata={"internal": True})
    # Not fatal, shown by `config check` and every command (an unknown SIDECAR_* variable); see outdated.
    warnings: tuple[str, ...] = field(default=(), metadata={"internal": True})
    # Warnings not said by query commands (an agent's hooks run them on every prompt): keys an
    # older release wrote (renamed, retired).
    outdated: tuple[str, ...] = field(default=(), metadata={"internal": True})
    # Warnings about a setup that runs as it is (a home in a hidden folder of the vault): said by
    # `config check`, serve (its log) and doctor (its own check) only, not by every command.
    setup_notes: tuple[str, ...] = field(default=(), metadata={"internal": True})
    # Where the daemon keeps what must outlive the home (its share unmounted takes index/ along):
    # $XDG_STATE_HOME/sidecar or ~/.local/state/sidecar; None when not loaded from the layers.
    state_dir: Path | None = field(default=None, metadata={"internal": True})
    # The file read when none is named: $XDG_CONFIG_HOME/sidecar/config.yaml, else
    # ~/.config/sidecar/config.yaml (the service manager passes no XDG_CONFIG_HOME on: a service
    # installed from a shell that has one carries it). None when not loaded from the layers.
    default_file: Path | None = field(default=None, metadata={"internal": True})
    # The system's language as the daemon sees it (LANGUAGE, else LC_ALL, LC_MESSAGES, LANG;
    # "en_US.UTF-8"): the Calendar plugin at "Same as system" begins weeks by it when Obsidian runs
    # in that language, which the vault does not record.
    system_locale: str | None = field(default=None, metadata={"internal": True})
    # The TZ variable of the loading process ("Europe/Berlin"), None when unset: a service installed
    # from that shell carries it (a service manager starts the daemon in the system's zone).
    time_zone: str | None = field(default=None, metadata={"internal": True})

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


def valid_agent(name: str) -> bool:
    """Agent names as the protocol accepts them."""
    return bool(_AGENT_RE.fullmatch(name))


def agent_name_problem(name: object) -> str:
    """What is wrong with an agent name (one wording for the CLI, the shim and the daemon)."""
    return (
        f"invalid agent name {quoted(name)}: use 1-64 characters a-z, 0-9, '_' and '-', starting with a "
        "letter or digit"
    )
