"""Turning claims into search plans, and the checks upstream makes before searching.

Owns the ``AllocationFailedError`` error (keyword + message), the (sub)request and claim
plan shapes, class lookup, feature checks, selector/constraint validation, the per-claim
32-result lower bound, and CEL selector evaluation with its cache (lazy: a selector is
compiled and run only for the devices the search visits). A ``Selection`` lives for one
allocator run, or, handed to several runs (the scheduler does), across them: results are
keyed by (expression, device, pool generation), so each pair is evaluated at most once per
pool generation.
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
    compile_selector,
    device_view,
)
from kvdev.host.allocation.constraints import Constraint
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.pools import Candidate, DeviceID
from kvdev.host.k8s.claim import DeviceSubRequest, ExactDeviceRequest, ResourceClaim
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


@dataclass(frozen=True, slots=True, eq=False)
class Request:
    """One alternative of a claim request: the request itself or one firstAvailable entry."""

    name: str  # as reported in results: ``req`` or ``req/sub``
    parent: str
    class_name: str
    device_class: DeviceClass
    selectors: tuple[str, ...]  # class expressions first, then the request's
    all_mode: bool
    count: int
    admin: bool
    tolerations: tuple[DeviceToleration, ...]
    capacity: Mapping[str, Fraction]  # requested amounts by name as written
    all_devices: tuple[Candidate, ...] = ()
    origins: tuple[str, ...] = ()  # where each selector is written, for error messages


@dataclass(frozen=True, slots=True, eq=False)
class ClaimPlan:
    """A claim ready for the search: requests (each a list of alternatives) and constraints."""

    claim: ResourceClaim
    requests: tuple[tuple[Request, ...], ...]
    constraints: tuple[Constraint, ...]


@dataclass(slots=True)
class Selection:
    """CEL evaluation with memoisation (a cache, not search state).

    Valid for one ``Features`` value and as long as a pool's devices do not change without a
    new pool generation (the ResourceSlice contract).
    """

    features: Features
    views: dict[tuple[DeviceID, int], DeviceView] = field(default_factory=dict)
    results: dict[tuple[str, DeviceID, int], bool] = field(default_factory=dict)

    def matches(self, request: Request, candidate: Candidate) -> bool:
        """Class selectors then request selectors, all must hold.

        Raises:
            AllocationFailedError: a selector does not compile or fails at run time.
        """
        for i, expression in enumerate(request.selectors):
            try:
                if not self._one(expression, candidate):
                    return False
            except AllocationFailedError as e:
                where = request.origins[i] if i < len(request.origins) else f"selector {i}"
                raise AllocationFailedError(
                    e.keyword, f"{where}: device {'/'.join(candidate.id)}: {e.message}"
                ) from e
        return True

    def _one(self, expression: str, candidate: Candidate) -> bool:
        generation = candidate.pool.generation
        key = (expression, candidate.id, generation)
        hit = self.results.get(key)
        if hit is not None:
            return hit
        vkey = (candidate.id, generation)
        view = self.views.get(vkey)
        if view is None:
            view = device_view(
                candidate.driver,
                candidate.device,
                consumable_capacity=self.features.DRAConsumableCapacity,
            )
            self.views[vkey] = view
        try:
            result = compile_selector(expression).matches(view)
        except CelCompileError as e:
            raise AllocationFailedError("cel-compile-error", str(e)) from e
        except CelCostLimitError as e:
            raise AllocationFailedError("cel-cost-limit", str(e)) from e
        except CelRuntimeError as e:
            raise AllocationFailedError("cel-runtime-error", str(e)) from e
        self.results[key] = result
        return result


def _expressions(selectors: Sequence[DeviceSelector] | None, where: str) -> list[str]:
    out = []
    for sel in selectors or []:
        if sel.cel is None or not sel.cel.expression:
            raise AllocationFailedError(
                "unknown-selector", f"{where}: CEL expression empty (unsupported selector type?)"
            )
        out.append(sel.cel.expression)
    return out


def _request(
    parent: str,
    name: str,
    spec: ExactDeviceRequest | DeviceSubRequest,
    classes: Mapping[str, DeviceClass],
    features: Features,
    claim: str = "",
) -> Request:
    where = f"request {name}"
    if not spec.device_class_name:
        raise AllocationFailedError(
            "missing-class-name", f"{where}: missing device class name (unsupported request type?)"
        )
    device_class = classes.get(spec.device_class_name)
    if device_class is None:
        raise AllocationFailedError(
            "class-not-found", f"{where}: could not retrieve device class {spec.device_class_name}"
        )
    admin = bool(getattr(spec, "admin_access", None))
    if admin and not features.DRAAdminAccess:
        raise AllocationFailedError(
            "feature-disabled", f"{where}: admin access is requested, but the feature is disabled"
        )
    requested = (spec.capacity.requests or {}) if spec.capacity is not None else {}
    if requested and not features.DRAConsumableCapacity:
        raise AllocationFailedError(
            "feature-disabled",
            f"{where}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
        )
    selectors = [
        *_expressions(device_class.spec.selectors, f"class {spec.device_class_name}"),
        *_expressions(spec.selectors, where),
    ]
    return Request(
        name=name,
        parent=parent,
        class_name=spec.device_class_name,
        device_class=device_class,
        selectors=tuple(selectors),
        all_mode=spec.allocation_mode == "All",
        count=spec.count or 1,
        admin=admin,
        tolerations=tuple(spec.tolerations or ()) if features.DRADeviceTaints else (),
        capacity={k: parse_quantity(v) for k, v in requested.items()},
        origins=(
            *(
                f"{claim}class {spec.device_class_name}: spec.selectors[{i}].cel.expression"
                for i in range(len(device_class.spec.selectors or ()))
            ),
            *(
                f"{claim}request {name}: selectors[{i}].cel.expression"
                for i in range(len(spec.selectors or ()))
            ),
        ),
    )


def plan_claim(
    claim: ResourceClaim, classes: Mapping[str, DeviceClass], features: Features
) -> ClaimPlan:
    """Validate one claim and plan its requests and constraints (All devices not yet set).

    Raises:
        AllocationFailedError: the claim can never be allocated as written.
    """
    devices = claim.spec.devices
    requests: list[tuple[Request, ...]] = []
    label = f"claim {claim.metadata.namespace or 'default'}/{claim.metadata.name}: "
    for req in (devices.requests if devices else None) or []:
        if req.exactly is not None:
            requests.append((_request(req.name, req.name, req.exactly, classes, features, label),))
            continue
        if not features.DRAPrioritizedList:
            raise AllocationFailedError(
                "feature-disabled",
                f"request {req.name}: has subrequests, but the DRAPrioritizedList feature is "
                "disabled",
            )
        requests.append(
            tuple(
                _request(req.name, f"{req.name}/{sub.name}", sub, classes, features, label)
                for sub in req.first_available or []
            )
        )
    constraints = []
    for con in (devices.constraints if devices else None) or []:
        attribute = con.match_attribute or con.distinct_attribute
        if attribute is None:
            raise AllocationFailedError(
                "unknown-constraint", "empty constraint (unsupported constraint type?)"
            )
        constraints.append(
            Constraint(
                attribute=attribute,
                distinct=con.distinct_attribute is not None,
                requests=frozenset(con.requests or ()),
            )
        )
    return ClaimPlan(claim=claim, requests=tuple(requests), constraints=tuple(constraints))


def check_limit(plan: ClaimPlan) -> None:
    """The smallest possible number of results must not exceed the per-claim limit.

    Raises:
        AllocationFailedError: ``too-many-devices``.
    """
    lower = sum(min(alt_size(alt) for alt in alts) for alts in plan.requests if alts)
    if lower > RESULTS_LIMIT:
        raise AllocationFailedError(
            "too-many-devices",
            f"claim {plan.claim.metadata.name}: number of requested devices {lower} exceeds "
            f"the claim limit of {RESULTS_LIMIT}",
        )


def alt_size(request: Request) -> int:
    """How many results the alternative adds."""
    return len(request.all_devices) if request.all_mode else request.count
