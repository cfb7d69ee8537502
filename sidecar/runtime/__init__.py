"""Process plumbing: logging, the retry policy, heap tuning, sd_notify, atomic file writes.

Imports nothing of the project but ``contracts``; every long-running part uses these.
"""
