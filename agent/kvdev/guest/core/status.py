"""Pure status: matching, plan and apply results in, the ``Status`` value the agent publishes.

Phases per described device:

* ``Configured``: bound, and nothing is left to do for it;
* ``Pending``: bound, with steps still to apply (a dry run, or a retryable failure);
* ``Missing`` / ``Ambiguous``: as matching decided;
* ``Error``: bound, but a step failed permanently or something wanted is blocked.

Guest NICs that no described device binds are listed as ``Unmanaged`` and never touched.
A ``Condition`` is about the agent itself, not one device or file: a bound its walk of the
metadata tree hit, state it could not save. The agent is *converged* when every described
device is Configured, no file is in error and no condition of severity error holds.

No I/O here: the caller supplies the counter and the timestamps it wants shown.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvdev._records import compared
from kvdev.errors import Problem, Severity
from kvdev.guest.core.matching import Binding, Evidence, Matching, MatchState
from kvdev.guest.core.observed import GuestDevice, Link, NetState, Route
from kvdev.guest.core.planning import Desired, Plan
from kvdev.guest.core.steps import Step, StepResult
from kvdev.schema.origins import Origins, stream_key


class Phase(enum.Enum):
    """Where a described device stands."""

    CONFIGURED = "Configured"
    PENDING = "Pending"
    MISSING = "Missing"
    AMBIGUOUS = "Ambiguous"
    UNMANAGED = "Unmanaged"
    ERROR = "Error"


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class DeviceStatus:
    """One described device: what it is, what it is bound to, and how far it got."""

    ref: str
    phase: Phase
    claim: str
    request: str
    driver: str
    pool: str
    name: str
    generation: int
    guest_pci_address: str | None = None
    ifname: str | None = None
    mac: str | None = None
    evidence: tuple[Evidence, ...] = ()
    candidates: tuple[str, ...] = ()
    reason: str = ""
    desired: Desired | None = None
    pending_steps: tuple[Step, ...] = ()
    guest: GuestDevice | None = None  # the bound guest device: driver, NUMA node, /dev nodes
    observed: Link | None = None  # the bound NIC's link as netlink last saw it
    observed_addresses: tuple[str, ...] = ()
    observed_routes: tuple[Route, ...] = ()  # main-table routes through the bound NIC
    pod_claim_name: str | None = None
    warnings: tuple[str, ...] = ()  # what kvdev does for it but warns about (safety policy)
    origin: str = ""  # its stream's origin (schema/origins: driver, reconstructed; "" unknown)
    mdev_uuid: str | None = None  # a mediated device's UUID, as its metadata says
    notes: tuple[str, ...] = ()  # facts about its metadata worth showing (described.notes)
    driver_mtu: int | None = None  # the driver's MTU for the NIC (its mtu attribute)
    taints: tuple[str, ...] = ()  # its device taints and what tolerates each (the controller's)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ClaimStatus:
    """One metadata file in force: whose claim, which generation the agent acted on."""

    claim: str
    namespace: str | None
    pod_claim_name: str | None
    generation: int
    source: str
    api_version: str | None = None  # the version read
    fallback: str = ""  # why a newer version in the file was not used ("" when none was)
    origin: str = ""  # driver, reconstructed from claim status and slices, or "" (not known)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class MetadataState:
    """What the agent knows of its input files: the claims in force, and the files in error.

    ``warnings``: values in force no conforming writer writes (e.g. a name that is no DNS
    label); shown, never refused.
    """

    errors: tuple[Problem, ...] = ()
    claims: tuple[ClaimStatus, ...] = ()
    warnings: tuple[Problem, ...] = ()
    origins: Origins = field(default_factory=Origins)  # of a ConfigMap volume's streams


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Condition:
    """Something about the agent itself that holds now (it goes when it no longer does).

    ``type`` names it (``MetadataTruncated``, ``StateNotSaved`` ...); ``severity`` ERROR means
    the agent cannot vouch for its state (it is not converged while the condition holds),
    WARNING that it still can but works around a bound (e.g. polls instead of watching).
    """

    type: str
    message: str
    severity: Severity = Severity.ERROR


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Status:
    """Everything the agent knows after one reconcile."""

    reconcile: int
    devices: tuple[DeviceStatus, ...]
    unmanaged: tuple[str, ...]
    file_errors: tuple[Problem, ...]
    dry_run: bool = False
    claims: tuple[ClaimStatus, ...] = ()
    conditions: tuple[Condition, ...] = ()
    file_warnings: tuple[Problem, ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        """Devices per phase (only phases that occur)."""
        return dict(Counter(d.phase.value for d in self.devices))

    @property
    def converged(self) -> bool:
        """Every described device is configured, no file is in error, no error condition holds."""
        return (
            not self.file_errors
            and not any(c.severity is Severity.ERROR for c in self.conditions)
            and all(d.phase is Phase.CONFIGURED for d in self.devices)
        )

    def summary(self) -> str:
        """One line for systemd's STATUS= and logs."""
        parts = [f"{n} {phase.lower()}" for phase, n in sorted(self.counts.items())]
        text = ", ".join(parts) if parts else "no devices described"
        if self.file_errors:
            text += f"; {len(self.file_errors)} metadata error(s), last good metadata in force"
        if self.conditions:
            text += "; " + ", ".join(sorted({c.type for c in self.conditions}))
        return text


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _ByDevice:
    """One reconcile's plan and results, grouped by described device ref."""

    desired: dict[str, Desired]
    steps: dict[str, list[Step]]
    failures: dict[str, list[StepResult]]
    blocked: dict[str, list[str]]
    warnings: dict[str, list[str]]
    origins: Origins


def _device(b: Binding, by: _ByDevice, state: NetState | None, *, dry_run: bool) -> DeviceStatus:
    desired, steps, failures, blocked = by.desired, by.steps, by.failures, by.blocked
    d = b.device
    ref = d.ref
    nic = b.nic
    phase = {
        MatchState.MISSING: Phase.MISSING,
        MatchState.AMBIGUOUS: Phase.AMBIGUOUS,
        MatchState.INVALID: Phase.ERROR,
        MatchState.DEFERRED: Phase.PENDING,
    }.get(b.state, Phase.CONFIGURED)
    reason = b.reason
    left: tuple[Step, ...] = ()
    if phase is Phase.CONFIGURED:
        permanent = [r for r in failures.get(ref, []) if not r.retryable]
        retryable = [r for r in failures.get(ref, []) if r.retryable]
        if permanent or blocked.get(ref):
            phase = Phase.ERROR
            reason = "; ".join([*(r.error for r in permanent), *blocked.get(ref, [])])
        elif retryable or (dry_run and steps.get(ref)):
            phase = Phase.PENDING
            left = tuple(r.step for r in retryable) or tuple(steps.get(ref, []))
            reason = "; ".join(r.error for r in retryable) or f"{len(left)} step(s) to apply"
    return DeviceStatus(
        ref=ref,
        phase=phase,
        claim=d.claim,
        request=d.request,
        driver=d.driver,
        pool=d.pool,
        name=d.name,
        generation=d.generation,
        guest_pci_address=b.guest.pci_address if b.guest else None,
        ifname=desired[ref].ifname if ref in desired else (nic.ifname if nic else None),
        mac=(nic.permanent_mac or nic.mac) if nic else None,
        evidence=b.evidence,
        candidates=b.candidates,
        reason=reason,
        desired=desired.get(ref),
        pending_steps=left,
        guest=b.guest,
        observed=state.link(nic.ifindex) if state is not None and nic is not None else None,
        pod_claim_name=d.pod_claim_name,
        origin=by.origins.label(stream_key(d.claim, d.pod_claim_name, d.request, d.driver)),
        taints=by.origins.taints_of(
            stream_key(d.claim, d.pod_claim_name, d.request, d.driver), d.pool, d.name
        ),
        observed_addresses=tuple(
            a.address
            for a in (state.addresses if state else ())
            if nic and a.ifindex == nic.ifindex
        ),
        observed_routes=tuple(
            r for r in (state.routes if state else ()) if nic and r.ifindex == nic.ifindex
        ),
        warnings=tuple(by.warnings.get(ref, ())),
        mdev_uuid=d.mdev_uuid,
        notes=d.notes,
        driver_mtu=d.mtu,
    )


def summarize(  # noqa: PLR0913 - one value per output of a pass
    matching: Matching,
    plan: Plan,
    results: Sequence[StepResult],
    metadata: MetadataState,
    *,
    reconcile: int,
    dry_run: bool = False,
    state: NetState | None = None,
    conditions: Sequence[Condition] = (),
) -> Status:
    """Combine one reconcile's outputs into the published status."""
    desired = {d.device: d for d in plan.desired}
    steps: dict[str, list[Step]] = {}
    for step in plan.steps:
        steps.setdefault(step.device, []).append(step)
    failures: dict[str, list[StepResult]] = {}
    for r in results:
        if not r.ok:
            failures.setdefault(r.step.device, []).append(r)
    blocked: dict[str, list[str]] = {}
    for item in plan.blocked:
        blocked.setdefault(item.device, []).append(item.reason)
    warned: dict[str, list[str]] = {}
    for w in plan.warnings:
        warned.setdefault(w.device, []).append(w.reason)
    by = _ByDevice(desired, steps, failures, blocked, warned, metadata.origins)
    devices = tuple(_device(b, by, state, dry_run=dry_run) for b in matching.bindings)
    unmanaged = tuple(nic.ifname for g in matching.unmanaged for nic in g.nics)
    return Status(
        reconcile,
        devices,
        unmanaged,
        metadata.errors,
        dry_run,
        metadata.claims,
        tuple(conditions),
        metadata.warnings,
    )


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Change:
    """One state change between two statuses, as ``GET /v1/events`` reports it."""

    type: str  # DeviceAdded|Changed|Removed, MetadataError|Recovered, ConditionRaised|Cleared
    subject: str  # a device ref or a file
    phase: str
    message: str


def changes(before: Status | None, after: Status) -> list[Change]:
    """What changed from ``before`` to ``after`` (everything is new when ``before`` is None)."""
    old = {d.ref: d for d in (before.devices if before else ())}
    new = {d.ref: d for d in after.devices}
    out = [
        Change("DeviceAdded", ref, d.phase.value, d.reason)
        for ref, d in new.items()
        if ref not in old
    ]
    out.extend(
        Change(
            "DeviceChanged",
            ref,
            d.phase.value,
            f"{old[ref].phase.value} -> {d.phase.value}" + (f": {d.reason}" if d.reason else ""),
        )
        for ref, d in new.items()
        if ref in old and (old[ref].phase, old[ref].reason) != (d.phase, d.reason)
    )
    out.extend(Change("DeviceRemoved", ref, "", "") for ref in old if ref not in new)
    errors_before = {str(p) for p in (before.file_errors if before else ())}
    errors_after = {str(p) for p in after.file_errors}
    out.extend(Change("MetadataError", "", "", e) for e in sorted(errors_after - errors_before))
    out.extend(Change("MetadataRecovered", "", "", e) for e in sorted(errors_before - errors_after))
    held = {(c.type, c.message) for c in (before.conditions if before else ())}
    holds = {(c.type, c.message) for c in after.conditions}
    out.extend(Change("ConditionRaised", t, "", m) for t, m in sorted(holds - held))
    out.extend(Change("ConditionCleared", t, "", m) for t, m in sorted(held - holds))
    return out
