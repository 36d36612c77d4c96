"""Claims as search plans, the checks upstream makes before searching, and CEL evaluation.

Owns the ``AllocationFailedError`` error (keyword + message), the shapes the search works on
(``Request``: one request or firstAvailable subrequest, upstream's per-(sub)request data;
``Slot``: a request with its alternatives; ``ClaimPlan``), the per-request checks in
upstream's order (selector types, the admin-access gate, the class name and lookup, the
allocation mode; the prioritized-list and consumable-capacity gates per request; the
32-result lower bound and the constraint types per claim; ``plan_claims`` makes them once for
claims tried on many nodes, as upstream's NewAllocator does), and ``Selection``: CEL selectors
and derived attributes (KEP-6080) evaluated lazily, for the devices the search visits, with
a memo keyed by (expression, device, pool generation) that may live across allocator runs
(the scheduler hands one to every run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kvdev.errors import PermanentError
from kvdev.host.allocation.cel import (
    CelCompileError,
    CelCostLimitError,
    CelRuntimeError,
    DeviceView,
    Semver,
    compile_selector,
    device_view,
    reads_device,
)
from kvdev.host.allocation.constraints import EMPTY_LIST, Constraint, Distinct, Match, Value
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.pools import Candidate, DeviceID
from kvdev.host.k8s.claim import (
    DeviceRequest,
    DeviceSubRequest,
    ExactDeviceRequest,
    ResourceClaim,
)
from kvdev.host.k8s.common import DeviceSelector, DeviceToleration
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import DeviceClass

RESULTS_LIMIT = 32


class AllocationFailedError(PermanentError):
    """The allocator's error outcome, raised internally: a README keyword and a message."""

    def __init__(self, keyword: str, message: str) -> None:
        super().__init__(f"{keyword}: {message}")
        self.keyword = keyword
        self.message = message


@dataclass(slots=True, eq=False)
class Request:
    """One alternative of a claim request: the request itself or one firstAvailable entry.

    Per-run caches, by candidate position (filled by the search): ``sel`` selectable (None:
    not checked yet), ``need`` capacity need (False: unusable), ``taint`` blocked by a taint.
    """

    name: str  # as reported in results: ``req`` or ``req/sub``
    base: str  # the request's own name (constraints and config key on it)
    sub: str  # the subrequest's name, "" for a plain request
    class_name: str
    device_class: DeviceClass
    selectors: tuple[str, ...]  # class expressions first, then the request's
    origins: tuple[str, ...]  # where each selector is written, for error messages
    all_mode: bool
    count: int
    admin: bool
    tolerations: tuple[DeviceToleration, ...]
    capacity: Mapping[str, Fraction] | None  # requested amounts by capacity key as written
    derived: tuple[tuple[str, str], ...] = ()  # (name, expression)
    derived_names: frozenset[str] = frozenset()
    num: int = 0  # devices this alternative adds
    all_devices: list[int] = field(default_factory=list)  # allocationMode All: positions
    sel: list[bool | None] = field(default_factory=list)
    need: list[object] = field(default_factory=list)
    taint: list[bool | None] = field(default_factory=list)
    fit: list[bool | None] = field(default_factory=list)  # capacity, devices not shared
    first: list[object] = field(default_factory=list)  # the first constraint's values
    applicable: tuple[Constraint, ...] = ()  # the claim's constraints covering this request


@dataclass(slots=True, eq=False)
class Slot:
    """One request of a claim: its alternatives, and which one the search settled on."""

    name: str
    alternatives: tuple[Request, ...]
    first_available: bool
    selected: int = 0


@dataclass(slots=True, eq=False)
class ClaimPlan:
    """A claim ready for the search: requests, constraints, and the picks being made."""

    claim: ResourceClaim
    slots: tuple[Slot, ...]
    constraints: tuple[Constraint, ...]
    bounded: bool = False  # the 32-result bound held while planning (no ``All`` request)

    @property
    def label(self) -> str:
        """``<namespace>/<name>``."""
        return f"{self.claim.metadata.namespace or 'default'}/{self.claim.metadata.name}"


@dataclass(slots=True, eq=False)
class Planned:
    """Claims planned as far as no node is involved, in upstream's order (``plan_claims``).

    ``plans``: the claims in order, each with the (sub)requests planned; ``complete`` of them
    were planned whole. ``error``: the first check that failed (keyword, message), after
    ``plans``: a search raises it once it has done, on its node, what comes before it in
    upstream's order (an ``All`` request's devices, then a claim's result bound). The plans
    are reused by every search of these claims, one search at a time: the search resets its
    per-run parts (``Request``'s caches, ``Slot.selected``, the constraints).
    """

    plans: list[ClaimPlan]
    complete: int
    error: tuple[str, str] | None
    classes: Mapping[str, DeviceClass]
    features: Features


@dataclass(slots=True)
class Selection:
    """CEL evaluation with memoisation (a cache, not search state).

    Valid for one ``Features`` value and as long as a pool's devices do not change without a
    new pool generation (the ResourceSlice contract).
    """

    features: Features
    views: dict[tuple[DeviceID, int], DeviceView] = field(default_factory=dict)
    results: dict[tuple[str, DeviceID, int], bool] = field(default_factory=dict)
    derived: dict[tuple[str, DeviceID, int], Value | None] = field(default_factory=dict)

    def _view(self, candidate: Candidate) -> DeviceView:
        vkey = (candidate.id, candidate.pool.generation)
        view = self.views.get(vkey)
        if view is None:
            view = device_view(candidate.driver, candidate.device)
            self.views[vkey] = view
        return view

    def matches(self, request: Request, candidate: Candidate) -> bool:
        """Class selectors then request selectors, all must hold (stops at the first false).

        Raises:
            AllocationFailedError: a selector does not compile or fails at run time.
        """
        generation = candidate.pool.generation
        for i, expression in enumerate(request.selectors):
            key = (expression, candidate.id, generation)
            hit = self.results.get(key)
            if hit is None:
                try:
                    hit = compile_selector(expression).matches(self._view(candidate))
                except (CelCompileError, CelRuntimeError) as e:
                    raise _cel_error(e, request.origins[i], candidate) from e
                self.results[key] = hit
            if not hit:
                return False
        return True

    def derive(self, request: Request, candidate: Candidate, name: str) -> Value | None:
        """One derived attribute (KEP-6080) of the request for one device.

        As upstream's lookupAttribute computes it: only when a constraint compares it.

        Raises:
            AllocationFailedError: the expression does not compile (a result type that no
                attribute has is a compile error when the expression does not read the
                device), or fails, or yields a value no attribute can hold.
        """
        expression = next(e for n, e in request.derived if n == name)
        key = (expression, candidate.id, candidate.pool.generation)
        if key in self.derived:
            return self.derived[key]
        try:
            selector = compile_selector(expression)
        except CelCompileError as e:
            raise AllocationFailedError(
                "cel-compile-error", f"compile derived attribute {name} failed: {e}"
            ) from e
        try:
            raw = selector.value(self._view(candidate))
        except (CelCompileError, CelRuntimeError) as e:
            raise _cel_error(e, f"evaluate derived attribute {name}", candidate) from e
        value = _derived_value(raw)
        if isinstance(value, str):
            if not reads_device(expression):  # its type is known without a device
                raise AllocationFailedError(
                    "cel-compile-error", f"compile derived attribute {name} failed: {value}"
                )
            raise AllocationFailedError(
                "cel-runtime-error",
                f"evaluate derived attribute {name} on device {'/'.join(candidate.id)} "
                f"failed: {value}",
            )
        if value[1] and not self.features.DRAListTypeAttributes and not reads_device(expression):
            raise AllocationFailedError(
                "cel-compile-error",
                f"compile derived attribute {name} failed: must evaluate to a primitive "
                "scalar (string, integer, boolean, semver), not a list",
            )
        self.derived[key] = value
        return value


def _cel_error(e: Exception, where: str, candidate: Candidate) -> AllocationFailedError:
    keyword = (
        "cel-compile-error"
        if isinstance(e, CelCompileError)
        else "cel-cost-limit"
        if isinstance(e, CelCostLimitError)
        else "cel-runtime-error"
    )
    return AllocationFailedError(keyword, f"{where}: device {'/'.join(candidate.id)}: {e}")


def _scalar(v: object) -> tuple[str, object] | None:
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, Semver):
        return ("version", str(v))
    if isinstance(v, str):
        return ("string", v)
    return None


def _derived_value(raw: object) -> Value | str:
    """A derived attribute's CEL result as a ``Value``, or why it cannot be one (a str).

    An empty list is a value of no known type (upstream: ``stringValues: []``), which no
    constraint in list mode admits.
    """
    if isinstance(raw, list | tuple):
        items = [_scalar(v) for v in raw]
        kinds = {i[0] for i in items if i is not None}
        if None in items or len(kinds) > 1:
            return "a derived attribute list must hold scalars of one type"
        if not items:
            return EMPTY_LIST
        return (kinds.pop(), True, frozenset(i[1] for i in items if i is not None))
    one = _scalar(raw)
    if one is None:
        got = "a quantity" if isinstance(raw, Fraction) else type(raw).__name__
        return (
            "must evaluate to a primitive scalar (string, integer, boolean, semver) or a "
            f"list of these scalars, not {got}"
        )
    return (one[0], False, frozenset([one[1]]))


def _expressions(selectors: Sequence[DeviceSelector] | None, where: str) -> list[str]:
    out = []
    for i, sel in enumerate(selectors or []):
        if sel.cel is None:
            raise AllocationFailedError(
                "unknown-selector",
                f"{where}, selector #{i}: CEL expression empty (unsupported selector type?)",
            )
        out.append(sel.cel.expression)
    return out


def plan_request(
    claim: str,
    base: str,
    sub: str,
    spec: ExactDeviceRequest | DeviceSubRequest,
    classes: Mapping[str, DeviceClass],
    features: Features,
) -> Request:
    """Upstream's static checks of one (sub)request, in its order; All devices not yet set.

    Raises:
        AllocationFailedError: the request can never be allocated as written.
    """
    name = f"{base}/{sub}" if sub else base
    where = f"claim {claim}, request {name}"
    if spec.derived_attributes and not features.DRADerivedAttributes:
        raise AllocationFailedError(
            "feature-disabled",
            f"{where}: cannot handle request with derived attributes, the feature is disabled",
        )
    request_selectors = _expressions(spec.selectors, where)
    admin = getattr(spec, "admin_access", None)
    if admin is not None and not features.DRAAdminAccess:
        raise AllocationFailedError(
            "feature-disabled", f"{where}: admin access is requested, but the feature is disabled"
        )
    if not spec.device_class_name:
        raise AllocationFailedError(
            "missing-class-name", f"{where}: missing device class name (unsupported request type?)"
        )
    device_class = classes.get(spec.device_class_name)
    if device_class is None:
        raise AllocationFailedError(
            "class-not-found", f"{where}: could not retrieve device class {spec.device_class_name}"
        )
    class_selectors = _expressions(device_class.spec.selectors, f"class {spec.device_class_name}")
    requested = spec.capacity.requests if spec.capacity is not None else None
    derived = spec.derived_attributes
    return Request(
        name=name,
        base=base,
        sub=sub,
        class_name=spec.device_class_name,
        device_class=device_class,
        selectors=(*class_selectors, *request_selectors),
        origins=(
            *(
                f"claim {claim}: class {spec.device_class_name}: spec.selectors[{i}].cel.expression"
                for i in range(len(class_selectors))
            ),
            *(
                f"claim {claim}: request {name}: selectors[{i}].cel.expression"
                for i in range(len(request_selectors))
            ),
        ),
        all_mode=spec.allocation_mode == "All",
        count=spec.count or 1,
        admin=bool(admin),
        tolerations=tuple(spec.tolerations or ()),
        capacity=None
        if requested is None
        else {k: parse_quantity(v) for k, v in requested.items()},
        derived=tuple((d.name, d.expression) for d in derived or ()),
        derived_names=frozenset(d.name for d in derived or ()),
        num=spec.count or 1,
    )


def check_gates(claim: str, slot_spec: DeviceRequest, features: Features) -> None:
    """The per-request gate checks upstream makes before planning a request.

    Raises:
        AllocationFailedError: ``feature-disabled``.
    """
    subs = slot_spec.first_available or []
    if subs and not features.DRAPrioritizedList:
        raise AllocationFailedError(
            "feature-disabled",
            f"claim {claim}, request {slot_spec.name}: has subrequests, but the "
            "DRAPrioritizedList feature is disabled",
        )
    if features.DRAConsumableCapacity:
        return
    if slot_spec.exactly is not None and slot_spec.exactly.capacity is not None:
        raise AllocationFailedError(
            "feature-disabled",
            f"claim {claim}, request {slot_spec.name}: has capacity requests, but the "
            "DRAConsumableCapacity feature is disabled",
        )
    for sub in subs:
        if sub.capacity is not None:
            raise AllocationFailedError(
                "feature-disabled",
                f"claim {claim}, subrequest {sub.name}: has capacity requests, but the "
                "DRAConsumableCapacity feature is disabled",
            )


def plan_claims(
    claims: Sequence[ResourceClaim], classes: Mapping[str, DeviceClass], features: Features
) -> Planned:
    """Every check of every claim that does not depend on the node, up to the first failing.

    Per claim: per request the gates, then each (sub)request in full before the next, then
    the bound of the claim's results (here unless an ``All`` request's devices, listed on the
    node, count), then the constraints.
    """
    plans: list[ClaimPlan] = []
    for claim in claims:
        label = f"{claim.metadata.namespace or 'default'}/{claim.metadata.name}"
        plan = ClaimPlan(claim, (), ())
        plans.append(plan)
        slots: list[Slot] = []
        try:
            for req in (claim.spec.devices.requests if claim.spec.devices else None) or []:
                check_gates(label, req, features)
                specs: list[tuple[str, ExactDeviceRequest | DeviceSubRequest]] = (
                    [("", req.exactly)]
                    if req.exactly is not None
                    else [(sub.name, sub) for sub in req.first_available or []]
                )
                slot = Slot(req.name, (), req.first_available is not None)
                slots.append(slot)
                for sub, spec in specs:  # each one checked in full before the next, as upstream
                    alt = plan_request(label, req.name, sub, spec, classes, features)
                    slot.alternatives = (*slot.alternatives, alt)
        except AllocationFailedError as e:
            plan.slots = tuple(slots)
            return Planned(plans, len(plans) - 1, (e.keyword, e.message), classes, features)
        plan.slots = tuple(slots)
        try:
            if not any(alt.all_mode for slot in slots for alt in slot.alternatives):
                check_limit(plan)  # no device list: the bound does not depend on the node
                plan.bounded = True
            plan.constraints = plan_constraints(claim, features)
        except AllocationFailedError as e:
            return Planned(plans, len(plans), (e.keyword, e.message), classes, features)
        for slot in plan.slots:
            for alt in slot.alternatives:
                alt.applicable = tuple(c for c in plan.constraints if c.applies(alt.base, alt.sub))
    return Planned(plans, len(plans), None, classes, features)


def check_limit(plan: ClaimPlan) -> None:
    """The smallest possible number of results must not exceed the per-claim limit.

    Raises:
        AllocationFailedError: ``too-many-devices``.
    """
    lower = sum(min(a.num for a in s.alternatives) for s in plan.slots if s.alternatives)
    if lower > RESULTS_LIMIT:
        raise AllocationFailedError(
            "too-many-devices",
            f"claim {plan.label}: number of requested devices {lower} exceeds the claim "
            f"limit of {RESULTS_LIMIT}",
        )


def plan_constraints(claim: ResourceClaim, features: Features) -> tuple[Constraint, ...]:
    """The claim's constraints as fresh search objects.

    Raises:
        AllocationFailedError: ``unknown-constraint``.
    """
    devices = claim.spec.devices
    out: list[Constraint] = []
    lists = features.DRAListTypeAttributes
    for i, con in enumerate((devices.constraints if devices else None) or []):
        names = frozenset(con.requests or ())
        if con.match_attribute is not None:
            out.append(Match(con.match_attribute, names, lists))
        elif con.distinct_attribute is not None:
            out.append(Distinct(con.distinct_attribute, names, lists))
        else:
            raise AllocationFailedError(
                "unknown-constraint",
                f"claim {claim.metadata.namespace or 'default'}/{claim.metadata.name}, "
                f"constraint #{i}: empty constraint (unsupported constraint type?)",
            )
    return tuple(out)
