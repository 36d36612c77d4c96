"""Object names and label values kvdev derives from other names, kept within the API's limits.

Owns the one rule that fits a name derived from an object's name into a length limit while
keeping it valid and distinct: an uncut name is kept as it is; a cut one ends in 10 hex digits of
the SHA-256 of the whole, and has a character where no uncut name can have it, so that no
object's name, however chosen, ever derives what another's cut name is:

* ``bounded_name`` (object names, such as the controller's ``kvdev-<vmi>`` ConfigMap): the name
  put after the prefix is a DNS-1123 subdomain, whose first character is a letter or digit, so an
  uncut name has one right after the prefix; a cut name has ``-`` there;
* ``bounded_label`` (label values, such as the controller's ``kvdev.io/vmi``): the names cut
  are DNS-1123 subdomains, which have no ``_``;
  a cut value joins its start and the hash with ``_``.

Both rely on the name being a DNS-1123 subdomain (``is_subdomain``), as kvdev's models check
every object's name when they read it (``k8s.common.ObjectMeta``). Pure: no I/O. (The node
relay's names and node label carry the node whole instead, for admission's CEL:
``host/contract``.)
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

HASH_DIGITS: Final = 10
SUBDOMAIN_MAX: Final = 253
_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def digest(text: str) -> str:
    """The first ``HASH_DIGITS`` hex digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]


def is_subdomain(name: str) -> bool:
    """``name`` is a DNS-1123 subdomain (what the API server takes as most objects' names)."""
    return len(name) <= SUBDOMAIN_MAX and _SUBDOMAIN.match(name) is not None


def bounded_name(prefix: str, name: str, limit: int = SUBDOMAIN_MAX) -> str:
    """``prefix + name``, or when longer than ``limit`` a name of at most ``limit`` characters.

    That is ``prefix``, ``-``, the start of ``name`` (cut back to end in a letter or digit),
    ``-`` and ``digest(prefix + name)``. ``name`` must be a DNS-1123 subdomain (``is_subdomain``)
    and ``prefix`` non-empty: then no uncut result (a letter or digit after ``prefix``) equals a
    cut one (``-`` after ``prefix``).
    """
    whole = f"{prefix}{name}"
    if len(whole) <= limit:
        return whole
    start = name[: limit - len(prefix) - 2 - HASH_DIGITS].rstrip("-.")
    return f"{prefix}-{start}-{digest(whole)}" if start else f"{prefix}-{digest(whole)}"


def bounded_label(name: str, limit: int = 63) -> str:
    """``name`` as a label value: itself, or when longer than ``limit`` its start, ``_``, hash.

    The start is cut back to end in a letter or digit; the hash is ``digest(name)``. ``name``
    must be a DNS-1123 subdomain (``is_subdomain``): it has no ``_``, so it never equals a cut
    value.
    """
    if len(name) <= limit:
        return name
    return f"{name[: limit - HASH_DIGITS - 1].rstrip('-.')}_{digest(name)}"
