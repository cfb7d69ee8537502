"""Engine adapters: the manifest (sqlite3; its vector bookkeeping in ``vectorbook``), BM25 (Tantivy)
and vectors (LanceDB).

Imports ``contracts`` and ``notes``; nothing above (no model, no index, no daemon).
"""
