"""resource.k8s.io/v1 cluster objects the allocator reads, with the limits cheap to check.

Owns DeviceClass, ResourceSlice and DeviceTaintRule (``claim`` owns ResourceClaim), and
``IndexedSlices``: some slices with their devices looked up by (driver, pool, device) instead of
scanned. An empty selector ``{}`` is accepted: the allocator reports it (fixture E13). No I/O
here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Final, Literal, overload

from pydantic import Field, model_validator

from kvdev.host.k8s.common import (
    TAINTS_MAX,
    DeviceSelector,
    DeviceTaint,
    NodeSelector,
    ObjectMeta,
    OpaqueDeviceConfiguration,
    QualifiedName,
    at_most,
)
from kvdev.host.k8s.device import DeviceAttribute, Int64
from kvdev.host.k8s.model import Document, Model
from kvdev.host.k8s.quantity import Quantity, parse_quantity
from kvdev.host.k8s.types import DnsLabel, DnsSubdomain, DriverName, PoolName
from kvdev.schema.metadata import ATTRIBUTE_VALUES_MAX

API_VERSION: Final = "resource.k8s.io/v1"
SELECTORS_MAX = 32  # DeviceSelectorsMaxSize
CONFIG_MAX = 32  # DeviceConfigMaxSize
DEVICES_MAX = 128  # ResourceSliceMaxDevices
DEVICES_WITH_EXTRAS_MAX = 64  # with taints, counters or list attributes
ATTRIBUTES_AND_CAPACITIES_MAX = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
COUNTER_SETS_MAX = 8  # ResourceSliceMaxCounterSets
COUNTERS_MAX = 32  # ResourceSliceMaxCountersPerCounterSet
CONSUMES_COUNTERS_MAX = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
# KEP-5963 (alpha, DRADeviceCompatibilityGroups); the limit was lowered from 8 to 2 in review
# of kubernetes/kubernetes#139795, names must be unique.
COMPATIBILITY_GROUPS_MAX = 2
BINDING_CONDITIONS_MAX = 4  # BindingConditionsMaxSize
VALID_VALUES_MAX = 10  # CapacityRequestPolicyDiscreteMaxOptions

# --------------------------------------------------------------------------- DeviceClass


class DeviceClassConfiguration(Model):
    """Configuration the class adds to every device allocated through it."""

    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(Model):
    """``DeviceClass.spec``."""

    selectors: Annotated[list[DeviceSelector], at_most(SELECTORS_MAX)] | None = None
    config: Annotated[list[DeviceClassConfiguration], at_most(CONFIG_MAX)] | None = None
    extended_resource_name: str | None = None


class DeviceClass(Document):
    """A cluster-scoped device class."""

    api_version: Literal["resource.k8s.io/v1"]
    kind: Literal["DeviceClass"]
    metadata: ObjectMeta
    spec: DeviceClassSpec


# --------------------------------------------------------------------------- ResourceSlice


class ResourcePool(Model):
    """``spec.pool``: the slice's pool and its generation."""

    name: PoolName
    generation: Annotated[Int64, Field(ge=0)]
    resource_slice_count: Annotated[Int64, Field(ge=1)]


class CapacityRequestPolicyRange(Model):
    """``validRange``: ``min`` then ``min + k*step`` up to ``max``."""

    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None

    @model_validator(mode="after")
    def _ordered(self) -> CapacityRequestPolicyRange:
        if self.max is not None and parse_quantity(self.max) < parse_quantity(self.min):
            raise ValueError("max must not be below min")
        if self.step is not None and parse_quantity(self.step) <= 0:
            raise ValueError("step must be positive")
        return self


class CapacityRequestPolicy(Model):
    """How requests for a shared capacity are rounded."""

    default: Quantity | None = None
    valid_values: Annotated[list[Quantity], at_most(VALID_VALUES_MAX)] | None = None
    valid_range: CapacityRequestPolicyRange | None = None

    @model_validator(mode="after")
    def _one_policy(self) -> CapacityRequestPolicy:
        if self.valid_values is not None and self.valid_range is not None:
            raise ValueError("validValues and validRange are mutually exclusive")
        if self.valid_values:
            numbers = [parse_quantity(v) for v in self.valid_values]
            if numbers != sorted(set(numbers)):
                raise ValueError("validValues must be strictly ascending")
            if self.default is not None and parse_quantity(self.default) not in numbers:
                raise ValueError("validValues must contain the default")
        return self


class DeviceCapacity(Model):
    """One capacity of a device."""

    value: Quantity
    request_policy: CapacityRequestPolicy | None = None


class Counter(Model):
    """One counter value."""

    value: Quantity


Counters = Annotated[dict[Annotated[str, Field(min_length=1)], Counter], at_most(COUNTERS_MAX)]


class CounterSet(Model):
    """``spec.sharedCounters[]``: counters that partitions of a device draw from."""

    name: DnsLabel
    counters: Counters


class DeviceCounterConsumption(Model):
    """``devices[].consumesCounters[]``: what a partition takes from a counter set."""

    counter_set: DnsLabel
    counters: Counters
    # KEP-5963 (alpha): devices drawing from the same counter set may only be allocated
    # together while their groups for that set still have a group in common.
    compatibility_groups: (
        Annotated[list[Annotated[str, Field(min_length=1)]], at_most(COMPATIBILITY_GROUPS_MAX)]
        | None
    ) = None

    @model_validator(mode="after")
    def _unique_groups(self) -> DeviceCounterConsumption:
        groups = self.compatibility_groups or []
        if len(set(groups)) != len(groups):
            raise ValueError("compatibilityGroups: names must be unique")
        return self


class NodeAllocatableMapping(Model):
    """How much of a node-allocatable resource an allocated device takes (KEP-5517).

    ``capacityKey``: the device capacity (its consumed share, or the whole value when the
    device is allocated exclusively) times ``capacityMultiplier`` (default 1). Otherwise
    ``deviceMultiplier`` (default 1) per allocated device.
    """

    capacity_key: QualifiedName | None = None
    capacity_multiplier: Quantity | None = None
    device_multiplier: Quantity | None = None

    @model_validator(mode="after")
    def _exclusive(self) -> NodeAllocatableMapping:
        if self.capacity_key is not None and self.device_multiplier is not None:
            raise ValueError("capacityKey and deviceMultiplier are mutually exclusive")
        if self.capacity_multiplier is not None and self.capacity_key is None:
            raise ValueError("capacityMultiplier needs capacityKey")
        return self


class NodeAllocatableOverhead(Model):
    """A fixed amount added per pod using the device and per container of that pod."""

    per_pod: Quantity | None = None
    per_container: Quantity | None = None


class NodeAllocatableResource(Model):
    """``devices[].nodeAllocatableResources[<name>]`` (KEP-5517, alpha)."""

    mapping: NodeAllocatableMapping | None = None
    overhead: NodeAllocatableOverhead | None = None


class Device(Model):
    """One device of a slice."""

    name: DnsLabel
    attributes: dict[QualifiedName, DeviceAttribute] | None = None
    capacity: dict[QualifiedName, DeviceCapacity] | None = None
    consumes_counters: (
        Annotated[list[DeviceCounterConsumption], at_most(CONSUMES_COUNTERS_MAX)] | None
    ) = None
    node_name: DnsSubdomain | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: Annotated[list[DeviceTaint], at_most(TAINTS_MAX)] | None = None
    binds_to_node: bool | None = None
    binding_conditions: Annotated[list[str], at_most(BINDING_CONDITIONS_MAX)] | None = None
    binding_failure_conditions: Annotated[list[str], at_most(BINDING_CONDITIONS_MAX)] | None = None
    allow_multiple_allocations: bool | None = None
    node_allocatable_resources: dict[str, NodeAllocatableResource] | None = None

    @model_validator(mode="after")
    def _limits(self) -> Device:
        attrs = self.attributes or {}
        caps = self.capacity or {}
        if len(attrs) + len(caps) > ATTRIBUTES_AND_CAPACITIES_MAX:
            raise ValueError(
                f"attributes and capacity: at most {ATTRIBUTES_AND_CAPACITIES_MAX} in all, "
                f"got {len(attrs) + len(caps)}"
            )
        values = sum(a.size() for a in attrs.values())
        if values > ATTRIBUTE_VALUES_MAX:
            raise ValueError(f"attributes: at most {ATTRIBUTE_VALUES_MAX} values, got {values}")
        if sum(x is not None for x in self.node_selection()) > 1:
            raise ValueError("at most one of nodeName, nodeSelector, allNodes may be set")
        if self.node_selector is not None and len(self.node_selector.node_selector_terms) != 1:
            raise ValueError("nodeSelector must have exactly one term")
        if not self.allow_multiple_allocations and any(
            c.request_policy is not None for c in caps.values()
        ):
            raise ValueError("capacity requestPolicy needs allowMultipleAllocations: true")
        return self

    def node_selection(self) -> tuple[str | None, NodeSelector | None, bool | None]:
        """The per-device node fields, ``allNodes: false`` counting as unset."""
        return (self.node_name, self.node_selector, self.all_nodes or None)

    def has_extras(self) -> bool:
        """Uses taints, counters or list attributes (the lower device-count limit applies)."""
        lists = any(isinstance(a.value, list) for a in (self.attributes or {}).values())
        return bool(self.taints or self.consumes_counters or lists)


class ResourceSliceSpec(Model):
    """``ResourceSlice.spec``."""

    driver: DriverName
    pool: ResourcePool
    node_name: DnsSubdomain | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] | None = None
    shared_counters: Annotated[list[CounterSet], at_most(COUNTER_SETS_MAX)] | None = None

    @model_validator(mode="after")
    def _rules(self) -> ResourceSliceSpec:
        chosen = [
            key
            for key, value in (
                ("nodeName", self.node_name),
                ("nodeSelector", self.node_selector),
                ("allNodes", self.all_nodes or None),
                ("perDeviceNodeSelection", self.per_device_node_selection or None),
            )
            if value is not None
        ]
        if len(chosen) > 1:
            raise ValueError(
                "nodeName, nodeSelector, allNodes and perDeviceNodeSelection are mutually "
                f"exclusive (found: {', '.join(chosen)})"
            )
        if self.node_selector is not None and len(self.node_selector.node_selector_terms) != 1:
            raise ValueError("nodeSelector must have exactly one term")
        devices = self.devices or []
        if devices and self.shared_counters:
            raise ValueError("devices and sharedCounters are mutually exclusive")
        limit = DEVICES_WITH_EXTRAS_MAX if any(d.has_extras() for d in devices) else DEVICES_MAX
        if len(devices) > limit:
            raise ValueError(f"devices: at most {limit} allowed, got {len(devices)}")
        for i, device in enumerate(devices):
            per_device = sum(x is not None for x in device.node_selection())
            if self.per_device_node_selection and per_device != 1:
                raise ValueError(
                    f"devices[{i}]: with perDeviceNodeSelection, exactly one of nodeName, "
                    "nodeSelector, allNodes must be set"
                )
            if not self.per_device_node_selection and per_device:
                raise ValueError(
                    f"devices[{i}]: nodeName, nodeSelector and allNodes need "
                    "perDeviceNodeSelection on the slice"
                )
        return self


class ResourceSlice(Document):
    """A cluster-scoped slice of a driver's resource pool."""

    api_version: Literal["resource.k8s.io/v1"]
    kind: Literal["ResourceSlice"]
    metadata: ObjectMeta
    spec: ResourceSliceSpec


# --------------------------------------------------------------------------- DeviceTaintRule


class DeviceTaintSelector(Model):
    """Which devices a taint rule applies to; every set field must match."""

    driver: DriverName | None = None
    pool: PoolName | None = None
    device: DnsLabel | None = None


class DeviceTaintRuleSpec(Model):
    """``DeviceTaintRule.spec``."""

    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint


class DeviceTaintRule(Document):
    """A cluster-scoped rule tainting devices."""

    api_version: Literal["resource.k8s.io/v1"]
    kind: Literal["DeviceTaintRule"]
    metadata: ObjectMeta
    spec: DeviceTaintRuleSpec


# --------------------------------------------------------------------------- device lookup

DeviceKey = tuple[str, str, str]
"""``(driver, pool, device)``."""


class IndexedSlices(Sequence[ResourceSlice]):
    """ResourceSlices (a sequence, in order), with their devices by (driver, pool, device).

    ``device``: the device as the slice of the highest pool generation that lists it has it
    (the first such slice in order on a tie); ``taints``: the device's taints, from the last
    slice in order that lists it with taints. Both answer what a scan of the slices in order
    answers, at the cost of one dict lookup; the index is built once, with the value.
    """

    __slots__ = ("_devices", "_slices", "_taints")

    def __init__(self, slices: Iterable[ResourceSlice] = ()) -> None:
        self._slices = tuple(slices)
        devices: dict[DeviceKey, tuple[int, Device]] = {}
        taints: dict[DeviceKey, tuple[DeviceTaint, ...]] = {}
        for s in self._slices:
            spec = s.spec
            generation = spec.pool.generation
            for d in spec.devices or ():
                key = (spec.driver, spec.pool.name, d.name)
                best = devices.get(key)
                if best is None or generation > best[0]:
                    devices[key] = (generation, d)
                if d.taints:
                    taints[key] = tuple(d.taints)
        self._devices = devices
        self._taints = taints

    @classmethod
    def of(cls, slices: Sequence[ResourceSlice]) -> IndexedSlices:
        """``slices`` indexed (as they are, when they already are)."""
        return slices if isinstance(slices, IndexedSlices) else cls(slices)

    def device(self, driver: str, pool: str, name: str) -> Device | None:
        """The device of that driver, pool and name (see the class docstring), or None."""
        found = self._devices.get((driver, pool, name))
        return found[1] if found is not None else None

    def taints(self, driver: str, pool: str, name: str) -> tuple[DeviceTaint, ...]:
        """The device's taints (none: an empty tuple)."""
        return self._taints.get((driver, pool, name), ())

    @overload
    def __getitem__(self, index: int) -> ResourceSlice: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ResourceSlice]: ...
    def __getitem__(self, index: int | slice) -> ResourceSlice | Sequence[ResourceSlice]:
        return self._slices[index]

    def __len__(self) -> int:
        return len(self._slices)
