"""The device attribute and network data of resource.k8s.io/v1, shared by slices and claims.

``DeviceAttribute`` is a ResourceSlice device's typed-union attribute value, ``NetworkDeviceData``
a claim's ``status.devices[].networkData``; ``Int64`` is Go's int64. The limits and rule
functions are ``kvdev.schema.metadata``'s, the metadata contract the host writes these into.

No I/O here.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import AfterValidator, Field, model_validator

from kvdev.host.k8s.model import Model
from kvdev.host.k8s.types import CanonicalInterfaceAddress
from kvdev.schema.fields import check_semver
from kvdev.schema.metadata import (
    ATTRIBUTE_VALUE_MAX_BYTES,
    HARDWARE_ADDRESS_MAX_BYTES,
    INTERFACE_NAME_MAX_BYTES,
    IPS_MAX,
    check_int64,
    exactly_one_value,
    max_bytes,
    non_empty,
    unique_ips,
)

_T = TypeVar("_T")


def _max_bytes(limit: int) -> AfterValidator:
    return AfterValidator(max_bytes(limit))


def _non_empty(values: list[_T]) -> list[_T]:
    non_empty(values)  # type: ignore[arg-type]
    return values


AttrString = Annotated[str, _max_bytes(ATTRIBUTE_VALUE_MAX_BYTES)]
AttrVersion = Annotated[str, _max_bytes(ATTRIBUTE_VALUE_MAX_BYTES), AfterValidator(check_semver)]
Int64 = Annotated[int, AfterValidator(check_int64)]


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
        exactly_one_value(
            [
                (info.alias or name)
                for name, info in type(self).model_fields.items()
                if getattr(self, name) is not None
            ]
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
        unique_ips(self.ips or [])
        return self
