"""The guest-plan file: where each described device goes in the guest, when no domain XML says.

Owns the ``GuestPlan`` kind (YAML or JSON, one document) and its validation. Example::

    apiVersion: bundle.kvdev.io/v1alpha1
    kind: GuestPlan
    devices:
    - claim: vm1-devices          # the directory name: ResourceClaim name, or podClaimName
      request: nic-1              # base request, or <request>/<subrequest>
      driver: sriov.example.com   # optional: narrow by driver, pool, device
      device: vf-1
      pciAddress: "0000:07:00.0"  # the guest PCI address (optional)
      tag: dra:vm1-devices/nic-1/0 # optional; default dra:<claim>/<request>/<index>
      interfaceName: data0        # optional: desired guest name, MTU, routes
      mtu: 9000
      routes: [{destination: 10.3.0.0/16, gateway: 10.1.0.1}]

YAML is read with the safe loader, and only plain decimal numbers are numbers: ``0000:07:00.0``
or ``02:00:00:00:00:01`` stay strings (YAML 1.1 would read some as base-60 numbers). Unknown
fields are errors here (a typo must not silently drop a pin); every error names the file and
the field. No I/O here: the caller passes the bytes.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import AfterValidator, ConfigDict, Field, ValidationError

from kvdev.errors import Problem, SchemaError
from kvdev.host.k8s.model import Model, plain_value, problems_from
from kvdev.host.k8s.types import (
    DnsLabel,
    DnsSubdomain,
    DriverName,
    IfName,
    PciAddress,
    PoolName,
    RequestName,
)
from kvdev.schema.hints import HINTS_MAX, MTU_MAX, MTU_MIN, ROUTES_MAX, TAG_MAX_BYTES, Route

API_VERSION: Final = "bundle.kvdev.io/v1alpha1"
KIND: Final = "GuestPlan"
MAX_PLAN_BYTES: Final = 1024 * 1024


def _tag(value: str) -> str:
    if len(value.encode()) > TAG_MAX_BYTES:
        raise ValueError(f"must be at most {TAG_MAX_BYTES} bytes")
    return value


PlanRoute = Annotated[Route, plain_value(Route)]  # a route is read as the hints read it


class _Strict(Model):
    model_config = ConfigDict(extra="forbid")


class PlanDevice(_Strict):
    """Where one described device (or the one device its selector picks) goes."""

    claim: DnsSubdomain
    request: RequestName
    driver: DriverName | None = None
    pool: PoolName | None = None
    device: DnsLabel | None = None
    pci_address: PciAddress | None = None
    tag: Annotated[str, Field(min_length=1), AfterValidator(_tag)] | None = None
    interface_name: IfName | None = None
    mtu: Annotated[int, Field(ge=MTU_MIN, le=MTU_MAX)] | None = None
    routes: (
        Annotated[list[Annotated[Route, plain_value(Route)]], Field(max_length=ROUTES_MAX)] | None
    ) = None


class GuestPlan(_Strict):
    """The whole plan file."""

    api_version: Literal["bundle.kvdev.io/v1alpha1"]
    kind: Literal["GuestPlan"]
    devices: Annotated[list[PlanDevice], Field(max_length=HINTS_MAX)]


class _Loader(yaml.SafeLoader):
    """The safe loader, with only plain decimal integers read as numbers."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag.rsplit(":", 1)[-1] not in {"int", "float"}]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
)


def _document(data: bytes, source: str) -> Any:  # noqa: ANN401 - plain JSON/YAML data
    if len(data) > MAX_PLAN_BYTES:
        raise SchemaError([Problem(f"larger than {MAX_PLAN_BYTES} bytes", source)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchemaError([Problem(f"not UTF-8 text: {e.reason}", source)]) from e
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            msg = f"not valid JSON: {e.msg} (line {e.lineno} column {e.colno})"
            raise SchemaError([Problem(msg, source)]) from e
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as e:
        raise SchemaError([Problem(f"not valid YAML: {e}", source)]) from e
    if len(docs) != 1:
        raise SchemaError([Problem(f"expected one document, found {len(docs)}", source)])
    return docs[0]


def load_plan(data: bytes, source: str = "") -> GuestPlan:
    """Parse and validate a guest-plan file.

    Raises:
        SchemaError: not YAML/JSON, not a GuestPlan, or a field is invalid (file and field named).
    """
    value = _document(data, source)
    if not isinstance(value, dict):
        raise SchemaError([Problem("expected a mapping (a GuestPlan object)", source)])
    try:
        return GuestPlan.model_validate(value, strict=True)
    except ValidationError as e:
        raise SchemaError(problems_from(e, source=source, index=None)) from e
