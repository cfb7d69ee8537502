"""sidecar: hybrid recall over an Obsidian vault, served over a Unix socket."""

__version__ = "0.1.0"
