"""The service: composition root and lifecycle (startup, serve, shutdown), serving read-only
while the index's disk is full, one-shot indexing, the socket server, the op handlers.

May import every part below it; nothing imports it but ``clients`` (``serve`` and offline ``index``).
"""
