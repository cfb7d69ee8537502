"""What a person or an agent runs: the CLI, the socket client, the MCP stdio shim, doctor, service files.

Thin: talks to the daemon over the socket and never imports an engine (onnxruntime, LanceDB, Tantivy)
at start; ``serve`` and offline ``index`` import ``daemon`` lazily.
"""
