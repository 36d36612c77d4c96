"""Pure: which addresses kvdev added, on kernels that do not keep IFA_PROTO.

Linux keeps an address's protocol (IFA_PROTO, kernel 5.18) and kvdev marks every address it
adds with ``KVDEV_PROTO``; planning removes only addresses with that mark. An older kernel
accepts the mark and forgets it: its addresses come back with no protocol at all (``proto`` is
None), and kvdev could never tell its own from an admin's, so it would never remove one.
On those kernels the agent keeps a journal of what it added, ``ifindex -> addresses``
(``adapters.address_journal``), and ``attribute`` gives a journaled address without a
protocol kvdev's mark before planning sees the state: removal, the safety policy and the
putting back after a rename then treat it as kvdev's, exactly as on a newer kernel.

The journal only ever holds what kvdev added and the kernel still has without a protocol:
``record`` adds what a pass added and drops what it removed; ``prune`` drops what the kernel
no longer has, or now reports with a protocol (it keeps the mark itself).

No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kvdev.guest.core.observed import KVDEV_PROTO, NetState
from kvdev.guest.core.steps import AddAddress, RemoveAddress, StepResult

Journal = Mapping[int, frozenset[str]]


def record(journal: Journal, results: Sequence[StepResult]) -> dict[int, frozenset[str]]:
    """The journal after a pass: what it added with kvdev's mark in, what it removed out."""
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


def prune(journal: Journal, state: NetState) -> dict[int, frozenset[str]]:
    """The journal without what ``state`` has not, or has with a protocol of its own."""
    bare = {(a.ifindex, a.address) for a in state.addresses if a.proto is None}
    out = {i: frozenset(a for a in addrs if (i, a) in bare) for i, addrs in journal.items()}
    return {i: a for i, a in out.items() if a}


def attribute(state: NetState, journal: Journal) -> NetState:
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
