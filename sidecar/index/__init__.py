"""Files into stores: sweeps, batched crash-safe writes, vector backfill, model migration, problems.

Imports ``vault``, ``notes``, ``model``, ``stores`` and below; never ``search``, ``memory`` or ``daemon``.
"""
