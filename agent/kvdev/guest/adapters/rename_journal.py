"""The rename journal: the names links had before kvdev moved them to temporary names.

A trade of names (a swap, a cycle) passes through ``planning.temp_name``; an agent killed in the
middle leaves links on those names. Before applying such renames the agent records each link's
name in ``<state-dir>/renames.json`` (atomically, durably), so a later pass can give a link whose
device no longer asks for a name a name the trade freed. The journal is dropped once no link in
it holds its temporary name (the file is removed then). A journal that cannot be read as one is
moved aside once (``renames.json.corrupt``), never warned about at every start.

Only this module reads or writes that file; it decides nothing (``planning`` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdev.guest.adapters import journal_file
from kvdev.guest.core.observed import NetState
from kvdev.guest.core.planning import temp_name
from kvdev.guest.core.steps import Rename, Step

JOURNAL_FILE = "renames.json"
CORRUPT_FILE = f"{JOURNAL_FILE}.corrupt"  # a journal that could not be read, kept for a look
MAX_BYTES = 65536  # a journal names at most every link once: far below this


def load(state_dir: Path, *, set_aside: bool = True) -> dict[int, str]:
    """The journal in ``state_dir``: ifindex -> name before the trade (empty if none or bad).

    A damaged journal is set aside once (``journal_file``); entries that are no ifindex and
    name are left out.
    """
    body = journal_file.load_object(
        state_dir / JOURNAL_FILE, MAX_BYTES, "rename journal", set_aside=set_aside
    )
    return {
        int(key): name
        for key, name in body.items()
        if isinstance(key, str) and key.isdecimal() and isinstance(name, str) and name
    }


def record(journal: Mapping[int, str], steps: Sequence[Step]) -> dict[int, str]:
    """The journal once ``steps`` move links to temporary names (the first name recorded wins)."""
    out = dict(journal)
    for step in steps:
        if isinstance(step, Rename) and step.new_name == temp_name(step.ifindex):
            out.setdefault(step.ifindex, step.ifname)
    return out


def prune(journal: Mapping[int, str], state: NetState) -> dict[int, str]:
    """The journal while a link in it still holds its temporary name, else nothing.

    While the trade is unfinished every name in it counts: finished renames freed some.
    """
    unfinished = any(
        (link := state.link(ifindex)) is not None and link.ifname == temp_name(ifindex)
        for ifindex in journal
    )
    return dict(journal) if unfinished else {}


def save(state_dir: Path, journal: Mapping[int, str]) -> None:
    """Write the journal (remove the file when empty). Raises OSError."""
    body = {str(ifindex): name for ifindex, name in journal.items()}
    journal_file.save_object(state_dir / JOURNAL_FILE, body)
