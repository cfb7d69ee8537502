"""Engine adapters: the manifest (sqlite3), BM25 (Tantivy) and vectors (LanceDB), one file each."""
