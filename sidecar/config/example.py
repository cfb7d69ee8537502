"""The documented example file: every key with its default (``sidecar config example``)."""

import json
from pathlib import Path

from sidecar.config.embedding import MODEL_DEFAULTS, EmbedderConfig
from sidecar.config.settings import settings


def render_example() -> str:
    """The documented example file (kept in config/sidecar.example.yaml; a test compares them)."""
    lines = [
        "# sidecar configuration: every key with its default.",
        "# Precedence: command-line flag > SIDECAR_* environment variable > this file > default.",
        "# The environment variable of a key is SIDECAR_ plus its path in upper snake case,",
        "# e.g. search.vectorWeight -> SIDECAR_SEARCH_VECTOR_WEIGHT. Unknown keys are an error,",
        "# unknown SIDECAR_* variables a warning. A relative path in this file (vault.path: notes)",
        "# counts from this file's folder; one in a flag or variable from the working folder.",
        "# A leading ~ is your home folder. Paths are this machine's (no C:\\ drive letters).",
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
            kind = "Each of" if isinstance(default, tuple) else "One of"
            extra = f" {kind}: {', '.join(s.checks['choices'])}."
        own = MODEL_DEFAULTS[EmbedderConfig.model].get(s.dotted)
        if own is not None:  # set by the model: a copied example must not pin one model's value
            lines.append(f"{indent}# {s.doc}{extra} Default: the model's own.")
            if isinstance(own, tuple):
                own = list(own)
            lines.append(f"{indent}# {parts[-1]}: {json.dumps(own) if isinstance(own, str | list) else own}")
            continue
        lines.append(f"{indent}# {s.doc}{extra}")
        lines.append(f"{indent}{parts[-1]}: {shown}")
    return "\n".join(lines) + "\n"
