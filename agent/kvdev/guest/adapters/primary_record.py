"""The recorded decision on the guest's own NICs (``core.primary``): ``<state-dir>/primary.json``.

``{"owned": {"<mac>": "<why>"}}``, written atomically when the decision grows; read once at
start. A damaged file is set aside (``journal_file``) and the decision starts again from what
holds now. Only this module reads or writes that file; it decides nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvdev._atomic import write_atomic
from kvdev.guest.adapters import journal_file
from kvdev.guest.core.primary import Decision

RECORD_FILE = "primary.json"
MAX_BYTES = 65536
MAX_REASON = 512


def load(state_dir: Path, *, set_aside: bool = True) -> Decision:
    """The recorded decision (empty when there is none, or it is bad)."""
    body = journal_file.load_object(
        state_dir / RECORD_FILE, MAX_BYTES, "primary NIC record", set_aside=set_aside
    )
    owned = body.get("owned")
    if not isinstance(owned, dict):
        return Decision({})
    return Decision(
        {
            mac.lower(): why[:MAX_REASON]
            for mac, why in owned.items()
            if isinstance(mac, str) and isinstance(why, str) and len(mac) == 17
        }
    )


def save(state_dir: Path, decision: Decision) -> None:
    """Write the decision (raises OSError)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
    text = json.dumps({"owned": dict(sorted(decision.owned.items()))}, indent=2) + "\n"
    write_atomic(state_dir / RECORD_FILE, text.encode(), mode=0o644)
