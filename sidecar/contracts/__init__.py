"""The contracts every part shares: typed errors with their exit codes, and the wire protocol.

The bottom layer: imports nothing of the project, so the server and every client speak one language.
"""
