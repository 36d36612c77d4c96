"""The guest half: the agent that runs in the VM and the ``kvdev`` CLI.

It never imports ``kvdev.host``; both halves share only ``schema``, ``errors`` and ``_atomic``.
"""
