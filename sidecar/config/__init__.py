"""One frozen, typed configuration, loaded once at the edge.

Precedence: CLI flag > ``SIDECAR_*`` environment > YAML file > default. No other module reads the
environment or the file. Every key of the YAML file is checked: an unknown key or a bad value is a
:class:`ConfigError` naming the file, the key and the value. May import only ``sidecar.contracts``.

The sections are declared by area (``indexing``, ``embedding``, ``search``, ``service``, gathered
in ``root``); ``settings`` lists the keys and coerces values, ``loader`` layers them and
``example`` renders the documented file. The names below are the package's public face.
"""

from sidecar.config.embedding import MODEL_DEFAULTS, ChunkingConfig, EmbedderConfig, model_settings
from sidecar.config.example import render_example
from sidecar.config.fields import camel, env_name
from sidecar.config.indexing import DEFAULT_WIKI, IndexConfig, VaultConfig, WatchConfig
from sidecar.config.loader import EXAMPLE_HINT, daemon_address, file_sets, holds_nothing, load_config
from sidecar.config.root import Config, agent_name_problem, valid_agent
from sidecar.config.search import RecallConfig, SearchConfig, SourceBoosts
from sidecar.config.service import LoggingConfig, MemoryConfig, MemoryWriteConfig, ServerConfig
from sidecar.config.settings import Setting, settings

__all__ = [
    "DEFAULT_WIKI",
    "EXAMPLE_HINT",
    "MODEL_DEFAULTS",
    "ChunkingConfig",
    "Config",
    "EmbedderConfig",
    "IndexConfig",
    "LoggingConfig",
    "MemoryConfig",
    "MemoryWriteConfig",
    "RecallConfig",
    "SearchConfig",
    "ServerConfig",
    "Setting",
    "SourceBoosts",
    "VaultConfig",
    "WatchConfig",
    "agent_name_problem",
    "camel",
    "daemon_address",
    "env_name",
    "file_sets",
    "holds_nothing",
    "load_config",
    "model_settings",
    "render_example",
    "settings",
    "valid_agent",
]
