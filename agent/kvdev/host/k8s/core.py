"""core/v1 subsets the allocator reads.

Owns a Node's name and labels, and the parts of a Pod that name its claims, its node and its
extended-resource requests and limits.

No I/O here.
"""

from __future__ import annotations

from typing import Literal

from kvdev.host.k8s.common import ObjectMeta
from kvdev.host.k8s.quantity import Quantity
from kvdev.schema.base import Document, Model
from kvdev.schema.fields import DnsLabel, DnsSubdomain


class Node(Document):
    """A node: only ``metadata.name`` and ``metadata.labels`` matter."""

    api_version: Literal["v1"]
    kind: Literal["Node"]
    metadata: ObjectMeta


class ResourceRequirements(Model):
    """A container's ``resources``: requests and limits by resource name."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class Container(Model):
    """A container's name and resources."""

    name: DnsLabel
    resources: ResourceRequirements | None = None


class PodResourceClaim(Model):
    """``spec.resourceClaims[]``: a claim by name or generated from a template."""

    name: DnsLabel
    resource_claim_name: DnsSubdomain | None = None
    resource_claim_template_name: DnsSubdomain | None = None


class PodSpec(Model):
    """The Pod spec fields the allocator reads."""

    node_name: DnsSubdomain | None = None
    resource_claims: list[PodResourceClaim] | None = None
    containers: list[Container]
    init_containers: list[Container] | None = None


class Pod(Document):
    """A pod asking for claims or extended resources."""

    api_version: Literal["v1"]
    kind: Literal["Pod"]
    metadata: ObjectMeta
    spec: PodSpec
