"""Pure: what the agent's journals hold after a pass, and which steps wait for them.

Three journals let a later pass undo or tell apart what kvdev did (``adapters.state`` keeps
them on disk; no I/O here):

* the rename journal, ``ifindex -> name``: the name a link had before a trade of names moved it
  to ``planning.temp_name``, recorded before the rename (the first name wins); kept while a
  link in it still holds its temporary name, then dropped whole (finished renames freed names
  a later pass may give back);
* the address journal, ``ifindex -> addresses``: what kvdev added with its mark on a kernel
  that forgets IFA_PROTO (its addresses come back with no protocol); ``attribute`` gives those
  kvdev's mark again before planning sees them, so removal and the safety policy treat them as
  on a newer kernel. It holds only what the kernel still has without a protocol;
* the altname journal, ``ifindex -> altnames``: the altnames kvdev added, recorded before they
  are added (the kernel keeps no mark on an altname), at most ``MAX_PER_LINK`` a link; kept
  while the links have them, forgotten once removed.

No link is renamed before its rename journal is on disk, and no altname added before the
altname journal holds it: ``hold_renames`` and ``hold_altnames`` say which steps wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kvdev.guest.core.observed import KVDEV_PROTO, NetState
from kvdev.guest.core.planning import temp_name
from kvdev.guest.core.steps import (
    AddAddress,
    AddAltname,
    RemoveAddress,
    RemoveAltname,
    Rename,
    SetDown,
    Step,
    StepResult,
)

MAX_PER_LINK = 16  # altnames: kvdev wants one a link and removes the others it added

Renames = Mapping[int, str]
Names = Mapping[int, frozenset[str]]  # ifindex -> addresses, or altnames


@dataclass
class InForce:
    """The journals a pass acts on: pruned to what holds, then recorded as it goes."""

    renames: dict[int, str]
    addresses: dict[int, frozenset[str]]
    altnames: dict[int, frozenset[str]]


def prune(renames: Renames, addresses: Names, altnames: Names, state: NetState) -> InForce:
    """The journals as read, pruned to what ``state`` still holds."""
    return InForce(
        prune_renames(renames, state),
        prune_addresses(addresses, state),
        prune_altnames(altnames, state),
    )


def record_renames(journal: Renames, steps: Sequence[Step]) -> dict[int, str]:
    """The rename journal once ``steps`` move links to temporary names (the first name wins)."""
    out = dict(journal)
    for step in steps:
        if isinstance(step, Rename) and step.new_name == temp_name(step.ifindex):
            out.setdefault(step.ifindex, step.ifname)
    return out


def prune_renames(journal: Renames, state: NetState) -> dict[int, str]:
    """The rename journal while a link in it still holds its temporary name, else nothing."""
    unfinished = any(
        (link := state.link(ifindex)) is not None and link.ifname == temp_name(ifindex)
        for ifindex in journal
    )
    return dict(journal) if unfinished else {}


def hold_renames(steps: Sequence[Step], why: str, *, retryable: bool) -> list[StepResult]:
    """The failed results of the steps of a trade (renames, the link-down before one)."""
    error = f"not done: {why}; no link is renamed without its journal"
    return [
        StepResult(s, ok=False, error=error, retryable=retryable)
        for s in steps
        if isinstance(s, Rename | SetDown)
    ]


def record_addresses(journal: Names, results: Sequence[StepResult]) -> dict[int, frozenset[str]]:
    """The address journal after a pass: what it added with kvdev's mark in, what it removed out."""
    out = {i: set(a) for i, a in journal.items()}
    for r in results:
        step = r.step
        if not r.ok:
            continue
        if isinstance(step, AddAddress) and step.protocol == KVDEV_PROTO:
            out.setdefault(step.ifindex, set()).add(step.address)
        elif isinstance(step, RemoveAddress):
            out.get(step.ifindex, set()).discard(step.address)
    return {i: frozenset(a) for i, a in out.items() if a}


def prune_addresses(journal: Names, state: NetState) -> dict[int, frozenset[str]]:
    """The address journal without what ``state`` has not, or has with a protocol of its own."""
    bare = {(a.ifindex, a.address) for a in state.addresses if a.proto is None}
    out = {i: frozenset(a for a in addrs if (i, a) in bare) for i, addrs in journal.items()}
    return {i: a for i, a in out.items() if a}


def attribute(state: NetState, journal: Names) -> NetState:
    """``state`` with each journaled address that has no protocol given kvdev's."""
    if not journal:
        return state
    addresses = tuple(
        replace(a, proto=KVDEV_PROTO)
        if a.proto is None and a.address in journal.get(a.ifindex, ())
        else a
        for a in state.addresses
    )
    return replace(state, addresses=addresses)


def record_altnames(journal: Names, steps: Sequence[Step]) -> dict[int, frozenset[str]]:
    """The altname journal once ``steps`` add their altnames (a full link's takes no more)."""
    out = {i: set(names) for i, names in journal.items()}
    for step in steps:
        if isinstance(step, AddAltname):
            names = out.setdefault(step.ifindex, set())
            if len(names) < MAX_PER_LINK:
                names.add(step.altname)
    return {i: frozenset(names) for i, names in out.items() if names}


def prune_altnames(journal: Names, state: NetState) -> dict[int, frozenset[str]]:
    """The altname journal without what the links in ``state`` do not have."""
    out = {}
    for ifindex, names in journal.items():
        link = state.link(ifindex)
        kept = names.intersection(link.altnames) if link is not None else frozenset()
        if kept:
            out[ifindex] = kept
    return out


def forget_altnames(journal: Names, results: Sequence[StepResult]) -> dict[int, frozenset[str]]:
    """The altname journal without the altnames ``results`` removed."""
    gone = {
        (r.step.ifindex, r.step.altname)
        for r in results
        if r.ok and isinstance(r.step, RemoveAltname)
    }
    out = {i: frozenset(a for a in names if (i, a) not in gone) for i, names in journal.items()}
    return {i: names for i, names in out.items() if names}


def hold_altnames(
    adds: Sequence[AddAltname], journal: Names, why: str | None, *, retryable: bool
) -> list[StepResult]:
    """The failed results of the ``adds`` the altname journal ``journal`` does not cover.

    All of them when it could not be saved (``why``), else each past ``MAX_PER_LINK``.
    """
    held: list[StepResult] = []
    for step in adds:
        if why is not None:
            error = f"not done: {why}; no altname is added without its journal"
            held.append(StepResult(step, ok=False, error=error, retryable=retryable))
        elif step.altname not in journal.get(step.ifindex, ()):
            error = (
                f"not done: the altname journal holds {MAX_PER_LINK} "
                f"altnames kvdev added to {step.ifname} already"
            )
            held.append(StepResult(step, ok=False, error=error))
    return held
