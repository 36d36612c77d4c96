"""core/v1 subsets the allocator and the controller read.

Owns a Node's name, labels and allocatable resources (quantities: cpu, memory, pods, ...),
the parts of a Pod that name its claims, its node, its PodGroup (``spec.schedulingGroup``),
its containers' resource requests and limits, the special claim recorded for extended
resources (``status.extendedResourceClaimStatus``, KEP-5004), its phase and the names of the
claims generated for it (``status.resourceClaimStatuses``), and a ConfigMap.

No I/O here.
"""

from __future__ import annotations

from typing import Literal

from kvdev.host.k8s.common import ObjectMeta
from kvdev.host.k8s.model import Document, Model
from kvdev.host.k8s.quantity import Quantity
from kvdev.host.k8s.types import DnsLabel, DnsSubdomain


class NodeStatus(Model):
    """``status``: only ``allocatable`` (resources a device plugin advertises are listed there)."""

    allocatable: dict[str, Quantity] | None = None


class Node(Document):
    """A node: ``metadata.name``, ``metadata.labels`` and ``status.allocatable`` matter."""

    api_version: Literal["v1"]
    kind: Literal["Node"]
    metadata: ObjectMeta
    status: NodeStatus | None = None


class ResourceRequirements(Model):
    """A container's ``resources``: requests and limits by resource name."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class Container(Model):
    """A container's name, resources and restart policy (``Always`` marks a sidecar)."""

    name: DnsLabel
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class PodResourceClaim(Model):
    """``spec.resourceClaims[]``: a claim by name or generated from a template."""

    name: DnsLabel
    resource_claim_name: DnsSubdomain | None = None
    resource_claim_template_name: DnsSubdomain | None = None


class PodSchedulingGroup(Model):
    """``spec.schedulingGroup``: the PodGroup (same namespace) the pod belongs to."""

    pod_group_name: DnsSubdomain


class PodSpec(Model):
    """The Pod spec fields the allocator and the scheduler read."""

    node_name: DnsSubdomain | None = None
    scheduling_group: PodSchedulingGroup | None = None
    resource_claims: list[PodResourceClaim] | None = None
    containers: list[Container]
    init_containers: list[Container] | None = None


class ContainerExtendedResourceRequest(Model):
    """Which request of the special claim serves a container's extended resource."""

    container_name: DnsLabel
    resource_name: str
    request_name: DnsLabel


class PodExtendedResourceClaimStatus(Model):
    """``status.extendedResourceClaimStatus``: the special claim made for the Pod."""

    request_mappings: list[ContainerExtendedResourceRequest]
    resource_claim_name: DnsSubdomain


class PodResourceClaimStatus(Model):
    """``status.resourceClaimStatuses[]``: the claim generated for a pod's template claim."""

    name: DnsLabel  # the pod's claim name (spec.resourceClaims[].name)
    resource_claim_name: DnsSubdomain | None = None  # unset: no claim was needed


class PodStatus(Model):
    """The Pod status fields the allocator and the controller read."""

    phase: str | None = None
    extended_resource_claim_status: PodExtendedResourceClaimStatus | None = None
    resource_claim_statuses: list[PodResourceClaimStatus] | None = None


class Pod(Document):
    """A pod asking for claims or extended resources."""

    api_version: Literal["v1"]
    kind: Literal["Pod"]
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus | None = None


class ConfigMap(Document):
    """A ConfigMap: its metadata and string data (binary data is only noticed)."""

    api_version: Literal["v1"]
    kind: Literal["ConfigMap"]
    metadata: ObjectMeta
    data: dict[str, str] | None = None
    binary_data: dict[str, str] | None = None
    immutable: bool | None = None
