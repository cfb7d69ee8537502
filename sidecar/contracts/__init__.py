"""The contracts every part shares: typed errors with their exit codes, the wire protocol, and the
typed search results with their JSON (``wire``).

The bottom layer: imports nothing of the project, so the server and every client speak one language.
"""
