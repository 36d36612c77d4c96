"""Which claims a pod uses: by name, made from templates, its PodGroup's, extended resources.

Owns the claim book (every claim known to the run, the templates, the PodGroups), generated
claim names, consumer references for ``reservedFor`` and the per-pod resolution. Pure.

* ``resourceClaimName``: the claim of that name in the pod's namespace (missing: the pod
  cannot be scheduled, as upstream waits for it).
* ``resourceClaimTemplateName``: a claim made from the template's ``spec.spec``, named as
  upstream's claim controller does, ``<pod>-<podClaimName>-<suffix>`` (the base cut to 57
  characters by keeping its two ends), except that the five-character suffix is not random:
  it is a hash of ``<namespace>/<pod>/<podClaimName>`` in the API server's name alphabet, so
  runs are reproducible. A claim of that name already in the input is used as is.
* PodGroup claims (KEP-5729): a pod belongs to the PodGroup its
  ``spec.schedulingGroup.podGroupName`` names (same namespace; kvdev reads no other
  membership, e.g. the older ``workloadRef``). A pod entry identical to one of the group's
  ``resourceClaims`` (same name, same claim or template name) is the group's claim: the named
  claim, or one claim per group made from the template, named from the group
  (``<group>-<claimName>-<suffix>``). It is reserved for the PodGroup, not the pod.
* Consumers: ``{resource: pods, name, uid}`` and ``{apiGroup: scheduling.k8s.io, resource:
  podgroups, name, uid}``; an object without ``metadata.uid`` gets a UUIDv5 of its kind,
  namespace and name.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvdev.host.k8s import Pod, PodGroup, ResourceClaim, ResourceClaimTemplate
from kvdev.host.k8s.claim import ResourceClaimConsumerReference
from kvdev.host.k8s.common import ObjectMeta
from kvdev.host.k8s.core import PodResourceClaim
from kvdev.host.k8s.model import assemble
from kvdev.host.k8s.scheduling import API_GROUP, PodGroupResourceClaim

ClaimKey = tuple[str, str]  # (namespace, name)
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery util/rand
_MAX_BASE = 57  # the resourceclaim controller's generateName limit
_UID_NAMESPACE = uuid.UUID("0b6f0f7e-3f2a-5d8c-9b51-7a3e2c1d4f60")


def generated_name(owner: str, claim: str, namespace: str) -> str:
    """``<owner>-<claim>-<5 chars>`` (module docstring)."""
    base = f"{owner}-{claim}-"
    if len(base) > _MAX_BASE:
        half = _MAX_BASE // 2
        base = base[:half] + base[len(base) - half :]
    digest = int.from_bytes(hashlib.sha256(f"{namespace}/{owner}/{claim}".encode()).digest()[:8])
    suffix = ""
    for _ in range(5):
        digest, pick = divmod(digest, len(_ALPHABET))
        suffix += _ALPHABET[pick]
    return base + suffix


def consumer(
    kind: str, namespace: str, name: str, uid: str | None
) -> ResourceClaimConsumerReference:
    """A ``reservedFor`` entry for a pod (``pods``) or a PodGroup (``podgroups``)."""
    return assemble(
        ResourceClaimConsumerReference,
        api_group=API_GROUP if kind == "podgroups" else None,
        resource=kind,
        name=name,
        uid=uid or str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}")),
    )


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod's claims (deduplicated, pod order) and who each is reserved for."""

    keys: tuple[ClaimKey, ...]
    owners: tuple[ResourceClaimConsumerReference, ...]  # per key: the pod or its group
    me: ResourceClaimConsumerReference | None = None  # the pod itself
    templated: tuple[tuple[str, str], ...] = ()  # (pod claim name, claim name) from templates
    problem: str | None = None  # why the pod cannot be scheduled whatever the node


@dataclass(slots=True)
class ClaimBook:
    """Every claim of the run by (namespace, name), in first-seen order."""

    claims: dict[ClaimKey, ResourceClaim] = field(default_factory=dict)
    templates: dict[ClaimKey, ResourceClaimTemplate] = field(default_factory=dict)
    groups: dict[ClaimKey, PodGroup] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        claims: Iterable[ResourceClaim],
        templates: Iterable[ResourceClaimTemplate],
        groups: Iterable[PodGroup],
    ) -> ClaimBook:
        """Index the input objects (namespace ``default`` when unset)."""

        def key(meta_ns: str | None, name: str) -> ClaimKey:
            return (meta_ns or "default", name)

        return cls(
            {key(c.metadata.namespace, c.metadata.name): c for c in claims},
            {key(t.metadata.namespace, t.metadata.name): t for t in templates},
            {key(g.metadata.namespace, g.metadata.name): g for g in groups},
        )

    def _from_template(self, ns: str, template: str, name: str) -> ClaimKey | str:
        key = (ns, name)
        if key in self.claims:
            return key
        tmpl = self.templates.get((ns, template))
        if tmpl is None:
            return f"resourceclaimtemplate {ns}/{template} not found"
        # Built from validated parts (the template's spec, a generated DNS-label name), so
        # constructed without a second validation: a pydantic round trip per pod is slow.
        self.claims[key] = ResourceClaim.model_construct(
            api_version="resource.k8s.io/v1",
            kind="ResourceClaim",
            metadata=ObjectMeta.model_construct(name=name, namespace=ns),
            spec=tmpl.spec.spec,
        )
        return key

    def _group_entry(
        self, pod: Pod, ns: str, entry: PodResourceClaim
    ) -> tuple[PodGroup, PodGroupResourceClaim] | str | None:
        ref = pod.spec.scheduling_group
        if ref is None:
            return None
        group = self.groups.get((ns, ref.pod_group_name))
        if group is None:
            return f"podgroup {ns}/{ref.pod_group_name} not found"
        for g in group.spec.resource_claims or []:
            if (g.name, g.resource_claim_name, g.resource_claim_template_name) == (
                entry.name,
                entry.resource_claim_name,
                entry.resource_claim_template_name,
            ):
                return group, g
        return None

    def resolve(self, pod: Pod) -> PodClaims:
        """The pod's claims, generating template claims as needed."""
        ns = pod.metadata.namespace or "default"
        me = consumer("pods", ns, pod.metadata.name, pod.metadata.uid)
        keys: list[ClaimKey] = []
        owners: list[ResourceClaimConsumerReference] = []
        templated: list[tuple[str, str]] = []
        for entry in pod.spec.resource_claims or []:
            owner, owner_name = me, pod.metadata.name
            found = self._group_entry(pod, ns, entry)
            if isinstance(found, str):
                return PodClaims((), (), problem=found)
            if found is not None:
                group, _ = found
                owner = consumer("podgroups", ns, group.metadata.name, group.metadata.uid)
                owner_name = group.metadata.name
            key: ClaimKey | str
            if entry.resource_claim_name is not None:
                key = (ns, entry.resource_claim_name)
                if key not in self.claims:
                    key = f"resourceclaim {ns}/{entry.resource_claim_name} not found"
            elif entry.resource_claim_template_name is not None:
                name = generated_name(owner_name, entry.name, ns)
                key = self._from_template(ns, entry.resource_claim_template_name, name)
            else:
                continue
            if isinstance(key, str):
                return PodClaims((), (), problem=key)
            if entry.resource_claim_template_name is not None:
                templated.append((entry.name, key[1]))
            if key not in keys:
                keys.append(key)
                owners.append(owner)
        return PodClaims(tuple(keys), tuple(owners), me, tuple(templated))
