"""scheduling.k8s.io PodGroup: the fields the scheduler reads for PodGroup claims (KEP-5729).

Owns ``PodGroup`` (namespaced) with ``spec.resourceClaims[]`` (at most 4, each ``{name,
resourceClaimName? | resourceClaimTemplateName?}``). A pod belongs to the group named by its
``spec.schedulingGroup.podGroupName`` (same namespace); it consumes one of the group's claims
by declaring an identical entry in its own ``spec.resourceClaims``. No I/O here.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import model_validator

from kvdev.host.k8s.common import ObjectMeta, at_most
from kvdev.host.k8s.model import Document, Model
from kvdev.host.k8s.types import DnsLabel, DnsSubdomain

API_GROUP: Final = "scheduling.k8s.io"
API_VERSIONS: Final = ("scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1alpha2")
POD_GROUP_CLAIMS_MAX = 4


class PodGroupResourceClaim(Model):
    """One claim of the group: an existing claim by name, or one made from a template."""

    name: DnsLabel
    resource_claim_name: DnsSubdomain | None = None
    resource_claim_template_name: DnsSubdomain | None = None

    @model_validator(mode="after")
    def _one_of(self) -> PodGroupResourceClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise ValueError(
                "exactly one of resourceClaimName and resourceClaimTemplateName must be set"
            )
        return self


class PodGroupSpec(Model):
    """``PodGroup.spec``: only the claims are read."""

    resource_claims: (
        Annotated[list[PodGroupResourceClaim], at_most(POD_GROUP_CLAIMS_MAX)] | None
    ) = None

    @model_validator(mode="after")
    def _unique(self) -> PodGroupSpec:
        names = [c.name for c in self.resource_claims or []]
        if len(names) != len(set(names)):
            raise ValueError("resourceClaims: names must be unique")
        return self


class PodGroup(Document):
    """A group of pods scheduled together; its claims are shared by all members."""

    api_version: Literal["scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1alpha2"]
    kind: Literal["PodGroup"]
    metadata: ObjectMeta
    spec: PodGroupSpec
