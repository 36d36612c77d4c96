"""The altname journal, ``<state-dir>/altnames.json``: the altnames kvdev added, per link.

The kernel keeps no mark on an altname: without a record kvdev could not tell one it added
from one a person or udev added, so an altname it added for a claim name that changed since
stayed on the link for good, and kept that name from a link that wanted it later. Before a
pass adds altnames it records them here (``record``, saved atomically and durably before the
first is sent, as the rename journal is before a rename), so that planning removes those
kvdev added that are no longer wanted (``RemoveAltname``) and never any other.

``{"<ifindex>": ["vm1-devices.nic-1.vf-1", ...]}``, removed when empty. ``prune`` keeps only
what the links still have (an add that failed, a link that went, an altname someone else
removed), ``forget`` drops what a pass removed. A damaged file is set aside once
(``journal_file``); entries that are no ifindex and list of strings are left out, and a link
keeps at most ``MAX_PER_LINK``: an altname past that is not recorded, so it is not added.

Only this module reads or writes that file; it decides nothing (``planning`` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdev.guest.adapters import journal_file
from kvdev.guest.core.observed import NetState
from kvdev.guest.core.steps import AddAltname, RemoveAltname, Step, StepResult

JOURNAL_FILE = "altnames.json"
MAX_PER_LINK = 16  # kvdev wants one altname a link and removes the others it added
MAX_BYTES = 1 << 20  # 16 names of 127 bytes on each of a few hundred links fit many times over

Journal = Mapping[int, frozenset[str]]


def load(state_dir: Path, *, set_aside: bool = True) -> dict[int, frozenset[str]]:
    """The journal in ``state_dir`` (empty if none or bad)."""
    body = journal_file.load_object(
        state_dir / JOURNAL_FILE, MAX_BYTES, "altname journal", set_aside=set_aside
    )
    out = {
        int(key): frozenset([a for a in value if isinstance(a, str) and a][:MAX_PER_LINK])
        for key, value in body.items()
        if isinstance(key, str) and key.isdecimal() and isinstance(value, list)
    }
    return {i: names for i, names in out.items() if names}


def record(journal: Journal, steps: Sequence[Step]) -> dict[int, frozenset[str]]:
    """The journal once ``steps`` add their altnames (a full link's entry takes no more)."""
    out = {i: set(names) for i, names in journal.items()}
    for step in steps:
        if isinstance(step, AddAltname):
            names = out.setdefault(step.ifindex, set())
            if len(names) < MAX_PER_LINK:
                names.add(step.altname)
    return {i: frozenset(names) for i, names in out.items() if names}


def prune(journal: Journal, state: NetState) -> dict[int, frozenset[str]]:
    """The journal without what the links in ``state`` do not have."""
    out = {}
    for ifindex, names in journal.items():
        link = state.link(ifindex)
        kept = names.intersection(link.altnames) if link is not None else frozenset()
        if kept:
            out[ifindex] = kept
    return out


def forget(journal: Journal, results: Sequence[StepResult]) -> dict[int, frozenset[str]]:
    """The journal without the altnames ``results`` removed."""
    gone = {
        (r.step.ifindex, r.step.altname)
        for r in results
        if r.ok and isinstance(r.step, RemoveAltname)
    }
    out = {i: frozenset(a for a in names if (i, a) not in gone) for i, names in journal.items()}
    return {i: names for i, names in out.items() if names}


def save(state_dir: Path, journal: Journal) -> None:
    """Write the journal (remove the file when empty). Raises OSError."""
    body = {str(i): sorted(names) for i, names in journal.items()}
    journal_file.save_object(state_dir / JOURNAL_FILE, body)
