"""The vault on disk: roots and references, safe opening, ignore rules, mounts, file events, share health.

Reads the file system (never writes to a vault or wiki); imports ``config``, ``contracts``, ``runtime``.
"""
