"""The depth-first, first-fit backtracking search: claims -> requests -> alternatives -> devices.

Owns the immutable search ``State`` passed down the recursion, the candidate checks (in use,
selectors, capacity, counters, compatibility groups, taints, constraints), allocationMode
All, adminAccess, the per-claim result limit, binding-condition gating and the run's budget
of device checks (``search-limit``, :data:`SEARCH_BUDGET`). It returns the picks per claim;
turning them into API results is ``allocator``'s job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from kvdev.host.allocation.capacity import (
    CounterKey,
    add,
    consumption,
    counter_need,
    counters_fit,
    fits,
    qualify,
)
from kvdev.host.allocation.constraints import EMPTY, Memory, Values, admit, attribute_values
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.groups import GroupKey, device_groups, narrow
from kvdev.host.allocation.plans import (
    RESULTS_LIMIT,
    AllocationFailedError,
    ClaimPlan,
    Request,
    Selection,
    alt_size,
)
from kvdev.host.allocation.pools import Candidate, DeviceID, Pool, PoolID
from kvdev.host.k8s.common import DeviceTaint, DeviceToleration

_BLOCKING = frozenset({"NoSchedule", "NoExecute"})
# Device checks one run may make (~4-7 us each on a shared 2-core machine: 2-3.5 s in all).
# First fit over many devices with constraints nobody can meet is exponential in the count
# (upstream bounds it by the scheduler's filter timeout); past this: ``search-limit``.
SEARCH_BUDGET = 500_000


@dataclass(frozen=True, slots=True)
class Pick:
    """One device chosen for one (sub)request."""

    request: Request
    candidate: Candidate
    consumed: Mapping[str, Fraction] | None  # only for multi-allocatable devices


@dataclass(frozen=True, slots=True)
class State:
    """Everything the search has decided so far; never mutated, replaced on every pick."""

    picked: frozenset[DeviceID]  # exclusive picks of this run, all claims
    claim_picked: frozenset[DeviceID]  # picks of the current claim (admin or not)
    shares: Mapping[DeviceID, Mapping[str, Fraction]]  # in-run capacity consumption
    counters: Mapping[PoolID, Mapping[CounterKey, Fraction]]  # incl. already allocated
    # per counter set with grouped devices: the groups all of them share (KEP-5963); incl.
    # already allocated devices. A counter set without grouped devices is absent.
    groups: Mapping[GroupKey, frozenset[str]]
    memory: tuple[Memory, ...]  # per constraint of the current claim
    results: tuple[Pick, ...]  # current claim
    done: tuple[tuple[Pick, ...], ...]  # finished claims


def tolerated(taint: DeviceTaint, tolerations: Sequence[DeviceToleration]) -> bool:
    """Some toleration matches the taint (key, operator/value, effect)."""
    for tol in tolerations:
        if tol.key and tol.key != taint.key:
            continue
        if tol.effect and tol.effect != taint.effect:
            continue
        if (tol.operator or "Equal") == "Equal" and (tol.value or "") != (taint.value or ""):
            continue
        return True
    return False


class Search:
    """One allocator run's search over claim plans."""

    def __init__(
        self,
        *,
        plans: Sequence[ClaimPlan],
        pools: Sequence[Pool],
        allocated: frozenset[DeviceID],
        allocated_capacity: Mapping[DeviceID, Mapping[str, Fraction]],
        features: Features,
        selection: Selection,
    ) -> None:
        self.plans = plans
        self.candidates = [c for p in pools if p.complete and not p.invalid for c in p.candidates]
        self.pools = {p.id: p for p in pools}
        self.allocated = allocated
        self.allocated_capacity = allocated_capacity
        self.features = features
        self.selection = selection
        self._final_groups: Mapping[GroupKey, frozenset[str]] = {}
        # What depends only on the (request, device) pair is computed once per run: the search
        # revisits the same pairs many times while backtracking.
        self._consumed: dict[tuple[int, DeviceID], dict[str, Fraction] | None] = {}
        self._values: dict[tuple[DeviceID, str], Values | None] = {}
        self._declared: dict[DeviceID, dict[GroupKey, frozenset[str]]] = {}
        self.budget = SEARCH_BUDGET
        self.steps = 0

    # ------------------------------------------------------------------ entry

    def initial_state(self) -> State:
        """Counters and compatibility groups of allocated devices; nothing picked yet.

        Allocated devices whose groups already have nothing in common (allocated before the
        groups were published, or by something else) leave that counter set with an empty
        intersection: no grouped device can join it.
        """
        counters: dict[PoolID, dict[CounterKey, Fraction]] = {}
        groups: dict[GroupKey, frozenset[str]] = {}
        for driver, pool_name, device in sorted({*self.allocated, *self.allocated_capacity}):
            pool = self.pools.get((driver, pool_name))
            if pool is None or device not in pool.all_devices:
                continue
            used = counters.setdefault(pool.id, {})
            for key, amount in counter_need(pool.all_devices[device]).items():
                used[key] = used.get(key, Fraction(0)) + amount
            declared = device_groups(pool.id, pool.all_devices[device], self.features)
            for gkey, mine in declared.items():
                groups[gkey] = groups[gkey] & mine if gkey in groups else mine
        return State(frozenset(), frozenset(), {}, counters, groups, (), (), ())

    def final_groups(self) -> Mapping[GroupKey, frozenset[str]]:
        """The rolling intersections after the last successful ``run`` (empty before)."""
        return self._final_groups

    def run(self) -> tuple[tuple[Pick, ...], ...] | None:
        """The first complete solution in search order, or None."""
        final = self._claim(0, self.initial_state())
        if final is None:
            return None
        self._final_groups = final.groups
        return final.done

    def static_usable(self, request: Request, candidate: Candidate) -> bool:
        """Selector, gate and capacity-definition filter used to build an All device list."""
        device = candidate.device
        if device.binding_conditions and not self.features.DRADeviceBindingConditions:
            return False
        if not self.selection.matches(request, candidate):
            return False
        if self.features.DRAConsumableCapacity:
            cons = self._consumption(request, candidate)
            if cons is None or not fits(device, {}, cons):
                return False
        return True

    def try_pick(
        self, plan: ClaimPlan, alt: Request, candidate: Candidate, state: State
    ) -> State | str:
        """The search's own check of one candidate (selectors included), outside the search.

        Returns the state after the pick, or the first reason the device is rejected:
        ``in-use``, ``gated``, ``selector``, ``capacity``, ``counters``,
        ``compatibility-group``, ``taint``, ``constraint``. Used by ``explain``; the search
        itself does not call it.

        Raises:
            AllocationFailedError: a selector does not compile or fails at run time.
        """
        return self._try(plan, alt, candidate, state, check_selectors=True)

    # ------------------------------------------------------------------ recursion

    def _claim(self, index: int, state: State) -> State | None:
        if index == len(self.plans):
            return state
        plan = self.plans[index]
        fresh = replace(
            state,
            claim_picked=frozenset(),
            memory=tuple(EMPTY for _ in plan.constraints),
            results=(),
        )
        return self._request(index, 0, fresh)

    def _request(self, ci: int, ri: int, state: State) -> State | None:
        plan = self.plans[ci]
        if ri == len(plan.requests):
            return self._claim(ci + 1, replace(state, done=(*state.done, state.results)))
        for alt in plan.requests[ri]:
            if len(state.results) + alt_size(alt) > RESULTS_LIMIT:
                continue
            if alt.all_mode:
                after = self._pick_all(plan, alt, state)
                found = None if after is None else self._request(ci, ri + 1, after)
            else:
                found = self._pick_n(ci, ri, alt, 0, alt.count, state)
            if found is not None:
                return found
        return None

    def _pick_n(
        self, ci: int, ri: int, alt: Request, start: int, remaining: int, state: State
    ) -> State | None:
        if remaining == 0:
            return self._request(ci, ri + 1, state)
        plan = self.plans[ci]
        for pos in range(start, len(self.candidates)):
            self._step()
            after = self._try(plan, alt, self.candidates[pos], state, check_selectors=True)
            if isinstance(after, State):
                found = self._pick_n(ci, ri, alt, pos + 1, remaining - 1, after)
                if found is not None:
                    return found
        return None

    def _step(self) -> None:
        self.steps += 1
        if self.steps > self.budget:
            claims = ", ".join(
                f"{p.claim.metadata.namespace or 'default'}/{p.claim.metadata.name}"
                for p in self.plans
            )
            raise AllocationFailedError(
                "search-limit",
                f"claims {claims}: gave up after {self.budget:,} device checks over "
                f"{len(self.candidates):,} devices: the counts and constraints leave too many "
                "combinations to try (the scheduler would time out likewise)",
            )

    def _pick_all(self, plan: ClaimPlan, alt: Request, state: State) -> State | None:
        if not alt.all_devices:
            return None
        for candidate in alt.all_devices:
            after = self._try(plan, alt, candidate, state, check_selectors=False)
            if after == "constraint":
                raise AllocationFailedError(
                    "constraint-unsatisfiable",
                    f"claim {plan.claim.metadata.name}: cannot add device "
                    f"{'/'.join(candidate.id)} for request {alt.name} because a claim "
                    "constraint would not be satisfied",
                )
            if not isinstance(after, State):
                return None
            state = after
        return state

    # ------------------------------------------------------------------ one candidate

    def _consumption(self, request: Request, candidate: Candidate) -> dict[str, Fraction] | None:
        key = (id(request), candidate.id)  # requests live as long as the run's plans
        if key not in self._consumed:
            wanted = {qualify(k, candidate.driver): v for k, v in request.capacity.items()}
            self._consumed[key] = consumption(candidate.driver, candidate.device, wanted)
        return self._consumed[key]

    def _try(
        self,
        plan: ClaimPlan,
        alt: Request,
        candidate: Candidate,
        state: State,
        *,
        check_selectors: bool,
    ) -> State | str:
        """The state after picking ``candidate`` for ``alt``, or why it cannot be picked."""
        device = candidate.device
        multi = bool(device.allow_multiple_allocations) and self.features.DRAConsumableCapacity
        reason = self._unavailable(alt, candidate, state, multi=multi)
        if reason is None and check_selectors and not self.selection.matches(alt, candidate):
            reason = "selector"
        if reason is not None:
            return reason
        consumed = self._capacity(alt, candidate, state, multi=multi)
        if consumed == "capacity":
            return consumed
        shared = self._shared(candidate, state, multi=multi)
        if isinstance(shared, str):
            return shared
        counters, groups = shared
        if not self._tolerated(alt, candidate):
            return "taint"
        memory = self._constraints(plan, alt, candidate, state)
        if memory is None:
            return "constraint"
        shares = state.shares
        ident = candidate.id
        if isinstance(consumed, dict):
            shares = {**shares, ident: add(shares.get(ident, {}), consumed)}
        return State(
            picked=state.picked if multi else state.picked | {ident},
            claim_picked=state.claim_picked | {ident},
            shares=shares,
            counters=counters,
            groups=groups,
            memory=memory,
            results=(
                *state.results,
                Pick(alt, candidate, consumed if isinstance(consumed, dict) else None),
            ),
            done=state.done,
        )

    def _unavailable(
        self, alt: Request, candidate: Candidate, state: State, *, multi: bool
    ) -> str | None:
        """Why the device is out of the question before any selector runs, if it is."""
        ident = candidate.id
        device = candidate.device
        if alt.admin:
            in_use = ident in state.claim_picked and not multi
        else:
            in_use = ident in self.allocated or (not multi and ident in state.picked)
        if in_use:
            return "in-use"
        gated = (device.binding_conditions and not self.features.DRADeviceBindingConditions) or (
            device.consumes_counters and not self.features.DRAPartitionableDevices
        )
        return "gated" if gated else None

    def _capacity(
        self, alt: Request, candidate: Candidate, state: State, *, multi: bool
    ) -> dict[str, Fraction] | str | None:
        """The share consumed (multi-allocatable devices), None, or ``"capacity"``."""
        if not self.features.DRAConsumableCapacity:
            return None
        cons = self._consumption(alt, candidate)
        if cons is None:
            return "capacity"
        used: Mapping[str, Fraction] = {}
        if multi:
            ident = candidate.id
            used = add(self.allocated_capacity.get(ident, {}), state.shares.get(ident, {}))
        if not fits(candidate.device, used, cons):
            return "capacity"
        return cons if multi else None

    def _shared(
        self, candidate: Candidate, state: State, *, multi: bool
    ) -> (
        tuple[Mapping[PoolID, Mapping[CounterKey, Fraction]], Mapping[GroupKey, frozenset[str]]]
        | str
    ):
        """Counters and compatibility groups after the pick, or why they cannot take it.

        The reason is ``counters`` or ``compatibility-group``.
        """
        counters = self._counters(candidate, state, multi=multi)
        if counters is None:
            return "counters"
        groups = self._groups(candidate, state, multi=multi)
        if groups is None:
            return "compatibility-group"
        return counters, groups

    def _counters(
        self, candidate: Candidate, state: State, *, multi: bool
    ) -> Mapping[PoolID, Mapping[CounterKey, Fraction]] | None:
        """The counter usage after the pick, or None when the pool's counters are short."""
        if not self.features.DRAPartitionableDevices:
            return state.counters
        ident = candidate.id
        if multi and (ident in self.allocated_capacity or ident in state.shares):
            return state.counters
        need = counter_need(candidate.device)
        if not need:
            return state.counters
        pool = candidate.pool
        used = state.counters.get(pool.id, {})
        if not counters_fit(pool.counter_sets, used, need):
            return None
        merged = dict(used)
        for key, amount in need.items():
            merged[key] = merged.get(key, Fraction(0)) + amount
        return {**state.counters, pool.id: merged}

    def _groups(
        self, candidate: Candidate, state: State, *, multi: bool
    ) -> Mapping[GroupKey, frozenset[str]] | None:
        """The compatibility groups after the pick, or None when they would share nothing.

        kvdev's reading of KEP-5963: per counter set, every device drawing from it (already
        allocated or picked in this run) must have at least one group in common with all the
        others; a ``consumesCounters`` entry without groups is compatible with everything.
        """
        if not self.features.DRAPartitionableDevices:
            return state.groups
        ident = candidate.id
        if multi and (ident in self.allocated_capacity or ident in state.shares):
            return state.groups  # already counted: its groups are in the intersection
        declared = self._declared.get(ident)
        if declared is None:
            declared = device_groups(candidate.pool.id, candidate.device, self.features)
            self._declared[ident] = declared
        return narrow(state.groups, declared)

    def _tolerated(self, alt: Request, candidate: Candidate) -> bool:
        if not self.features.DRADeviceTaints:
            return True
        return all(
            taint.effect not in _BLOCKING or tolerated(taint, alt.tolerations)
            for taint in candidate.device.taints or []
        )

    def _constraints(
        self, plan: ClaimPlan, alt: Request, candidate: Candidate, state: State
    ) -> tuple[Memory, ...] | None:
        """The constraint memory after the pick, or None when a constraint is violated."""
        memory = list(state.memory)
        for i, con in enumerate(plan.constraints):
            if not con.applies(alt.parent, alt.name):
                continue
            key = (candidate.id, con.attribute)
            if key not in self._values:
                self._values[key] = attribute_values(
                    candidate.driver,
                    candidate.device,
                    con.attribute,
                    self.features.DRAListTypeAttributes,
                )
            values = self._values[key]
            ok, memory[i] = admit(con, memory[i], values)
            if not ok:
                return None
        return tuple(memory)
