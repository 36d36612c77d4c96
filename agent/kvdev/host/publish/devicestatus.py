"""The ``status.devices[]`` entries a driver applies to a prepared claim (KEP-4817).

Owns the apply configuration a driver sends with server-side apply (``kvdev-host serve --kube``
sends it with the field manager ``kvdev-host/<driver>``: ``plugin.claimstatus``;
``kubectl apply --server-side --subresource=status`` by hand): ``apiVersion``, ``kind``,
``metadata`` (name, namespace and uid, so a claim re-created under the same name is not
touched) and ``status.devices[]`` with only this driver's entries, each keyed like upstream's
list map (driver, pool, device, shareID) and carrying a ``Ready`` condition and the device's
``networkData`` when known.

Pure: the time for ``lastTransitionTime`` is a parameter. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from kvdev.host.k8s import ResourceClaim
from kvdev.host.k8s.claim import AllocatedDeviceStatus
from kvdev.host.publish.metadata import (
    NetworkData,
    claim_identity,
    driver_results,
    network_from_status,
)

READY: Final = "Ready"
REASON: Final = "DevicePrepared"


def _timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serializes."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _previous(
    claim: ResourceClaim,
) -> Mapping[tuple[str, str, str, str | None], AllocatedDeviceStatus]:
    entries = (claim.status.devices if claim.status is not None else None) or []
    return {(e.driver, e.pool, e.device, e.share_id): e for e in entries}


def device_status(
    claim: ResourceClaim,
    driver: str,
    *,
    now: datetime,
    network_data: NetworkData | None = None,
) -> list[dict[str, Any]]:
    """The ``status.devices[]`` entries of ``driver``'s devices, in allocation order.

    A Ready condition that is already True keeps its ``lastTransitionTime`` (a condition's
    time changes only when its status does), so applying twice changes nothing.

    Raises:
        SchemaError: the claim is not allocated, or a name is not valid.
    """
    claim_identity(claim)
    network = network_data if network_data is not None else network_from_status(claim)
    previous = _previous(claim)
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str | None]] = set()
    for result in driver_results(claim, driver):
        key = (result.pool, result.device, result.share_id)
        if key in seen:  # one device serving two requests has one status entry
            continue
        seen.add(key)
        since = _timestamp(now)
        old = previous.get((driver, *key))
        for condition in (old.conditions if old is not None else None) or []:
            if condition.type == READY and condition.status == "True":
                since = condition.last_transition_time or since
        ready: dict[str, Any] = {
            "type": READY,
            "status": "True",
            "reason": REASON,
            "message": "the device metadata is written and its CDI device is ready",
            "lastTransitionTime": since,
        }
        if claim.metadata.generation is not None:
            ready["observedGeneration"] = claim.metadata.generation
        entry: dict[str, Any] = {"driver": driver, "pool": result.pool, "device": result.device}
        if result.share_id is not None:
            entry["shareID"] = result.share_id
        entry["conditions"] = [ready]
        net = network.get((driver, result.pool, result.device))
        if net is not None:
            entry["networkData"] = net.to_json_dict()
        entries.append(entry)
    return entries


def apply_configuration(
    claim: ResourceClaim,
    driver: str,
    *,
    now: datetime,
    network_data: NetworkData | None = None,
) -> dict[str, Any]:
    """The object to server-side apply to the claim's ``status`` subresource."""
    ident = claim_identity(claim)
    return {
        "apiVersion": claim.api_version,
        "kind": claim.kind,
        "metadata": {"name": ident.name, "namespace": ident.namespace, "uid": ident.uid},
        "status": {"devices": device_status(claim, driver, now=now, network_data=network_data)},
    }
