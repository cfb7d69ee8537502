"""sidecar: hybrid recall over an Obsidian vault, served over a Unix socket."""

import os

# The one place of the release (pyproject.toml reads it): 0.3.0 changes what the index records
# (which release wrote it, the notes written by row).
__version__ = "0.3.0"

# onnxruntime 1.32's Linux and macOS builds report usage to Microsoft by default: a persistent
# device id and an event cache under ~/.cache/Microsoft, uploaded when the network allows. Nothing
# sidecar runs may leave the machine or write outside its home, so every process that imports
# sidecar (daemon, embedding child, CLI, MCP shim) opts out before onnxruntime starts; the variable
# is read once, at onnxruntime's initialisation. A user who wants to send it can set it to 0.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
