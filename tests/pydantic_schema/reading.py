"""``DeviceMetadata`` as upstream's reader decodes it, in pydantic (the plain reader's judge).

The guest reads with ``kvdev.schema.reading`` (plain); these models and ``conformance`` say
the same in pydantic, for the tests to hold the two to agreement, device for device and error
for error.

What upstream's reader accepts, and why no value rule applies when reading, is said in
``kvdev.schema.reading``.

No I/O here.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, ValidationError

from kvdev.errors import Problem, Severity
from kvdev.host.k8s.model import Document, Model, format_path
from kvdev.schema.metadata import check_int64
from pydantic_schema import metadata as rules

Int64 = Annotated[int, AfterValidator(check_int64)]


class DeviceAttribute(Model):
    """A typed-union attribute value as decoded: any number of the eight keys may be set."""

    string: str | None = None
    int_: Int64 | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    version: str | None = None
    strings: list[str] | None = None
    ints: list[Int64] | None = None
    bools: list[bool] | None = None
    versions: list[str] | None = None


class NetworkDeviceData(Model):
    """``networkData`` as decoded: any strings."""

    interface_name: str | None = None
    ips: list[str] | None = None
    hardware_address: str | None = None


class Device(Model):
    """One device of a request as decoded (a missing name is the empty string, as in Go)."""

    driver: str | None = None
    pool: str | None = None
    name: str | None = None
    attributes: dict[str, DeviceAttribute | None] | None = None
    network_data: NetworkDeviceData | None = None


class DeviceMetadataRequest(Model):
    """One request of the claim as decoded."""

    name: str | None = None
    devices: list[Device | None] | None = None


class ObjectMeta(Model):
    """The ObjectMeta fields kvdev reads (the rest are ignored, as unknown fields are)."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: Int64 | None = None


class DeviceMetadata(Document):
    """A ``DeviceMetadata`` object as upstream's reader accepts it."""

    metadata: ObjectMeta | None = None
    pod_claim_name: str | None = None
    requests: list[DeviceMetadataRequest | None] | None = None


# --------------------------------------------------------------------------- conformance


def conformance(data: dict[str, object], *, source: str, index: int | None) -> tuple[Problem, ...]:
    """Where a decoded object breaks the v1beta1 validation rules: warnings, upstream-invalid.

    ``data`` is the object as read (JSON data). Each problem names the field; none rejects
    anything.
    """
    try:
        rules.DeviceMetadata.model_validate(data, strict=True)
    except ValidationError as e:
        return tuple(
            Problem(
                _message(err),
                source,
                index,
                format_path(tuple(err["loc"])),
                Severity.WARNING,
                upstream_invalid=True,
            )
            for err in e.errors(include_url=False)
            if err["type"] != "extra_forbidden"
        )
    return ()


def _message(err: object) -> str:
    assert isinstance(err, dict)
    if err["type"] == "missing":
        return "required field is missing"
    return str(err["msg"]).removeprefix("Value error, ")
