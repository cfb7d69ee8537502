"""Engine adapters, one file each: the manifest (sqlite3), BM25 (Tantivy) and vectors (LanceDB).

Imports ``contracts`` and ``notes``; nothing above (no model, no index, no daemon).
"""
