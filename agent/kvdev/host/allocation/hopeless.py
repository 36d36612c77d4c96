"""Proving a search hopeless, so that it can stop where upstream's would only end later.

Upstream's search is exhaustive: nine one-device claims over eight devices try every partial
assignment (class L of issue 15) before answering "unschedulable". When such a search has
run for a while, ``hopeless(search)`` tries to prove up front that no complete solution
exists, and the search stops with the answer upstream would reach. Three proofs:

* **one request**: some request has, in every alternative, fewer devices it could ever use
  than it wants (whatever else is picked);
* **counting**: a maximum matching of the requests' device counts (a firstAvailable request:
  its smallest alternative; adminAccess requests and multi-allocatable devices do not count)
  onto the devices each request could use on its own is smaller than the total count;
* **one claim alone**: some claim cannot be allocated even alone, from the devices in use
  before the run (a bounded search of its own, the same port of upstream's).

All are sound only for the answer "unschedulable", so they are tried only when stopping
early cannot change what upstream would print:

* no allocationMode All request is covered by a constraint (such a request can end the run
  with an error instead);
* every selector of every request, and every derived attribute a constraint compares,
  evaluates on every device without an error (a CEL error upstream would reach would end the
  run with that error);
* for the last two proofs, no candidate is both multi-allocatable and counter-consuming (then
  a device shared by an earlier claim skips its counter check, and claims are no longer
  independent).

Under these, whatever an earlier claim picks only makes a later claim harder, so "impossible
alone" or "impossible by counting" holds in every state the search can reach.
"""

from __future__ import annotations

from typing import Protocol

from kvdev.host.allocation.constraints import Constraint
from kvdev.host.allocation.plans import AllocationFailedError, ClaimPlan, Request
from kvdev.host.allocation.pools import Candidate, DeviceID
from kvdev.host.k8s.claim import ResourceClaim


class Search(Protocol):
    """What the proofs read of a search (``search.Search``), and the one field they set."""

    plans: list[ClaimPlan]
    candidates: list[Candidate]
    allocated: frozenset[DeviceID] | set[DeviceID]
    consumable: bool
    partitionable: bool
    taints: bool
    stopped: str

    def check_deadline(self) -> None:
        """Raise ``filter-timeout`` when the run's deadline has passed."""

    def selectable(self, alt: Request, pos: int) -> bool:
        """Whether ``alt`` could take the candidate at ``pos`` (selectors, node, attributes)."""

    def value(self, con: Constraint, alt: Request, pos: int) -> object:
        """The attribute ``con`` compares, of the candidate at ``pos``."""

    def fits_alone(self, alt: Request, pos: int) -> bool:
        """Capacity for ``alt`` with nothing of this run picked."""

    def blocked(self, alt: Request, pos: int) -> bool:
        """A taint of the candidate ``alt`` does not tolerate."""

    def alone(self, claim: ResourceClaim, *, steps: int, work: int) -> tuple[bool | None, int]:
        """Whether ``claim`` can be allocated alone (None: not within the bounds), and the work."""


ALONE_STEPS = 5_000  # the bounded search of one claim alone: steps ...
ALONE_WORK = 100_000  # ... devices looked at
ALONE_TOTAL = 400_000  # ... for all the claims


def _no_errors(search: Search) -> bool:
    """No request can end the run with an error (selectors evaluated on the way)."""
    for plan in search.plans:
        for slot in plan.slots:
            for alt in slot.alternatives:
                if alt.all_mode and alt.applicable:
                    return False
                try:
                    _evaluate(search, alt)
                except AllocationFailedError as e:
                    if e.keyword == "filter-timeout":
                        raise
                    return False
    return True


def _evaluate(search: Search, alt: Request) -> None:
    """Evaluate ``alt``'s selectors, and the derived attributes constraints compare, everywhere.

    Raises:
        AllocationFailedError: one fails, or the filter timeout passed.
    """
    derived = [c for c in alt.applicable if c.attribute in alt.derived_names]
    for pos in range(len(search.candidates)):
        if not pos & 0x3FF:
            search.check_deadline()
        if search.selectable(alt, pos):
            for con in derived:
                search.value(con, alt, pos)


def _could(search: Search, alt: Request) -> list[int]:
    """Positions ``alt`` could ever take, whatever else is picked."""
    out = []
    for pos, candidate in enumerate(search.candidates):
        if not alt.sel[pos] or (candidate.id in search.allocated and not alt.admin):
            continue
        if search.consumable and not search.fits_alone(alt, pos):
            continue
        if candidate.need and not search.partitionable:
            continue
        if search.taints and candidate.blocking and search.blocked(alt, pos):
            continue
        out.append(pos)
    return out


def _one_request_impossible(search: Search) -> bool:
    for plan in search.plans:
        for slot in plan.slots:
            if not any(
                alt.all_devices if alt.all_mode else len(_could(search, alt)) >= alt.count
                for alt in slot.alternatives
            ):
                return True
    return False


def _usable(search: Search, alt: Request) -> set[int] | None:
    """Positions ``alt`` could take on its own; None when a shareable device serves it."""
    out: set[int] = set()
    for pos in _could(search, alt):
        if search.consumable and search.candidates[pos].multi:
            return None
        out.add(pos)
    return out


def _demands(search: Search) -> list[tuple[int, set[int]]] | None:
    """(devices wanted, positions that may serve them) per request that counts."""
    out = []
    for plan in search.plans:
        for slot in plan.slots:
            wanted: int | None = None
            served: set[int] = set()
            for alt in slot.alternatives:
                if alt.admin:
                    wanted = 0
                    break
                usable = _usable(search, alt)
                if usable is None:
                    wanted = 0
                    break
                served |= usable
                need = len(alt.all_devices) if alt.all_mode else alt.count
                wanted = need if wanted is None else min(wanted, need)
            if wanted:
                out.append((wanted, served))
    return out


def _matching(demands: list[tuple[int, set[int]]]) -> int:
    """How many of the wanted devices can be served by distinct positions at once."""
    owner: dict[int, int] = {}  # position -> demand unit
    units = [served for wanted, served in demands for _ in range(wanted)]

    def augment(unit: int, seen: set[int]) -> bool:
        for pos in units[unit]:
            if pos in seen:
                continue
            seen.add(pos)
            if pos not in owner or augment(owner[pos], seen):
                owner[pos] = unit
                return True
        return False

    return sum(augment(u, set()) for u in range(len(units)))


def _alone_impossible(search: Search) -> bool:
    """Some claim cannot be allocated alone (a bounded search of its own says so)."""
    left = ALONE_TOTAL
    for plan in reversed(search.plans):
        if left <= 0:
            break
        trial, used = search.alone(plan.claim, steps=ALONE_STEPS, work=min(ALONE_WORK, left))
        left -= used
        if trial is False:
            return True
    return False


def hopeless(search: Search) -> bool:
    """Whether the search can stop now with "unschedulable" (module docstring)."""
    if not _no_errors(search):
        return False
    if _one_request_impossible(search):
        search.stopped = "a request can never get as many devices as it wants"
        return True
    if search.consumable and any(c.multi and c.need for c in search.candidates):
        return False
    demands = _demands(search)
    if demands is not None and _matching(demands) < sum(w for w, _ in demands):
        search.stopped = "the requests want more devices than can serve them at once"
        return True
    if _alone_impossible(search):
        search.stopped = "one claim cannot be allocated even alone"
        return True
    return False
