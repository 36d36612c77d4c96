"""Renderings of the agent's state, pure: the JSON documents and the text tables.

``encode`` turns a ``Status`` or ``Plan`` into the JSON the API answers and ``status.json``
keeps; ``tables`` turns those JSON documents into what people read (``kvdev status``,
``kvdev devices``, ``kvdev-agent --once``).
"""
