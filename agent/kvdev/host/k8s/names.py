"""Object names and label values kvdev derives from other names, kept within the API's limits.

Owns ``bounded``: the one rule the controller (ConfigMap names, the VMI label) uses to fit a
derived name into a length limit while keeping it valid and distinct. Pure: no I/O. (The node
relay's names carry the node whole instead, for admission's CEL: ``publish/relayed``.)
"""

from __future__ import annotations

import hashlib
from typing import Final

HASH_DIGITS: Final = 10


def digest(text: str) -> str:
    """The first ``HASH_DIGITS`` hex digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]


def bounded(text: str, limit: int) -> str:
    """``text``, or when longer than ``limit`` a name of at most ``limit`` characters.

    That is its start, cut back to end in a letter or digit, ``-`` and ``digest(text)``: valid
    where ``text`` was, and still distinct.
    """
    if len(text) <= limit:
        return text
    return f"{text[: limit - HASH_DIGITS - 1].rstrip('-._')}-{digest(text)}"
