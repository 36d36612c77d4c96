"""The host half: the DRA structured allocator and the metadata writer.

It never imports ``kvdev.guest``; both halves share only ``schema``, ``errors`` and ``_atomic``.
"""
