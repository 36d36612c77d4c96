"""Upstream KEP-5304 ``DeviceMetadata`` (metadata.resource.k8s.io v1beta1 and v1alpha1): the rules.

Field names and JSON shapes are exactly upstream's; the two versions have the same content,
so one set of models serves both (``api_version`` says which one an object was). Limits are the
v1beta1 validation rules, applied to v1alpha1 too: its content comes from the same validated
ResourceSlices, so a file breaking them was not written by a conforming driver.

These models are what kvdev *writes* (the host's metadata writer builds them) and the yardstick
a file it *reads* is measured against: upstream's reader checks none of these rules, so the
agent reads with ``reading`` and reports breaks of these rules as warnings
(``reading.conformance``). ``GO_LAYOUT`` is the Go type of the object, for writing it byte for
byte as upstream's Go writer does (``gojson``).

No I/O here.
"""

from __future__ import annotations

from typing import Annotated, Final, TypeVar

from pydantic import AfterValidator, Field, model_validator

from kvdev.schema import gojson
from kvdev.schema.base import Document, Model
from kvdev.schema.fields import (
    CanonicalInterfaceAddress,
    DnsLabel,
    DnsSubdomain,
    DriverName,
    PoolName,
    RequestName,
    check_qualified_name,
    check_semver,
)

GROUP: Final = "metadata.resource.k8s.io"
KIND: Final = "DeviceMetadata"
V1BETA1: Final = f"{GROUP}/v1beta1"
V1ALPHA1: Final = f"{GROUP}/v1alpha1"
VERSIONS: Final = (V1BETA1, V1ALPHA1)  # newest first, the order writers emit

ATTRIBUTE_VALUE_MAX_BYTES = 64  # DeviceAttributeMaxValueLength
ATTRIBUTES_MAX = 32  # attributes per device
ATTRIBUTE_VALUES_MAX = 48  # scalar = 1 value, list = its length (ResourceSlice per-device limit)
INTERFACE_NAME_MAX_BYTES = 256  # NetworkDeviceDataInterfaceNameMaxLength
HARDWARE_ADDRESS_MAX_BYTES = 128  # NetworkDeviceDataHardwareAddressMaxLength
IPS_MAX = 16  # NetworkDeviceDataMaxIPs
RESULTS_MAX = 32  # AllocationResultsMaxSize: devices per claim
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_T = TypeVar("_T")


def _max_bytes(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        size = len(value.encode())
        if size > limit:
            raise ValueError(f"must be at most {limit} bytes, got {size}")
        return value

    return AfterValidator(check)


def check_int64(value: int) -> int:
    """An int64, as Go decodes it (a larger number fails the object)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit in a 64-bit signed integer")
    return value


def _non_empty(values: list[_T]) -> list[_T]:
    if not values:
        raise ValueError("a list-typed attribute must have at least one value")
    return values


AttrString = Annotated[str, _max_bytes(ATTRIBUTE_VALUE_MAX_BYTES)]
AttrVersion = Annotated[str, _max_bytes(ATTRIBUTE_VALUE_MAX_BYTES), AfterValidator(check_semver)]
Int64 = Annotated[int, AfterValidator(check_int64)]
QualifiedName = Annotated[str, AfterValidator(check_qualified_name)]


class DeviceAttribute(Model):
    """A typed-union attribute value: exactly one of the eight keys is set."""

    string: AttrString | None = None
    int_: Int64 | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    version: AttrVersion | None = None
    strings: Annotated[list[AttrString], AfterValidator(_non_empty)] | None = None
    ints: Annotated[list[Int64], AfterValidator(_non_empty)] | None = None
    bools: Annotated[list[bool], AfterValidator(_non_empty)] | None = None
    versions: Annotated[list[AttrVersion], AfterValidator(_non_empty)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        keys = [
            (info.alias or name)
            for name, info in type(self).model_fields.items()
            if getattr(self, name) is not None
        ]
        if len(keys) != 1:
            found = ", ".join(keys) if keys else "none"
            raise ValueError(
                "exactly one of string, int, bool, version, strings, ints, bools, versions "
                f"must be set (found: {found})"
            )
        return self

    @property
    def value(self) -> str | int | bool | list[str] | list[int] | list[bool]:
        """The one value that is set."""
        for name in type(self).model_fields:
            v = getattr(self, name)
            if v is not None:
                return v  # type: ignore[no-any-return]
        raise AssertionError("validated attribute has no value")  # pragma: no cover

    def size(self) -> int:
        """How many values the attribute holds (1 for a scalar)."""
        v = self.value
        return len(v) if isinstance(v, list) else 1


class NetworkDeviceData(Model):
    """``networkData``: what the driver knows of a network device's configuration."""

    interface_name: Annotated[str, _max_bytes(INTERFACE_NAME_MAX_BYTES)] | None = None
    ips: Annotated[list[CanonicalInterfaceAddress], Field(max_length=IPS_MAX)] | None = None
    hardware_address: Annotated[str, _max_bytes(HARDWARE_ADDRESS_MAX_BYTES)] | None = None

    @model_validator(mode="after")
    def _unique_ips(self) -> NetworkDeviceData:
        seen: set[str] = set()
        for ip in self.ips or []:
            if ip in seen:
                raise ValueError(f"ips: {ip!r} is listed twice")
            seen.add(ip)
        return self


class Device(Model):
    """One allocated device of a request, with its attributes and network data."""

    driver: DriverName
    pool: PoolName
    name: DnsLabel
    attributes: dict[QualifiedName, DeviceAttribute] | None = None
    network_data: NetworkDeviceData | None = None

    @model_validator(mode="after")
    def _attribute_limits(self) -> Device:
        attrs = self.attributes or {}
        if len(attrs) > ATTRIBUTES_MAX:
            raise ValueError(f"attributes: at most {ATTRIBUTES_MAX} allowed, got {len(attrs)}")
        values = sum(a.size() for a in attrs.values())
        if values > ATTRIBUTE_VALUES_MAX:
            raise ValueError(
                f"attributes: at most {ATTRIBUTE_VALUES_MAX} values in total "
                f"(list items count one each), got {values}"
            )
        return self

    def attribute(self, name: str) -> DeviceAttribute | None:
        """Look up an attribute; an unqualified name is in the driver's own domain."""
        attrs = self.attributes or {}
        domain, _, ident = name.rpartition("/")
        found = attrs.get(name)
        if found is None and domain == self.driver:
            found = attrs.get(ident)
        if found is None and not domain:
            found = attrs.get(f"{self.driver}/{ident}")
        return found


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
        total = sum(len(r.devices) for r in self.requests)
        if total > RESULTS_MAX:
            raise ValueError(
                f"requests: at most {RESULTS_MAX} devices per claim in all, got {total}"
            )
        return self


# --------------------------------------------------------------------------- the Go type

_P, _O, _A = gojson.POINTER, gojson.OMITEMPTY, gojson.ALWAYS
_ATTRIBUTE = gojson.Struct(
    tuple(gojson.Field(n, _P) for n in ("int", "bool", "string", "version"))
    + tuple(gojson.Field(n, _O) for n in ("ints", "bools", "strings", "versions"))
)
_NETWORK = gojson.Struct(
    (gojson.Field("interfaceName"), gojson.Field("ips"), gojson.Field("hardwareAddress"))
)
_DEVICE = gojson.Struct(
    (
        gojson.Field("driver", _A),
        gojson.Field("pool", _A),
        gojson.Field("name", _A),
        gojson.Field("attributes", _O, gojson.MapOf(_ATTRIBUTE)),
        gojson.Field("networkData", _P, _NETWORK),
    )
)
_REQUEST = gojson.Struct(
    (gojson.Field("name", _A), gojson.Field("devices", _O, gojson.ListOf(_DEVICE)))
)
# metav1.ObjectMeta: every field omitempty (creationTimestamp omitzero); the framework fills 4.
_META_STRINGS = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion")
_OBJECT_META = gojson.Struct(
    (*(gojson.Field(n) for n in _META_STRINGS), gojson.Field("generation", zero=0))
)
GO_LAYOUT: Final = gojson.Struct(
    (
        gojson.Field("kind"),  # metav1.TypeMeta, inlined: kind before apiVersion
        gojson.Field("apiVersion"),
        gojson.Field("metadata", _A, _OBJECT_META),  # a struct: omitempty does not drop it
        gojson.Field("podClaimName", _P),
        gojson.Field("requests", _O, gojson.ListOf(_REQUEST)),
    )
)
"""``api/metadata/v1alpha1.DeviceMetadata`` (v1beta1 has the same fields in the same order)."""
