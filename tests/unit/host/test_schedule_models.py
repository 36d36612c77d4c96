"""The models the scheduler adds: ResourceClaimTemplate, PodGroup, pod groups, KEP-5517 fields."""

import pytest

from kvdev.errors import SchemaError
from kvdev.host.k8s import Pod, PodGroup, ResourceClaimTemplate, ResourceSlice, load

TEXT = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: ns}
spec:
  metadata: {labels: {a: b}}
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu}}]
---
apiVersion: scheduling.k8s.io/v1alpha3
kind: PodGroup
metadata: {name: g, namespace: ns, uid: u-1}
spec:
  resourceClaims:
  - {name: shared, resourceClaimTemplateName: t}
  - {name: pre, resourceClaimName: c}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  schedulingGroup: {podGroupName: g}
  resourceClaims: [{name: shared, resourceClaimTemplateName: t}]
  containers: [{name: c, resources: {requests: {cpu: 500m}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: s}
spec:
  driver: cpu.example.com
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  nodeName: n1
  devices:
  - name: core-0
    capacity: {cores: {value: "2"}}
    nodeAllocatableResources:
      cpu: {mapping: {capacityKey: cores, capacityMultiplier: "1"}}
      memory: {overhead: {perPod: 64Mi, perContainer: 8Mi}}
"""


def test_new_kinds_and_fields_load():
    tmpl, group, pod, slice_ = load(TEXT, "t.yaml")
    assert isinstance(tmpl, ResourceClaimTemplate)
    assert tmpl.spec.spec.devices.requests[0].exactly.device_class_name == "gpu"
    assert isinstance(group, PodGroup)
    assert [c.name for c in group.spec.resource_claims] == ["shared", "pre"]
    assert isinstance(pod, Pod)
    assert pod.spec.scheduling_group.pod_group_name == "g"
    assert isinstance(slice_, ResourceSlice)
    nar = slice_.spec.devices[0].node_allocatable_resources
    assert nar["cpu"].mapping.capacity_key == "cores"
    assert nar["memory"].overhead.per_container == "8Mi"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x"}, "exactly one of resourceClaimName and resourceClaimTemplateName"),
        (
            {"name": "x", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
            "exactly one of",
        ),
    ],
)
def test_podgroup_claim_needs_exactly_one_source(entry, message):
    text = (
        "apiVersion: scheduling.k8s.io/v1alpha3\nkind: PodGroup\n"
        "metadata: {name: g, namespace: ns}\n"
        f"spec: {{resourceClaims: [{entry}]}}\n"
    )
    with pytest.raises(SchemaError) as err:
        load(text.replace("'", '"'), "g.yaml")
    text_of = str(err.value.problems[0])
    assert "PodGroup/ns/g" in text_of
    assert "spec.resourceClaims[0]" in text_of
    assert message in text_of


def test_podgroup_claims_at_most_four_and_unique():
    claims = ", ".join(f"{{name: c{i}, resourceClaimName: c}}" for i in range(5))
    text = (
        "apiVersion: scheduling.k8s.io/v1alpha3\nkind: PodGroup\n"
        f"metadata: {{name: g}}\nspec: {{resourceClaims: [{claims}]}}\n"
    )
    with pytest.raises(SchemaError, match="at most 4"):
        load(text, "g.yaml")
    dup = text.replace("c1,", "c0,")
    with pytest.raises(SchemaError, match="names must be unique"):
        load(dup.replace(", {name: c4, resourceClaimName: c}", ""), "g.yaml")
