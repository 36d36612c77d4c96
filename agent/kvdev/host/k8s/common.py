"""Shapes shared by the resource.k8s.io/v1 and core/v1 models.

Owns object metadata (with owner references), the v1 ``NodeSelector``, device taints and
tolerations, opaque configuration, CEL selectors and the list-limit helper.

No I/O here.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, Field, model_validator

from kvdev.host.k8s.device import Int64
from kvdev.host.k8s.model import Model
from kvdev.host.k8s.types import DnsLabel, DnsSubdomain, DriverName
from kvdev.schema.fields import check_qualified_name

OPAQUE_PARAMETERS_MAX_BYTES = 10 * 1024  # OpaqueParametersMaxLength
_T = TypeVar("_T")


def at_most(limit: int) -> AfterValidator:
    """A list (or map) length limit with upstream's wording."""

    def check(values: _T) -> _T:
        size = len(values)  # type: ignore[arg-type]
        if size > limit:
            raise ValueError(f"must have at most {limit} entries, got {size}")
        return values

    return AfterValidator(check)


def check_fully_qualified_name(value: str) -> str:
    """A ``<domain>/<name>`` attribute name: the domain is required."""
    check_qualified_name(value)
    if "/" not in value:
        raise ValueError(f"{value!r} must be fully qualified (<domain>/<name>)")
    return value


QualifiedName = Annotated[str, AfterValidator(check_qualified_name)]
FullyQualifiedName = Annotated[str, AfterValidator(check_fully_qualified_name)]


class OwnerReference(Model):
    """``metadata.ownerReferences[]``: who owns the object (garbage collection follows it)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Model):
    """The ObjectMeta fields kvdev reads; everything else is ignored."""

    name: DnsSubdomain
    namespace: DnsLabel | None = None
    uid: str | None = None
    generation: Annotated[Int64, Field(ge=0)] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    resource_version: str | None = None  # opaque: compared for equality only
    owner_references: list[OwnerReference] | None = None
    deletion_timestamp: str | None = None


# --------------------------------------------------------------------------- node selectors

NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class NodeSelectorRequirement(Model):
    """One ``{key, operator, values}`` requirement of a node selector term."""

    key: Annotated[str, Field(min_length=1)]
    operator: NodeSelectorOperator
    values: list[str] | None = None

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        values = self.values or []
        if self.operator in {"In", "NotIn"} and not values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in {"Exists", "DoesNotExist"} and values:
            raise ValueError(f"operator {self.operator} takes no values")
        if self.operator in {"Gt", "Lt"}:
            if len(values) != 1:
                raise ValueError(f"operator {self.operator} needs exactly one value")
            try:
                int(values[0])
            except ValueError as e:
                raise ValueError(f"operator {self.operator} needs an integer value") from e
        return self


class NodeSelectorTerm(Model):
    """Requirements that must all hold (AND)."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(Model):
    """core/v1 ``NodeSelector``: the terms are ORed."""

    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1)]


# --------------------------------------------------------------------------- taints

TAINTS_MAX = 16  # DeviceTaintsMaxLength
TOLERATIONS_MAX = 16  # DeviceTolerationsMaxLength


class DeviceTaint(Model):
    """A device taint; an effect other than NoSchedule/NoExecute acts like ``None``."""

    key: Annotated[str, Field(min_length=1, max_length=316)]  # a label key
    value: Annotated[str, Field(max_length=63)] | None = None
    effect: Annotated[str, Field(min_length=1)]
    time_added: str | None = None


class DeviceToleration(Model):
    """A request's toleration of device taints."""

    key: Annotated[str, Field(max_length=316)] | None = None
    # The API server's default (SetObjectDefaults_ResourceClaim): what the scheduler reads and
    # writes into the allocation's tolerations.
    operator: Literal["Equal", "Exists"] = "Equal"
    value: Annotated[str, Field(max_length=63)] | None = None
    effect: Literal["NoSchedule", "NoExecute"] | None = None
    toleration_seconds: Int64 | None = None

    @model_validator(mode="after")
    def _operator_rules(self) -> DeviceToleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("an empty key needs operator Exists")
        return self


# --------------------------------------------------------------------------- configuration


def _parameters_size(value: dict[str, Any]) -> dict[str, Any]:
    size = len(json.dumps(value, separators=(",", ":")).encode())
    if size > OPAQUE_PARAMETERS_MAX_BYTES:
        raise ValueError(f"must be at most {OPAQUE_PARAMETERS_MAX_BYTES} bytes, got {size}")
    return value


class OpaqueDeviceConfiguration(Model):
    """Driver-specific parameters, passed through unread."""

    driver: DriverName
    parameters: Annotated[dict[str, Any], AfterValidator(_parameters_size)]


class CelDeviceSelector(Model):
    """A CEL expression evaluated against each candidate device."""

    expression: Annotated[str, Field(max_length=10 * 1024)]


class DeviceSelector(Model):
    """A selector; an empty one is kept so the allocator can report "unsupported selector"."""

    cel: CelDeviceSelector | None = None
