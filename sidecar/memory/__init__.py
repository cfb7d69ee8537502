"""Agents' memory: each agent's confined inbox (write, edit, delete, audit, trash) and its protocol ops.

Imports ``index`` (writes are indexed at once), ``vault``, ``notes`` and below; never ``search``.
"""
