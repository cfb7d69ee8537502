"""The service: composition root and lifecycle (startup, serve, shutdown), the socket server, the op handlers.

May import every part below it; nothing imports it but ``clients`` (``serve`` and offline ``index``).
"""
