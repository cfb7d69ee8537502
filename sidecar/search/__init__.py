"""A query into hits: query analysis, both arms, fusion and rules (pure), the context block for recall.

Imports ``index`` (the serving vectors), ``stores``, ``model`` and below; never ``memory`` or ``daemon``.
"""
