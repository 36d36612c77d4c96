"""The depth-first, first-fit search over claims, requests, alternatives and devices.

A port of upstream's v1.37.2 allocator search (structured/internal/experimental, the variant
the scheduler picks with every gate on) with its mutable state and its exact order of checks,
so that it answers as the scheduler does. Owns:

* ``start``: the claims as plans (``plans.plan_claims``: what does not depend on the node,
  made once for every run of the same claims; ``prepare`` makes them for this run only),
  checked in upstream's order (per claim: per request the gates, then each (sub)request; an
  ``All`` request lists its devices right away, pool by pool: an incomplete or invalid pool
  is an error where it comes in that order, class K; the selectors of every device are
  evaluated; devices whose capacity could never serve the request are left out, what is in
  use is checked only when a device is picked; then the 32-result bound and the
  constraints).
* the recursion (``_one``): claims in order, requests in order, firstAvailable alternatives in
  order, devices as combinations in pool/slice/device order; a claim's result limit is
  decided per alternative before any device is tried (``EXCEEDED`` backtracks to the nearest
  firstAvailable choice, and stops at the claim's boundary).
* one candidate (``_allocate``, upstream's allocateDevice): in use (admin access: only within
  the claim), selectors (lazy, cached per request and device), the device's node (per-device
  selection), capacity, then the pick: partitionable gate, compatibility groups (KEP-5963)
  and shared counters (both skipped for a multi-allocatable device already shared), taints,
  constraints (an ``All`` device that fails one is an error; derived attributes are evaluated
  here, when a constraint compares them), capacity once more. A candidate rejected by a later
  check gives back everything the earlier checks took (upstream's rollbackDevice), and so
  does a pick the search backtracks over.
* the filter timeout: the search gives up with ``filter-timeout`` past its deadline, as the
  scheduler's Filter does (``allocate(..., timeout=)``).
* ``notes``: remarks for ``--explain`` (none are made by the search today: every decision
  follows the API's rule as upstream v1.37.2 applies it).

Turning the picks into API results is ``results``' job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from kvdev.host.allocation import capacity as cap
from kvdev.host.allocation.constraints import Constraint, Value, lookup
from kvdev.host.allocation.counters import Counters
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.groups import Groups, baseline, device_groups, narrow
from kvdev.host.allocation.hopeless import hopeless
from kvdev.host.allocation.plans import (
    RESULTS_LIMIT,
    AllocationFailedError,
    ClaimPlan,
    Planned,
    Request,
    Selection,
    check_limit,
    plan_claims,
)
from kvdev.host.allocation.pools import Candidate, DeviceID, Pool
from kvdev.host.allocation.taints import toleration_for
from kvdev.host.k8s.claim import ResourceClaim
from kvdev.host.k8s.common import DeviceTaint, DeviceToleration
from kvdev.host.k8s.resource import DeviceClass

FAIL, OK, EXCEEDED = 0, 1, 2
_UNSEEN = object()  # a constraint value not looked up yet
PROBE_STEPS = 8192  # after this many steps (or PROBE_WORK devices looked at) ...
PROBE_WORK = 1_000_000  # ... the search asks once whether it is hopeless (``hopeless``)


class _Stop(Exception):  # noqa: N818 - control flow, not an error
    """Unwinds the recursion: the search was proven hopeless, or ran out of steps."""


def tolerated(taint: DeviceTaint, tolerations: Sequence[DeviceToleration]) -> bool:
    """Some toleration matches the taint (key, operator/value, effect)."""
    return toleration_for(taint, tolerations) is not None


@dataclass(slots=True, eq=False)
class Pick:
    """One device chosen for one (sub)request."""

    request: Request
    position: int
    candidate: Candidate
    multi: bool
    shared: bool  # gets a shareID
    consumed: dict[str, Fraction] | None  # consumedCapacity (multi-allocatable devices)
    constraints: tuple[Constraint, ...]
    groups: Groups  # before the pick, to restore
    charged: bool  # took shared counters (and joined the compatibility groups)


@dataclass(frozen=True, slots=True)
class Clock:
    """The filter timeout: ``now()`` in seconds and the seconds allowed (0: no limit).

    The search reads ``now()`` once every ``every`` steps (a power of two).
    """

    now: Callable[[], float]
    timeout: float
    every: int = 1024


class Search:
    """One allocator run (module docstring)."""

    def __init__(  # noqa: PLR0913 - the run's inputs, keyword-only
        self,
        *,
        pools: Sequence[Pool],
        allocated: frozenset[DeviceID] | set[DeviceID],
        allocated_capacity: Mapping[DeviceID, Mapping[str, Fraction]],
        features: Features,
        selection: Selection,
        clock: Clock | None = None,
        node: str = "",
        shortcuts: bool = True,
    ) -> None:
        self.pools = list(pools)
        self.shortcuts = shortcuts
        self.candidates = [c for p in self.pools if p.usable for c in p.candidates]
        self._start: dict[int, int] = {}
        pos = 0
        for p in self.pools:
            if p.usable:
                self._start[id(p)] = pos
                pos += len(p.candidates)
        self.features = features
        self.consumable = features.DRAConsumableCapacity
        self.partitionable = features.DRAPartitionableDevices
        self.taints = features.DRADeviceTaints
        self.binding = features.DRADeviceBindingConditions
        self.aggregated = allocated_capacity
        # DRAConsumableCapacity off: a result with a shareID holds its device (class I).
        self.allocated = allocated if self.consumable else allocated | frozenset(allocated_capacity)
        self.selection = selection
        self.counters = Counters(self.allocated, self.aggregated)
        self.allocating: dict[DeviceID, set[int]] = {}
        self.picking: dict[DeviceID, dict[str, Fraction]] = {}
        self._shares: dict[DeviceID, int] = {}  # shares of the run per device in ``picking``
        self.grouped = features.DRADeviceCompatibilityGroups and any(
            p.grouped for p in self.pools if p.usable
        )
        self.groups: Groups = self._initial_groups()
        self.plans: list[ClaimPlan] = []
        self.results: list[list[Pick]] = []
        self._values: dict[tuple[int, str], Value | None] = {}
        self.notes: dict[str, None] = {}
        self.steps = 0
        self.work = 0  # devices the loops looked at (roughly)
        self.stopped = ""  # why the search stopped early, when it did
        self._probe_at = PROBE_STEPS if shortcuts else -1
        self._max_steps = -1  # a bounded search (``alone``): steps ...
        self._max_work = -1  # ... and devices looked at
        self._classes: Mapping[str, DeviceClass] = {}
        self.node = node
        self._clock = clock
        self._deadline = (
            clock.now() + clock.timeout if clock is not None and clock.timeout > 0 else None
        )
        self._mask = (clock.every - 1) if clock is not None else 0

    # ------------------------------------------------------------------ state helpers

    def _initial_groups(self) -> Groups:
        """Groups (KEP-5963) of the devices allocated before the run, per counter set.

        Upstream's compatibilityGroupsBaselineForPool, for the pools with groups.
        """
        groups: dict[tuple[str, str, str], frozenset[str]] = {}
        if not self.grouped:
            return groups
        held = {*self.allocated, *self.aggregated}
        for pool in self.pools:
            if not (pool.usable and pool.grouped):
                continue
            for name, device in pool.devices():
                if (pool.driver, pool.name, name) in held:
                    baseline(device_groups(pool.id, device), groups)
        return groups

    # ------------------------------------------------------------------ preparing

    def prepare(self, claims: Sequence[ResourceClaim], classes: Mapping[str, DeviceClass]) -> None:
        """Plan every claim in upstream's order of checks (module docstring).

        Raises:
            AllocationFailedError: a claim can never be allocated as written, an ``All``
                request meets an incomplete or invalid pool, or a selector fails.
        """
        self.start(plan_claims(claims, classes, self.features))

    def start(self, planned: Planned) -> None:
        """Take claims planned once (``plan_claims``) for this run: the node's part of it.

        Resets the plans' per-run parts, lists each ``All`` request's devices, bounds each
        claim's results, and raises the planning's error where upstream meets it.

        Raises:
            AllocationFailedError: as ``prepare``.
        """
        n = len(self.candidates)
        self._classes = planned.classes
        for k, plan in enumerate(planned.plans):
            for slot in plan.slots:
                slot.selected = 0
                for alt in slot.alternatives:
                    alt.sel = [None] * n
                    alt.need = [None] * n
                    alt.taint = [None] * n
                    alt.fit = [None] * n
                    alt.first = [_UNSEEN] * n
                    if alt.all_mode:
                        self._all_devices(plan.label, alt)
            if k == planned.complete:
                break
            if not plan.bounded:
                check_limit(plan)
            for con in plan.constraints:
                con.reset()
            self.plans.append(plan)
            self.results.append([])
        if planned.error is not None:
            raise AllocationFailedError(*planned.error)

    def _all_devices(self, label: str, alt: Request) -> None:
        alt.all_devices = []
        for pool in self.pools:
            state = "being updated" if pool.incomplete else "invalid" if pool.invalid else ""
            if state:
                raise AllocationFailedError(
                    f"pool-{'incomplete' if pool.incomplete else 'invalid'}",
                    f"claim {label}, request {alt.name}: asks for all devices, but resource "
                    f"pool {pool.driver}/{pool.name} is currently {state}",
                )
            start = self._start[id(pool)]
            for pos in range(start, start + len(pool.candidates)):
                # Static capacity only: what is in use is checked when the device is picked.
                if self.selectable(alt, pos) and (
                    not self.consumable or self.fits_static(alt, pos)
                ):
                    alt.all_devices.append(pos)
        alt.num = len(alt.all_devices)

    # ------------------------------------------------------------------ checks of one device

    def selectable(self, alt: Request, pos: int) -> bool:
        """Selectors (class, then request), the device's node, derived attributes.

        Raises:
            AllocationFailedError: a selector or a derived attribute fails.
        """
        candidate = self.candidates[pos]
        if candidate.binding and not self.binding:
            return False
        hit = alt.sel[pos]
        if hit is None:
            hit = self.selection.matches(alt, candidate) and candidate.visible
            alt.sel[pos] = hit
        return hit

    def _need(self, alt: Request, pos: int) -> cap.Need | None:
        need = alt.need[pos]
        if need is None:
            need = cap.need(alt.capacity, self.candidates[pos].caps)
            alt.need[pos] = False if need is None else need
        return None if need is False else need  # type: ignore[return-value]

    def fits(self, alt: Request, pos: int) -> bool:
        """Upstream's capacity check: the request's need on top of what is in use."""
        need = self._need(alt, pos)
        if need is None:
            return False
        ident = self.candidates[pos].id
        return cap.fits(need, self.aggregated.get(ident), self.picking.get(ident))

    def fits_static(self, alt: Request, pos: int) -> bool:
        """Capacity for ``alt`` with nothing in use (an ``All`` request's device list)."""
        need = self._need(alt, pos)
        return need is not None and cap.fits(need, None, None)

    def fits_alone(self, alt: Request, pos: int) -> bool:
        """Capacity for ``alt`` with nothing of this run picked (``hopeless``)."""
        need = self._need(alt, pos)
        return need is not None and cap.fits(
            need, self.aggregated.get(self.candidates[pos].id), None
        )

    def blocked(self, alt: Request, pos: int) -> bool:
        """A NoSchedule/NoExecute taint of the device is not tolerated by ``alt``."""
        hit = alt.taint[pos]
        if hit is None:
            hit = any(not tolerated(t, alt.tolerations) for t in self.candidates[pos].blocking)
            alt.taint[pos] = hit
        return hit

    def verdict(self, alt: Request, pos: int) -> str | None:
        """The first check that rejects the device for ``alt`` on its own, or None.

        The search's checks in the search's order, against the devices in use before the run
        and an empty constraint memory; nothing of the run's state changes (``explain``).

        Raises:
            AllocationFailedError: a selector or a derived attribute fails.
        """
        candidate = self.candidates[pos]
        ident = candidate.id
        if not alt.admin and ident in self.allocated:
            return "in-use"
        if candidate.binding and not self.binding:
            return "gated"
        if not self.selection.matches(alt, candidate):
            return "selector"
        if not candidate.visible:
            return "other-node"
        if self.consumable and not self.fits(alt, pos):
            return "capacity"
        return self._pick_verdict(alt, pos)

    def _pick_verdict(self, alt: Request, pos: int) -> str | None:
        """``verdict``'s part for the checks of upstream's allocateDevice."""
        candidate = self.candidates[pos]
        multi = self.consumable and candidate.multi
        if candidate.need:
            if not self.partitionable:
                return "gated"
            if not (multi and candidate.id in self.aggregated):
                declared = device_groups(candidate.pool.id, candidate.device)
                if self.grouped and narrow(self.groups, declared) is None:
                    return "compatibility-group"
                if not self.counters.take(candidate):
                    return "counters"
                self.counters.release(candidate)
        if self.taints and candidate.blocking and self.blocked(alt, pos):
            return "taint"
        for con in alt.applicable:
            value = self.value(con, alt, pos)
            if value is None:
                return "constraint"
        return None

    # ------------------------------------------------------------------ the recursion

    def run(self) -> bool:
        """Search; True when every claim got its devices (the picks are in ``results``).

        Raises:
            AllocationFailedError: a selector fails, an ``All`` device breaks a constraint,
                or the filter timeout passes.
        """
        try:
            return self._one(0, 0, 0, 0, False, 0) == OK  # noqa: FBT003 - internal recursion
        except _Stop:
            return False

    def alone(self, claim: ResourceClaim, *, steps: int, work: int) -> tuple[bool | None, int]:
        """Whether ``claim`` fits alone, from the devices in use before the run.

        At most ``steps`` steps and ``work`` devices looked at, and no later than this run's
        deadline: None when that is not enough, or on an error (a selector failing).
        Returns the devices looked at too.
        """
        trial = Search(
            pools=self.pools,
            allocated=self.allocated,
            allocated_capacity=self.aggregated,
            features=self.features,
            selection=self.selection,
            node=self.node,
        )
        trial._probe_at = -1
        trial._max_steps, trial._max_work = steps, work
        trial._clock, trial._deadline, trial._mask = self._clock, self._deadline, self._mask
        try:
            trial.prepare([claim], self._classes)
            found = trial._one(0, 0, 0, 0, False, 0) == OK  # noqa: FBT003
        except (_Stop, AllocationFailedError):
            return None, trial.work
        return found, trial.work

    def check_deadline(self) -> None:
        """Raise ``filter-timeout`` when the run's deadline has passed (``hopeless`` asks).

        Raises:
            AllocationFailedError: ``filter-timeout``.
        """
        if self._deadline is not None:
            self._expired()

    def _probe(self) -> None:
        """Ask once whether the search is hopeless; stop it if so."""
        self._probe_at = -1
        if hopeless(self):
            raise _Stop

    def _tick(self) -> None:
        self.steps += 1
        if self.steps == self._probe_at:
            self._probe()
        if self.steps == self._max_steps:
            raise _Stop
        if self._deadline is not None and not self.steps & self._mask:
            self._expired()

    def _expired(self) -> None:
        """Raise ``filter-timeout`` when the deadline has passed."""
        assert self._clock is not None
        assert self._deadline is not None
        if self._clock.now() > self._deadline:
            claims = ", ".join(p.label for p in self.plans)
            raise AllocationFailedError(
                "filter-timeout",
                f"node {self.node}: timed out trying to allocate devices for claims {claims}: "
                f"the search ran past the filter timeout of {self._clock.timeout:g} s after "
                f"{self.steps:,} steps (as the scheduler's Filter does; --filter-timeout)",
            )

    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> int:  # noqa: PLR0911, C901 - upstream's allocateOne, one branch per case
        self._tick()
        if ci == len(self.plans):
            return OK
        slots = self.plans[ci].slots
        if ri == len(slots):
            done = self._one(ci + 1, 0, 0, 0, False, 0)  # noqa: FBT003
            return FAIL if done == EXCEEDED else done
        slot = slots[ri]
        if slot.first_available and not in_sub:
            exceeded = True
            for s in range(len(slot.alternatives)):
                done = self._one(ci, ri, s, 0, True, 0)  # noqa: FBT003
                if done == EXCEEDED:
                    continue
                exceeded = False
                if done == OK:
                    slot.selected = s
                    return OK
            return EXCEEDED if exceeded else FAIL
        alt = slot.alternatives[si]
        if alt.all_mode and not alt.all_devices:
            return FAIL
        if di >= alt.num:
            return self._one(ci, ri + 1, 0, 0, False, 0)  # noqa: FBT003
        if len(self.results[ci]) + alt.num - di > RESULTS_LIMIT:
            return EXCEEDED
        if alt.all_mode:
            pick = self._allocate(ci, alt, alt.all_devices[di], must=True)
            if pick is None:
                return FAIL
            done = self._one(ci, ri, si, di + 1, in_sub, 0)
            if done != OK:
                self._deallocate(ci, pick)
            return done
        return self._scan(ci, ri, si, di, in_sub, start, alt)

    def _scan(  # noqa: C901, PLR0912 - the hot loop, kept in one piece
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, alt: Request
    ) -> int:
        """Upstream's device loop for one device of ``alt``, from position ``start``.

        A candidate the first constraint of the request would refuse is passed over before
        the capacity check and the pick, when that refusal leaves nothing behind (the device
        takes no counters): upstream rejects it there too, with no other effect.
        """
        allocated, allocating = self.allocated, self.allocating
        candidates = self.candidates
        admin = alt.admin
        sel, fit, first = alt.sel, alt.fit, alt.first
        first_con = alt.applicable[0] if alt.applicable and self.shortcuts else None
        # Not for a derived attribute: evaluating it early could fail where upstream, which
        # evaluates it only after the counters and taints, would not reach it.
        quiet = first_con is not None and first_con.attribute not in alt.derived_names
        consumable = self.consumable
        timed = self._deadline is not None
        self._account(len(candidates) - start)
        for pos in range(start, len(candidates)):
            if timed and not pos & 0x3FF:
                self._expired()
            candidate = candidates[pos]
            ident = candidate.id
            if admin:
                if ci in allocating.get(ident, ()):
                    continue
            elif ident in allocated or allocating.get(ident):
                continue
            ok = sel[pos]
            if ok is None:
                ok = self.selectable(alt, pos)
            if not ok:
                continue
            if quiet and not candidate.need:
                assert first_con is not None
                value = first[pos]
                if value is _UNSEEN:
                    value = first[pos] = self.value(first_con, alt, pos)
                if not first_con.accepts(value):  # type: ignore[arg-type]
                    continue
            if consumable:
                fits = fit[pos]
                if fits is None:
                    fits = self.fits(alt, pos)
                    if not candidate.multi:
                        fit[pos] = fits
                if not fits:
                    continue
            pick = self._allocate(ci, alt, pos, must=False)
            if pick is None:
                continue
            done = self._one(ci, ri, si, di + 1, in_sub, pos + 1)
            if done == OK:
                return OK
            self._deallocate(ci, pick)
            if done == EXCEEDED:
                return EXCEEDED
        return FAIL

    def _account(self, looked: int) -> None:
        """Count devices a loop will look at; probe once past PROBE_WORK; stop a bounded run."""
        self.work += looked
        if self.work > PROBE_WORK and self._probe_at > 0:
            self._probe()
        if 0 <= self._max_work < self.work:
            raise _Stop

    def value(self, con: Constraint, alt: Request, pos: int) -> Value | None:
        """The value ``con`` compares for the device (upstream's lookupAttribute).

        The request's derived attribute of that name (evaluated now), else the device's own.

        Raises:
            AllocationFailedError: the derived attribute fails.
        """
        candidate = self.candidates[pos]
        if con.attribute in alt.derived_names:
            return self.selection.derive(alt, candidate, con.attribute)
        return lookup(candidate.driver, candidate.device, con.attribute, None, self._values)

    # ------------------------------------------------------------------ one pick

    def _allocate(self, ci: int, alt: Request, pos: int, *, must: bool) -> Pick | None:  # noqa: C901, PLR0911, PLR0912 - upstream's allocateDevice, in its order
        candidate = self.candidates[pos]
        ident = candidate.id
        multi = self.consumable and candidate.multi
        if not multi and alt.admin and ci in self.allocating.get(ident, ()):
            return None
        if not alt.admin and (ident in self.allocated or self.allocating.get(ident)):
            return None
        consumes = bool(candidate.need)
        if consumes and not self.partitionable:
            return None
        # A further share of a multi-allocatable device in use: its counters (and groups)
        # are accounted for already.
        charge = consumes and not (multi and (ident in self.aggregated or ident in self.picking))
        before = self.groups
        if charge and self.grouped:
            groups = narrow(before, device_groups(candidate.pool.id, candidate.device))
            if groups is None:
                return None
            self.groups = groups
        if charge and not self.counters.take(candidate):
            self.groups = before
            return None
        if self.taints and candidate.blocking and self.blocked(alt, pos):
            self._undo(alt, candidate, 0, before, charge=charge)
            return None
        constraints = alt.applicable
        for i, con in enumerate(constraints):
            if not con.add(alt.base, self.value(con, alt, pos)):
                self._undo(alt, candidate, i, before, charge=charge)
                if must:
                    raise AllocationFailedError(
                        "constraint-unsatisfiable",
                        f"claim {self.plans[ci].label}, request {alt.name}: cannot add device "
                        f"{'/'.join(ident)} because a claim constraint would not be satisfied",
                    )
                return None
        consumed: dict[str, Fraction] | None = None
        if self.consumable:
            if not self.fits(alt, pos):
                self._undo(alt, candidate, len(constraints), before, charge=charge)
                return None
            if multi:
                need = self._need(alt, pos) or ()
                consumed = {name: amount for name, amount, _ in need}
                self._share(ident, consumed)
        if not multi:
            self.allocating.setdefault(ident, set()).add(ci)
        kept = consumed or None
        pick = Pick(alt, pos, candidate, multi, multi, kept, constraints, before, charge)
        self.results[ci].append(pick)
        return pick

    def _undo(
        self, alt: Request, candidate: Candidate, added: int, groups: Groups, *, charge: bool
    ) -> None:
        """Take back what a rejected candidate changed (upstream's rollbackDevice)."""
        for con in alt.applicable[:added]:
            con.remove(alt.base)
        self.groups = groups
        if charge:
            self.counters.release(candidate)

    def _deallocate(self, ci: int, pick: Pick) -> None:
        alt = pick.request
        ident = pick.candidate.id
        self.results[ci].pop()
        if pick.multi:
            self._unshare(ident, pick.consumed or {})
        else:
            mine = self.allocating.get(ident)
            if mine is not None:
                mine.discard(ci)
        for con in pick.constraints:
            con.remove(alt.base)
        self.groups = pick.groups
        if pick.charged:
            self.counters.release(pick.candidate)

    def _share(self, ident: DeviceID, consumed: Mapping[str, Fraction]) -> None:
        """Add a share to the run's capacity in use (the device counts as shared from now)."""
        cap.add(self.picking.setdefault(ident, {}), consumed)
        self._shares[ident] = self._shares.get(ident, 0) + 1

    def _unshare(self, ident: DeviceID, consumed: Mapping[str, Fraction]) -> None:
        """Take a share off the run's capacity in use; forget the device with its last share."""
        share = self.picking[ident]
        for name, amount in consumed.items():
            if name in share:
                share[name] -= amount
        left = self._shares[ident] - 1
        if left:
            self._shares[ident] = left
        else:
            del self._shares[ident]
            del self.picking[ident]
