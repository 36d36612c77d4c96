"""resource.k8s.io/v1 ResourceClaim (requests, constraints, config, status) and its template.

Deliberately lenient where the allocator itself must report the problem (so the allocator
fixtures E11-E13 load): an empty ``deviceClassName``, an empty selector ``{}`` and an empty
constraint ``{}`` are accepted here. No I/O here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from kvdev.host.k8s.common import (
    TOLERATIONS_MAX,
    DeviceSelector,
    DeviceToleration,
    FullyQualifiedName,
    NodeSelector,
    ObjectMeta,
    OpaqueDeviceConfiguration,
    QualifiedName,
    at_most,
)
from kvdev.host.k8s.device import Int64, NetworkDeviceData
from kvdev.host.k8s.model import Document, Model
from kvdev.host.k8s.quantity import Quantity
from kvdev.host.k8s.resource import BINDING_CONDITIONS_MAX, CONFIG_MAX, SELECTORS_MAX
from kvdev.host.k8s.types import DnsLabel, DriverName, PoolName, RequestName
from kvdev.schema.fields import check_dns_subdomain

REQUESTS_MAX = 32  # DeviceRequestsMaxSize
CONSTRAINTS_MAX = 32  # DeviceConstraintsMaxSize
SUBREQUESTS_MAX = 8  # FirstAvailableDeviceRequestMaxSize
RESULTS_MAX = 32  # AllocationResultsMaxSize
ALLOCATION_CONFIG_MAX = 64  # 2 * DeviceConfigMaxSize
RESERVED_FOR_MAX = 256  # ResourceClaimReservedForMaxSize
DEVICE_CONDITIONS_MAX = 8  # AllocatedDeviceStatusMaxConditions
DERIVED_ATTRIBUTES_MAX = 32  # per (sub)request, KEP-6080
DERIVED_EXPRESSION_MAX_BYTES = 10 * 1024  # as CELSelectorExpressionMaxLength


def _class_name(value: str) -> str:
    # Empty is left to the allocator ("missing device class name"), as upstream's tests do.
    return check_dns_subdomain(value) if value else value


class CapacityRequirements(Model):
    """``capacity.requests``: the share of each capacity a request wants."""

    requests: dict[QualifiedName, Quantity] | None = None


def _expression_bytes(value: str) -> str:
    if len(value.encode()) > DERIVED_EXPRESSION_MAX_BYTES:
        raise ValueError(f"must be at most {DERIVED_EXPRESSION_MAX_BYTES} bytes")
    return value


class DeviceDerivedAttribute(Model):
    """``derivedAttributes[]`` (KEP-6080, alpha): a virtual attribute CEL computes per device.

    ``name`` is what constraints reference (``<DNS subdomain>/<C identifier>``, e.g.
    ``derived/numa``); it shadows a device attribute of the same name.
    """

    name: FullyQualifiedName
    expression: Annotated[str, Field(min_length=1), AfterValidator(_expression_bytes)]


class _RequestFields(Model):
    device_class_name: Annotated[str, Field(max_length=253), AfterValidator(_class_name)]
    selectors: Annotated[list[DeviceSelector], at_most(SELECTORS_MAX)] | None = None
    allocation_mode: Literal["ExactCount", "All"] | None = None
    count: Annotated[Int64, Field(ge=1)] | None = None
    tolerations: Annotated[list[DeviceToleration], at_most(TOLERATIONS_MAX)] | None = None
    capacity: CapacityRequirements | None = None
    derived_attributes: (
        Annotated[list[DeviceDerivedAttribute], at_most(DERIVED_ATTRIBUTES_MAX)] | None
    ) = None

    @model_validator(mode="after")
    def _fields(self) -> _RequestFields:
        if self.allocation_mode == "All" and self.count is not None:
            raise ValueError("count must not be set with allocationMode All")
        names = [d.name for d in self.derived_attributes or []]
        if len(names) != len(set(names)):
            raise ValueError("derivedAttributes: names must be unique")
        return self


class ExactDeviceRequest(_RequestFields):
    """``requests[].exactly``."""

    admin_access: bool | None = None


class DeviceSubRequest(_RequestFields):
    """``requests[].firstAvailable[]``: one alternative, referenced as ``<request>/<name>``."""

    name: DnsLabel


class DeviceRequest(Model):
    """One request of a claim: ``exactly`` or a ``firstAvailable`` list."""

    name: DnsLabel
    exactly: ExactDeviceRequest | None = None
    first_available: (
        Annotated[list[DeviceSubRequest], Field(min_length=1), at_most(SUBREQUESTS_MAX)] | None
    ) = None

    @model_validator(mode="after")
    def _one_of(self) -> DeviceRequest:
        if (self.exactly is None) == (self.first_available is None):
            raise ValueError("exactly one of exactly and firstAvailable must be set")
        names = [s.name for s in self.first_available or []]
        if len(names) != len(set(names)):
            raise ValueError("firstAvailable: subrequest names must be unique")
        return self


class DeviceConstraint(Model):
    """A claim constraint; an empty one is left to the allocator to report."""

    requests: list[RequestName] | None = None
    match_attribute: FullyQualifiedName | None = None
    distinct_attribute: FullyQualifiedName | None = None

    @model_validator(mode="after")
    def _at_most_one(self) -> DeviceConstraint:
        if self.match_attribute is not None and self.distinct_attribute is not None:
            raise ValueError("matchAttribute and distinctAttribute are mutually exclusive")
        return self


class DeviceClaimConfiguration(Model):
    """Configuration for some (or all) requests of a claim."""

    requests: list[RequestName] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(Model):
    """``ResourceClaim.spec.devices``."""

    requests: Annotated[list[DeviceRequest], at_most(REQUESTS_MAX)] | None = None
    constraints: Annotated[list[DeviceConstraint], at_most(CONSTRAINTS_MAX)] | None = None
    config: Annotated[list[DeviceClaimConfiguration], at_most(CONFIG_MAX)] | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> DeviceClaim:
        names = [r.name for r in self.requests or []]
        if len(names) != len(set(names)):
            raise ValueError("requests: names must be unique")
        self._derived_used()
        return self

    def _derived_used(self) -> None:
        """Every derived attribute is named by a constraint covering its (sub)request."""
        constraints = self.constraints or []
        for req in self.requests or []:
            alternatives: list[tuple[str, _RequestFields]] = (
                [(req.name, req.exactly)] if req.exactly is not None else []
            )
            alternatives += [(f"{req.name}/{s.name}", s) for s in req.first_available or []]
            for full, spec in alternatives:
                for derived in spec.derived_attributes or []:
                    if not any(
                        derived.name in (c.match_attribute, c.distinct_attribute)
                        and (not c.requests or req.name in c.requests or full in c.requests)
                        for c in constraints
                    ):
                        raise ValueError(
                            f"requests[{req.name}]: derived attribute {derived.name} is not "
                            "used by any matchAttribute or distinctAttribute constraint of "
                            f"request {full}"
                        )


class ResourceClaimSpec(Model):
    """``ResourceClaim.spec``."""

    devices: DeviceClaim | None = None


class DeviceRequestAllocationResult(Model):
    """One allocated device."""

    request: RequestName
    driver: DriverName
    pool: PoolName
    device: DnsLabel
    admin_access: bool | None = None
    tolerations: Annotated[list[DeviceToleration], at_most(TOLERATIONS_MAX)] | None = None
    binding_conditions: Annotated[list[str], at_most(BINDING_CONDITIONS_MAX)] | None = None
    binding_failure_conditions: Annotated[list[str], at_most(BINDING_CONDITIONS_MAX)] | None = None
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[QualifiedName, Quantity] | None = None


class DeviceAllocationConfiguration(Model):
    """Configuration copied into the allocation, tagged with where it came from."""

    source: Literal["FromClass", "FromClaim"]
    requests: list[RequestName] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(Model):
    """``status.allocation.devices``."""

    results: Annotated[list[DeviceRequestAllocationResult], at_most(RESULTS_MAX)] | None = None
    config: (
        Annotated[list[DeviceAllocationConfiguration], at_most(ALLOCATION_CONFIG_MAX)] | None
    ) = None


class AllocationResult(Model):
    """``status.allocation``."""

    devices: DeviceAllocationResult | None = None
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None


class ResourceClaimConsumerReference(Model):
    """``status.reservedFor[]``."""

    api_group: str | None = None
    resource: str
    name: str
    uid: str


class Condition(Model):
    """A metav1 ``Condition`` of a device's status (read as is, not checked further)."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    status: Literal["True", "False", "Unknown"]
    observed_generation: Int64 | None = None
    last_transition_time: str | None = None
    reason: str | None = None
    message: str | None = None


class AllocatedDeviceStatus(Model):
    """``status.devices[]``: what a driver reports about one allocated device (KEP-4817)."""

    driver: DriverName
    pool: PoolName
    device: DnsLabel
    share_id: str | None = Field(default=None, alias="shareID")
    conditions: Annotated[list[Condition], at_most(DEVICE_CONDITIONS_MAX)] | None = None
    data: dict[str, Any] | None = None
    network_data: NetworkDeviceData | None = None


class ResourceClaimStatus(Model):
    """``ResourceClaim.status``."""

    allocation: AllocationResult | None = None
    reserved_for: (
        Annotated[list[ResourceClaimConsumerReference], at_most(RESERVED_FOR_MAX)] | None
    ) = None
    devices: list[AllocatedDeviceStatus] | None = None


class ResourceClaim(Document):
    """A namespaced claim for devices."""

    api_version: Literal["resource.k8s.io/v1"]
    kind: Literal["ResourceClaim"]
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus | None = None


class ResourceClaimTemplateSpec(Model):
    """``ResourceClaimTemplate.spec``: the claim spec to copy (its ``metadata`` is not read)."""

    spec: ResourceClaimSpec


class ResourceClaimTemplate(Document):
    """A namespaced template: a pod's ``resourceClaimTemplateName`` gets a claim made from it."""

    api_version: Literal["resource.k8s.io/v1"]
    kind: Literal["ResourceClaimTemplate"]
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec
