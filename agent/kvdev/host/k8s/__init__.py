"""Models of the Kubernetes objects the DRA allocator reads, and their loader.

``resource`` owns the resource.k8s.io/v1 cluster kinds, ``claim`` ResourceClaim and
ResourceClaimTemplate, ``core`` the Node/Pod subsets, ``scheduling`` PodGroup, ``common`` the
shared shapes, ``device`` a device's attribute and network data, ``quantity`` quantities,
``load`` text parsing; ``model`` is the pydantic base of these models and of the host's input
files, ``types`` the value rules of ``kvdev.schema.fields`` as pydantic types.
No I/O in this package.
"""

from kvdev.host.k8s.claim import ResourceClaim, ResourceClaimTemplate
from kvdev.host.k8s.common import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from kvdev.host.k8s.core import Node, Pod
from kvdev.host.k8s.load import (
    KINDS,
    K8sObject,
    SkippedObjectWarning,
    load,
    load_with_warnings,
)
from kvdev.host.k8s.quantity import Quantity, parse_quantity
from kvdev.host.k8s.resource import (
    DeviceClass,
    DeviceTaintRule,
    ResourceSlice,
)
from kvdev.host.k8s.scheduling import PodGroup

__all__ = [
    "KINDS",
    "DeviceClass",
    "DeviceTaintRule",
    "K8sObject",
    "Node",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pod",
    "PodGroup",
    "Quantity",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "SkippedObjectWarning",
    "load",
    "load_with_warnings",
    "parse_quantity",
]
