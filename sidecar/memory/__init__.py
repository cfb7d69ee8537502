"""Agents' memory: each agent's confined inbox (write, edit, delete, audit), its
``.trash`` of kept texts, and its protocol ops.

Imports ``index`` (writes are indexed at once), ``vault``, ``notes`` and below; never ``search``.
"""
