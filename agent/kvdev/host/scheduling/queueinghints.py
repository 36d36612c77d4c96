"""Queueing hints: which cluster events can change an unschedulable pod's answer (pure).

kube-scheduler keeps a pod that fits nowhere until an event arrives that might help it, and a
plugin's queueing hint says which (``SchedulerQueueingHints``). kvdev's hint for the DRA part
keys each pod by what it waits on (``pod_keys``: its claims, the drivers its pending
requests' classes can select, or ``*``), an event by what it changes (``clusterevents``), and
wakes a pod when a key matches (``woken``). It must never miss a pod whose answer could change:
``test_schedule_events`` replays random event streams with and without hints and wants the
same placements. The rules: docs/guides/offline-tools.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kvdev.host.k8s import DeviceClass, Pod, ResourceClaim
from kvdev.host.k8s.claim import DeviceSubRequest, ExactDeviceRequest
from kvdev.host.scheduling.claims import ClaimBook, generated_name

Key = tuple[str, ...]
ANY: Key = ("*",)
RESOURCES: Key = ("resources",)
EVERY_DRIVER: Key = ("driver", "*")
_PINNED = re.compile(
    r"""\s*device\.driver\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*(?:&&.*)?\Z""", re.DOTALL
)


def pinned_driver(expression: str) -> str | None:
    """The driver an expression requires, when it plainly does (module docstring)."""
    if "||" in expression or "?" in expression:
        return None
    m = _PINNED.match(expression)
    return None if m is None else (m[1] if m[1] is not None else m[2])


def class_drivers(device_class: DeviceClass | None, extra: Iterable[str] = ()) -> set[str]:
    """The drivers a class (with a request's own selectors) can select; {"*"}: any."""
    if device_class is None:
        return {"*"}
    expressions = [s.cel.expression for s in device_class.spec.selectors or [] if s.cel]
    for expression in [*expressions, *extra]:
        driver = pinned_driver(expression)
        if driver is not None:
            return {driver}
    return {"*"}


def _claim_keys(claim: ResourceClaim, classes: Mapping[str, DeviceClass]) -> set[Key]:
    keys: set[Key] = set()
    devices = claim.spec.devices
    for req in (devices.requests if devices else None) or []:
        alternatives: list[ExactDeviceRequest | DeviceSubRequest] = (
            [req.exactly] if req.exactly is not None else list(req.first_available or [])
        )
        for spec in alternatives:
            keys.add(("class", spec.device_class_name))
            own = [s.cel.expression for s in spec.selectors or [] if s.cel]
            for driver in class_drivers(classes.get(spec.device_class_name), own):
                keys.add(("driver", driver))
    return keys


def pod_keys(
    pod: Pod,
    book: ClaimBook,
    classes: Mapping[str, DeviceClass],
    mapping: Mapping[str, str],
) -> frozenset[Key]:
    """What the pod waits on (module docstring)."""
    ns = pod.metadata.namespace or "default"
    keys: set[Key] = set()
    for entry in pod.spec.resource_claims or []:
        if entry.resource_claim_name is not None:
            name = entry.resource_claim_name
        elif entry.resource_claim_template_name is not None:
            name = generated_name(pod.metadata.name, entry.name, ns)
        else:
            continue
        keys.add(("claim", ns, name))
        claim = book.claims.get((ns, name))
        if claim is None or (claim.status and claim.status.allocation):
            continue
        keys |= _claim_keys(claim, classes)
    for container in (*(pod.spec.init_containers or ()), *pod.spec.containers):
        res = container.resources
        for resource in {
            *((res.limits or {}) if res else {}),
            *((res.requests or {}) if res else {}),
        }:
            if resource in mapping:
                keys.add(("class", mapping[resource]))
                for driver in class_drivers(classes.get(mapping[resource])):
                    keys.add(("driver", driver))
    if not any(k[0] in {"class", "driver"} for k in keys):
        keys.add(RESOURCES)
    return frozenset(keys)


def woken(pod: frozenset[Key], event: frozenset[Key]) -> bool:
    """Whether an event with keys ``event`` may change the answer of a pod waiting on ``pod``."""
    if ANY in event or pod & event:
        return True
    return EVERY_DRIVER in pod and any(k[0] == "driver" for k in event)
