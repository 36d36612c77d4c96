"""``DeviceMetadata`` as upstream's reader decodes it: shapes and JSON types, no value rules.

Upstream's reader (K/DRA ``devicemetadata.DecodeMetadataFromStream``) decodes a stream object
into the Go types of ``api/metadata``, with apimachinery's non-strict JSON decoder: a field of
the wrong JSON type (a string where an int belongs, ``1.0`` for an int64, a number past int64)
fails the object; unknown fields are ignored; ``null`` is the zero value; nothing else is
checked. No name, length, count, IP or version rule applies when reading.

These values accept exactly that. ``conformance`` then checks a decoded document against the
rules a conforming writer follows (the v1beta1 validation in ``metadata``) and reports every
break as a warning: kvdev never refuses what upstream's reader accepts. Whether kvdev can act
on a device is decided later, per device, in ``described``.

No I/O here.
"""

from __future__ import annotations

from kvdev.errors import Problem, Severity
from kvdev.schema import metadata as rules
from kvdev.schema.fields import lookup_attribute
from kvdev.schema.plain import (
    Value,
    boolean,
    dict_of,
    format_path,
    integer,
    list_of,
    nullable,
    of,
    read,
    string,
    struct,
)

_INT64 = integer(rules.check_int64)
_STRING = nullable(string())
_STRINGS = nullable(list_of(string()))  # (inside DeviceAttribute, ``string`` is a field)


class DeviceAttribute(Value):
    """A typed-union attribute value as decoded: any number of the eight keys may be set."""

    string: str | None = of(_STRING, default=None)
    int_: int | None = of(nullable(_INT64), default=None, key="int")
    bool_: bool | None = of(nullable(boolean()), default=None, key="bool")
    version: str | None = of(_STRING, default=None)
    strings: list[str] | None = of(_STRINGS, default=None)
    ints: list[int] | None = of(nullable(list_of(_INT64)), default=None)
    bools: list[bool] | None = of(nullable(list_of(boolean())), default=None)
    versions: list[str] | None = of(_STRINGS, default=None)


class NetworkDeviceData(Value):
    """``networkData`` as decoded: any strings."""

    interface_name: str | None = of(_STRING, default=None)
    ips: list[str] | None = of(_STRINGS, default=None)
    hardware_address: str | None = of(_STRING, default=None)


class Device(Value):
    """One device of a request as decoded (a missing name is the empty string, as in Go)."""

    driver: str | None = of(_STRING, default=None)
    pool: str | None = of(_STRING, default=None)
    name: str | None = of(_STRING, default=None)
    attributes: dict[str, DeviceAttribute | None] | None = of(
        nullable(dict_of(nullable(struct(DeviceAttribute)))), default=None
    )
    network_data: NetworkDeviceData | None = of(nullable(struct(NetworkDeviceData)), default=None)

    def attribute(self, name: str) -> DeviceAttribute | None:
        """Look up an attribute; ``X`` and ``<driver>/X`` are one key (``lookup_attribute``)."""
        return lookup_attribute(self.attributes or {}, self.driver or "", name)


class DeviceMetadataRequest(Value):
    """One request of the claim as decoded."""

    name: str | None = of(_STRING, default=None)
    devices: list[Device | None] | None = of(
        nullable(list_of(nullable(struct(Device)))), default=None
    )


class ObjectMeta(Value):
    """The ObjectMeta fields kvdev reads (the rest are ignored, as unknown fields are)."""

    name: str | None = of(_STRING, default=None)
    namespace: str | None = of(_STRING, default=None)
    uid: str | None = of(_STRING, default=None)
    generation: int | None = of(nullable(_INT64), default=None)


class DeviceMetadata(Value):
    """A ``DeviceMetadata`` object as upstream's reader accepts it."""

    api_version: str = of(string())
    kind: str = of(string())
    metadata: ObjectMeta | None = of(nullable(struct(ObjectMeta)), default=None)
    pod_claim_name: str | None = of(_STRING, default=None)
    requests: list[DeviceMetadataRequest | None] | None = of(
        nullable(list_of(nullable(struct(DeviceMetadataRequest)))), default=None
    )

    @property
    def claim(self) -> str:
        """``metadata.name`` ("" when absent, as in Go)."""
        return self.metadata.name or "" if self.metadata else ""

    @property
    def generation(self) -> int:
        """``metadata.generation`` (0 when absent)."""
        return self.metadata.generation or 0 if self.metadata else 0

    @property
    def structure_only(self) -> bool:
        """No device in any request: the first state of a driver's deferred metadata."""
        return not any(r and r.devices for r in self.requests or [])


# --------------------------------------------------------------------------- conformance


def conformance(data: dict[str, object], *, source: str, index: int | None) -> tuple[Problem, ...]:
    """Where a decoded object breaks the v1beta1 validation rules: warnings, upstream-invalid.

    ``data`` is the object as read (JSON data). Each problem names the field; none rejects
    anything.
    """
    _, errors = read(rules.DeviceMetadata, data)
    return tuple(
        Problem(message, source, index, format_path(loc), Severity.WARNING, upstream_invalid=True)
        for loc, message in errors
    )
