"""Engine adapters, one file each: the manifest (sqlite3; its vector bookkeeping in ``vectorbook``),
BM25 (Tantivy) and vectors (LanceDB), and their lifecycle (opening them; a broken one moved aside
and started fresh, the vectors that still read copied over: ``salvage``).

Imports ``config``, ``contracts`` and ``notes``; nothing above (no model, no index, no daemon).
"""
