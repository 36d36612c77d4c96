"""A ``Status`` or ``Plan`` as the JSON-ready dicts the API answers and ``status.json`` keeps.

Pure. The JSON keys are camelCase; fields may be added, never renamed (``apiVersion``
changes otherwise). What people read is drawn from these dicts by ``tables``.
"""

from __future__ import annotations

from typing import Any, Final

from kvdev.guest.core.planning import Plan
from kvdev.guest.core.status import DeviceStatus, Status
from kvdev.guest.core.steps import Step

STATUS_API_VERSION: Final = "kvdev.io/v1alpha1"


def step_json(step: Step) -> dict[str, Any]:
    """One step, as ``kvdev plan --json`` and the logs show it."""
    out: dict[str, Any] = {"type": type(step).__name__, "ifname": step.ifname}
    for key in ("altname", "new_name", "mtu", "address", "destination", "gateway", "metric"):
        value = getattr(step, key, None)
        if value is not None:
            out[key.replace("new_name", "newName")] = value
    out["reason"] = step.reason
    return out


def device_json(d: DeviceStatus) -> dict[str, Any]:
    """One device, as the API and ``--json`` show it."""
    out: dict[str, Any] = {
        "ref": d.ref,
        "phase": d.phase.value,
        "claim": d.claim,
        "podClaimName": d.pod_claim_name,
        "request": d.request,
        "driver": d.driver,
        "pool": d.pool,
        "device": d.name,
        "generation": d.generation,
        "guestPciAddress": d.guest_pci_address,
        "interface": d.ifname,
        "mac": d.mac,
        "evidence": [{"kind": e.kind, "detail": e.detail} for e in d.evidence],
        "candidates": list(d.candidates),
        "reason": d.reason,
        "warnings": list(d.warnings),
    }
    if d.origin:
        out["origin"] = d.origin
    if d.mdev_uuid is not None:
        out["mdevUUID"] = d.mdev_uuid
    if d.driver_mtu is not None:
        out["driverMtu"] = d.driver_mtu
    if d.notes:
        out["notes"] = list(d.notes)
    if d.taints:
        out["taints"] = list(d.taints)
    if d.desired is not None:
        out["desired"] = {
            "interface": d.desired.ifname,
            "altname": d.desired.altname,
            "mtu": d.desired.mtu,
            "addresses": list(d.desired.addresses),
            "routes": [
                {"destination": r.destination, "gateway": r.gateway, "metric": r.metric}
                for r in d.desired.routes
            ],
        }
    if d.pending_steps:
        out["pendingSteps"] = [step_json(s) for s in d.pending_steps]
    if d.guest is not None:
        g = d.guest
        out["guest"] = {
            "pciAddress": g.pci_address,
            "vendorId": g.vendor_id,
            "deviceId": g.device_id,
            "class": g.class_id,
            "driver": g.driver,
            "numaNode": g.numa_node,
            "devNodes": list(g.dev_nodes),
        }
    if d.observed is not None:
        lk = d.observed
        out["observed"] = {
            "interface": lk.ifname,
            "ifindex": lk.ifindex,
            "mac": lk.mac,
            "permanentMac": lk.permanent_mac,
            "mtu": lk.mtu,
            "up": lk.up,
            "operState": lk.oper_state,
            "altnames": list(lk.altnames),
            "addresses": list(d.observed_addresses),
            "routes": [
                {"destination": r.destination, "gateway": r.gateway, "metric": r.metric}
                for r in d.observed_routes
            ],
        }
    return out


def plan_json(plan: Plan) -> dict[str, Any]:
    """What a pass would do now (``GET /v1/plan``)."""
    return {
        "apiVersion": STATUS_API_VERSION,
        "kind": "Plan",
        "steps": [{"device": s.device, **step_json(s)} for s in plan.steps],
        "blocked": [
            {"device": b.device, "interface": b.ifname, "reason": b.reason} for b in plan.blocked
        ],
        "warnings": [
            {"device": w.device, "interface": w.ifname, "reason": w.reason} for w in plan.warnings
        ],
    }


def claims_json(status: Status) -> list[dict[str, Any]]:
    """The metadata files in force, with the generation the agent acted on."""
    return [
        {
            "claim": c.claim,
            "namespace": c.namespace,
            "podClaimName": c.pod_claim_name,
            "observedGeneration": c.generation,
            "source": c.source,
            "apiVersion": c.api_version,
        }
        | ({"fallback": c.fallback} if c.fallback else {})
        | ({"origin": c.origin} if c.origin else {})
        for c in status.claims
    ]


def status_json(status: Status) -> dict[str, Any]:
    """The whole status."""
    return {
        "apiVersion": STATUS_API_VERSION,
        "kind": "AgentStatus",
        "reconcile": status.reconcile,
        "converged": status.converged,
        "dryRun": status.dry_run,
        "summary": status.summary(),
        "counts": status.counts,
        "devices": [device_json(d) for d in status.devices],
        "unmanaged": list(status.unmanaged),
        "metadataErrors": [str(p) for p in status.file_errors],
        "metadataWarnings": [str(p) for p in status.file_warnings],
        "conditions": [
            {"type": c.type, "severity": c.severity.value.capitalize(), "message": c.message}
            for c in status.conditions
        ],
        "claims": claims_json(status),
    }
