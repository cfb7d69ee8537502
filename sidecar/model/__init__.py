"""The embedding model: where its files come from (hash-checked), one-time conversion, onnxruntime inference.

Imports ``config``, ``contracts`` and ``runtime``; knows nothing of notes, stores or the index.
"""
