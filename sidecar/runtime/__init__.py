"""Process plumbing: logging, the retry policy, heap tuning, sd_notify, atomic file writes, the
foreground count that lets searches go first, and group commit.

Imports nothing of the project but ``contracts``; every long-running part uses these.
"""
