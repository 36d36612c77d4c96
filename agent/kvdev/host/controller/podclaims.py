"""The claims a VMI's virt-launcher pods name that its spec does not: the claims KubeVirt makes.

KubeVirt main creates claims for a VMI that ``spec.resourceClaims`` does not name:
``<vmi>-cpu-claim`` (DeviceClass ``dra.cpu``, label ``kubevirt.io/resource: cpu-dra``, request
``req-cpu``), and the Managed DRA Claims proposal would generate more. The launcher pod names
each one, in ``spec.resourceClaims[]`` (a claim by name) or ``status.resourceClaimStatuses[]``
(one generated from a template): that is where the controller finds them, so that their streams
reach the guest like those of the VMI's own claims (the guest shows a CPU claim's device as a
CPU device with nothing to match: ``kvdev.schema.described``).

Pure: models in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvdev.host.k8s.core import Pod
from kvdev.host.k8s.kubevirt import VirtualMachineInstance


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A claim a launcher pod names beyond the VMI's spec."""

    entry: str  # the pod's claim name (spec.resourceClaims[].name)
    path: str  # where the pod names it, for messages
    claim_name: str  # the ResourceClaim's name


def pod_claims(vmi: VirtualMachineInstance, pods: Iterable[Pod]) -> list[PodClaim]:
    """The claims ``pods`` name whose pod claim name is none of the VMI's entries, once each."""
    named = {e.name for e in vmi.spec.resource_claims or []}
    out: dict[str, PodClaim] = {}
    for pod in pods:
        where = f"Pod/{pod.metadata.name}"
        for i, entry in enumerate(pod.spec.resource_claims or []):
            if entry.name not in named and entry.resource_claim_name is not None:
                path = f"{where}: spec.resourceClaims[{i}]"
                out.setdefault(entry.name, PodClaim(entry.name, path, entry.resource_claim_name))
        for i, status in enumerate(
            (pod.status.resource_claim_statuses if pod.status else None) or []
        ):
            if status.name not in named and status.resource_claim_name is not None:
                path = f"{where}: status.resourceClaimStatuses[{i}]"
                out.setdefault(status.name, PodClaim(status.name, path, status.resource_claim_name))
    return sorted(out.values(), key=lambda c: c.entry)


def claim_names(pods: Iterable[Pod]) -> set[str]:
    """Every claim name the pods name (spec by name, and status), for the index's join."""
    names: set[str] = set()
    for pod in pods:
        names.update(
            e.resource_claim_name for e in pod.spec.resource_claims or [] if e.resource_claim_name
        )
        names.update(
            s.resource_claim_name
            for s in (pod.status.resource_claim_statuses if pod.status else None) or []
            if s.resource_claim_name
        )
    return names
