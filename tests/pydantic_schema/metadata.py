"""Upstream KEP-5304 ``DeviceMetadata`` as pydantic models: a judge of the plain values.

The host builds and writes with ``kvdev.schema.metadata`` (plain values); these models state
the same rules in pydantic (its limits and rule functions), for the tests to hold the two to
agreement, document for document and error for error. The attribute and network data models
are the Kubernetes ones (``kvdev.host.k8s.device``). Field names and JSON shapes are upstream's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from kvdev.host.k8s.device import DeviceAttribute, Int64, NetworkDeviceData
from kvdev.host.k8s.model import Document, Model
from kvdev.host.k8s.types import DnsLabel, DnsSubdomain, DriverName, PoolName, RequestName
from kvdev.schema.fields import check_qualified_name, lookup_attribute
from kvdev.schema.metadata import RESULTS_MAX, attribute_limits, result_limit

QualifiedName = Annotated[str, AfterValidator(check_qualified_name)]


class Device(Model):
    """One allocated device of a request, with its attributes and network data."""

    driver: DriverName
    pool: PoolName
    name: DnsLabel
    attributes: dict[QualifiedName, DeviceAttribute] | None = None
    network_data: NetworkDeviceData | None = None

    @model_validator(mode="after")
    def _attribute_limits(self) -> Device:
        attribute_limits([a.size() for a in (self.attributes or {}).values()])
        return self

    def attribute(self, name: str) -> DeviceAttribute | None:
        """Look up an attribute; ``X`` and ``<driver>/X`` are one key (``lookup_attribute``)."""
        attrs: dict[str, DeviceAttribute] = dict(self.attributes or {})
        return lookup_attribute(attrs, self.driver, name)


class DeviceMetadataRequest(Model):
    """One request of the claim: ``name`` is ``<request>`` or ``<request>/<subrequest>``."""

    name: RequestName
    devices: list[Device] = Field(default_factory=list)


class ObjectMeta(Model):
    """The four ObjectMeta fields the framework fills in (others are ignored)."""

    name: DnsSubdomain
    namespace: DnsLabel | None = None
    uid: str | None = None
    generation: Annotated[Int64, Field(ge=0)] = 0


class DeviceMetadata(Document):
    """The metadata of one ResourceClaim's request(s), as one driver wrote it."""

    metadata: ObjectMeta
    pod_claim_name: DnsLabel | None = None
    requests: Annotated[list[DeviceMetadataRequest], Field(max_length=RESULTS_MAX)] = Field(
        default_factory=list
    )

    @model_validator(mode="after")
    def _result_limit(self) -> DeviceMetadata:
        result_limit(sum(len(r.devices) for r in self.requests))
        return self
