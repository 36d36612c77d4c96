"""Upstream KEP-5304 ``DeviceMetadata`` (metadata.resource.k8s.io v1, v1beta1, v1alpha1): the rules.

Field names and JSON shapes are exactly upstream's; the versions have the same content, so one
set of values serves them all (``api_version`` says which one an object was). ``v1`` is the
version KEP-5304 adds at GA with v1beta1's fields; a reader takes whichever of the three a
stream holds, and none of them is assumed present (``older_readers_note``: a stream without
v1alpha1 is one KubeVirt up to v1.9 cannot read). Limits are the
v1beta1 validation rules, applied to v1alpha1 too: its content comes from the same validated
ResourceSlices, so a file breaking them was not written by a conforming driver.

These values are what the host builds and writes (``kvdev.host.publish.metadata``), and the
yardstick a file kvdev *reads* is measured against: upstream's reader checks none of these
rules, so the agent reads with ``reading`` and reports breaks of these rules as warnings
(``reading.conformance``). The tests judge them by pydantic models of the same rules.
``GO_LAYOUT`` is the Go type of the object, for writing it byte for byte as upstream's Go writer
does (``gojson``).

No I/O here.
"""

from __future__ import annotations

from typing import Final, Self

from kvdev.schema import gojson
from kvdev.schema.fields import (
    check_canonical_interface_address,
    check_dns_label,
    check_dns_subdomain,
    check_driver_name,
    check_pool_name,
    check_qualified_name,
    check_request_name,
    check_semver,
)
from kvdev.schema.plain import (
    Rule,
    Value,
    boolean,
    dict_of,
    integer,
    list_of,
    nullable,
    of,
    string,
    struct,
)

GROUP: Final = "metadata.resource.k8s.io"
KIND: Final = "DeviceMetadata"
V1BETA1: Final = f"{GROUP}/v1beta1"
V1ALPHA1: Final = f"{GROUP}/v1alpha1"
V1: Final = f"{GROUP}/v1"  # KEP-5304 at GA: v1beta1's fields (upstream publishes no schema yet)
VERSIONS: Final = (V1, V1BETA1, V1ALPHA1)  # read, newest first (the order writers emit)
WRITTEN: Final = (V1BETA1, V1ALPHA1)  # what kvdev's writers emit, as upstream's v1.37 writer
KUBEVIRT_READS: Final = V1ALPHA1  # the only version virt-launcher decodes, up to v1.9 at least
OLDER_READERS_NOTE: Final = (
    f"the stream has no {V1ALPHA1} object: KubeVirt up to v1.9 reads only v1alpha1 and "
    "cannot read it (kvdev reads v1, v1beta1 and v1alpha1)"
)


def older_readers_note(versions: tuple[str, ...]) -> str | None:
    """The note for a stream of ``versions`` (its objects' apiVersions) that KubeVirt cannot read.

    None when the stream holds v1alpha1, or holds no DeviceMetadata object at all.
    """
    known = [v for v in versions if v in VERSIONS]
    if not known or KUBEVIRT_READS in known:
        return None
    return OLDER_READERS_NOTE


ATTRIBUTE_VALUE_MAX_BYTES = 64  # DeviceAttributeMaxValueLength
ATTRIBUTES_MAX = 32  # attributes per device
ATTRIBUTE_VALUES_MAX = 48  # scalar = 1 value, list = its length (ResourceSlice per-device limit)
INTERFACE_NAME_MAX_BYTES = 256  # NetworkDeviceDataInterfaceNameMaxLength
HARDWARE_ADDRESS_MAX_BYTES = 128  # NetworkDeviceDataHardwareAddressMaxLength
IPS_MAX = 16  # NetworkDeviceDataMaxIPs
RESULTS_MAX = 32  # AllocationResultsMaxSize: devices per claim
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def max_bytes(limit: int) -> Rule:
    """The rule: at most ``limit`` bytes of UTF-8."""

    def check(value: str) -> str:
        size = len(value.encode())
        if size > limit:
            raise ValueError(f"must be at most {limit} bytes, got {size}")
        return value

    return check


def check_int64(value: int) -> int:
    """An int64, as Go decodes it (a larger number fails the object)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit in a 64-bit signed integer")
    return value


def non_empty(values: list[object]) -> list[object]:
    """The rule of a list-typed attribute: at least one value."""
    if not values:
        raise ValueError("a list-typed attribute must have at least one value")
    return values


def exactly_one_value(keys: list[str]) -> None:
    """The typed union's rule, given the keys that are set."""
    if len(keys) != 1:
        found = ", ".join(keys) if keys else "none"
        raise ValueError(
            "exactly one of string, int, bool, version, strings, ints, bools, versions "
            f"must be set (found: {found})"
        )


def unique_ips(ips: list[str]) -> None:
    """``networkData.ips`` lists each address once."""
    seen: set[str] = set()
    for ip in ips:
        if ip in seen:
            raise ValueError(f"ips: {ip!r} is listed twice")
        seen.add(ip)


def attribute_limits(sizes: list[int]) -> None:
    """At most ATTRIBUTES_MAX attributes of at most ATTRIBUTE_VALUES_MAX values in all."""
    if len(sizes) > ATTRIBUTES_MAX:
        raise ValueError(f"attributes: at most {ATTRIBUTES_MAX} allowed, got {len(sizes)}")
    if sum(sizes) > ATTRIBUTE_VALUES_MAX:
        raise ValueError(
            f"attributes: at most {ATTRIBUTE_VALUES_MAX} values in total "
            f"(list items count one each), got {sum(sizes)}"
        )


def result_limit(total: int) -> None:
    """At most RESULTS_MAX devices per claim over all requests."""
    if total > RESULTS_MAX:
        raise ValueError(f"requests: at most {RESULTS_MAX} devices per claim in all, got {total}")


_STRING = string(max_bytes(ATTRIBUTE_VALUE_MAX_BYTES))
_VERSION = string(max_bytes(ATTRIBUTE_VALUE_MAX_BYTES), check_semver)
_INT64 = integer(check_int64)


class DeviceAttribute(Value):
    """A typed-union attribute value: exactly one of the eight keys is set."""

    string: str | None = of(nullable(_STRING), default=None)
    int_: int | None = of(nullable(_INT64), default=None, key="int")
    bool_: bool | None = of(nullable(boolean()), default=None, key="bool")
    version: str | None = of(nullable(_VERSION), default=None)
    strings: list[str] | None = of(nullable(list_of(_STRING, non_empty)), default=None)
    ints: list[int] | None = of(nullable(list_of(_INT64, non_empty)), default=None)
    bools: list[bool] | None = of(nullable(list_of(boolean(), non_empty)), default=None)
    versions: list[str] | None = of(nullable(list_of(_VERSION, non_empty)), default=None)

    def validate(self) -> Self:
        """Exactly one key set."""
        exactly_one_value(
            [key for name, key, _ in self.layout() if getattr(self, name) is not None]
        )
        return self

    def size(self) -> int:
        """How many values the attribute holds (1 for a scalar)."""
        for name, _, _ in self.layout():
            value = getattr(self, name)
            if value is not None:
                return len(value) if isinstance(value, list) else 1
        return 0


class NetworkDeviceData(Value):
    """``networkData``: what the driver knows of a network device's configuration."""

    interface_name: str | None = of(
        nullable(string(max_bytes(INTERFACE_NAME_MAX_BYTES))), default=None
    )
    ips: list[str] | None = of(
        nullable(list_of(string(check_canonical_interface_address), max_length=IPS_MAX)),
        default=None,
    )
    hardware_address: str | None = of(
        nullable(string(max_bytes(HARDWARE_ADDRESS_MAX_BYTES))), default=None
    )

    def validate(self) -> Self:
        """Each address once."""
        unique_ips(self.ips or [])
        return self


class Device(Value):
    """One allocated device of a request, with its attributes and network data."""

    driver: str = of(string(check_driver_name))
    pool: str = of(string(check_pool_name))
    name: str = of(string(check_dns_label))
    attributes: dict[str, DeviceAttribute] | None = of(
        nullable(dict_of(struct(DeviceAttribute), key=(check_qualified_name,))), default=None
    )
    network_data: NetworkDeviceData | None = of(nullable(struct(NetworkDeviceData)), default=None)

    def validate(self) -> Self:
        """The attribute limits."""
        attribute_limits([a.size() for a in (self.attributes or {}).values()])
        return self


class DeviceMetadataRequest(Value):
    """One request of the claim: ``name`` is ``<request>`` or ``<request>/<subrequest>``."""

    name: str = of(string(check_request_name))
    devices: list[Device] = of(list_of(struct(Device)), factory=list)


class ObjectMeta(Value):
    """The four ObjectMeta fields the framework fills in (others are ignored)."""

    name: str = of(string(check_dns_subdomain))
    namespace: str | None = of(nullable(string(check_dns_label)), default=None)
    uid: str | None = of(nullable(string()), default=None)
    generation: int = of(integer(check_int64, ge=0), default=0)


class DeviceMetadata(Value):
    """The metadata of one ResourceClaim's request(s), as a conforming driver writes it."""

    api_version: str = of(string())
    kind: str = of(string())
    metadata: ObjectMeta = of(struct(ObjectMeta))
    pod_claim_name: str | None = of(nullable(string(check_dns_label)), default=None)
    requests: list[DeviceMetadataRequest] = of(
        list_of(struct(DeviceMetadataRequest), max_length=RESULTS_MAX), factory=list
    )

    def validate(self) -> Self:
        """At most RESULTS_MAX devices in all."""
        result_limit(sum(len(r.devices) for r in self.requests))
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
