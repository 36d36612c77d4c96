"""The address journal, ``<state-dir>/addresses.json``: what kvdev added, for old kernels.

Kernels without IFA_PROTO need it (``core.added`` decides; this module only reads and writes
the file).

``{"<ifindex>": ["10.1.0.5/24", ...]}``, written atomically when it changes and removed when
empty, which it always is on a kernel that keeps IFA_PROTO. A damaged file is set aside once
(``journal_file``); entries that are no ifindex and list of strings are left out.
"""

from __future__ import annotations

from pathlib import Path

from kvdev.guest.adapters import journal_file
from kvdev.guest.core.added import Journal

JOURNAL_FILE = "addresses.json"
MAX_BYTES = 1 << 20  # 256 addresses on each of a few hundred links fit many times over
MAX_ADDRESSES = 256  # per link, as the metadata reader's MAX_IPS


def load(state_dir: Path, *, set_aside: bool = True) -> dict[int, frozenset[str]]:
    """The journal in ``state_dir`` (empty if none or bad)."""
    body = journal_file.load_object(
        state_dir / JOURNAL_FILE, MAX_BYTES, "address journal", set_aside=set_aside
    )
    return {
        int(key): frozenset(a for a in value[:MAX_ADDRESSES] if isinstance(a, str))
        for key, value in body.items()
        if isinstance(key, str) and key.isdecimal() and isinstance(value, list)
    }


def save(state_dir: Path, journal: Journal) -> None:
    """Write the journal (remove the file when empty). Raises OSError."""
    body = {str(i): sorted(a) for i, a in journal.items()}
    journal_file.save_object(state_dir / JOURNAL_FILE, body)
