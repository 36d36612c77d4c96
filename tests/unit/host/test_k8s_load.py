import json
import warnings

import pytest

from kvdev.errors import SchemaError, Severity
from kvdev.host.commands.inputs import load_files
from kvdev.host.k8s import (
    DeviceClass,
    DeviceTaintRule,
    Node,
    Pod,
    ResourceClaim,
    ResourceSlice,
    SkippedObjectWarning,
    load,
    load_with_warnings,
)
from kvdev.host.k8s.claim import DeviceRequestAllocationResult
from kvdev.host.k8s.model import assemble
from kvdev.host.k8s.quantity import parse_quantity

MULTI = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
---
# an empty document is skipped
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {topology.kubernetes.io/region: region-1}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  nodeName: node-a
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
  containers:
  - name: main
    resources:
      requests: {example.com/gpu: 2, cpu: 500m}
      limits: {example.com/gpu: "2"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: maintenance}
spec:
  deviceSelector: {driver: gpu.example.com, pool: node-a}
  taint: {key: example.com/maintenance, effect: NoExecute}
"""

LIST = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
                "allNodes": True,
                "devices": [{"name": "gpu-0"}],
            },
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu/big",
                                "driver": "gpu.example.com",
                                "pool": "p",
                                "device": "gpu-0",
                                "shareID": "8f3a2c1e-0000-4000-8000-000000000001",
                                "consumedCapacity": {"memory": "4Gi"},
                            }
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    },
                }
            },
        },
    ],
}


def test_multi_document_yaml():
    objects = load(MULTI, "m.yaml")
    assert [type(o) for o in objects] == [DeviceClass, Node, Pod, DeviceTaintRule]
    node, pod = objects[1], objects[2]
    assert isinstance(node, Node)
    assert node.metadata.labels == {"topology.kubernetes.io/region": "region-1"}
    assert isinstance(pod, Pod)
    resources = pod.spec.containers[0].resources
    assert resources is not None
    assert resources.requests == {"example.com/gpu": "2", "cpu": "500m"}
    assert parse_quantity(resources.requests["cpu"]) * 2 == 1
    assert pod.spec.resource_claims is not None
    assert pod.spec.resource_claims[0].resource_claim_template_name == "one-gpu"


def test_kind_list_in_json_skips_unknown_kind_with_warning():
    objects, found = load_with_warnings(json.dumps(LIST), "l.json")
    assert [type(o) for o in objects] == [ResourceSlice, ResourceClaim]
    assert [(p.severity, p.index, p.path) for p in found] == [(Severity.WARNING, 0, "items[1]")]
    assert "ConfigMap/cm: skipped" in found[0].message
    claim = objects[1]
    assert isinstance(claim, ResourceClaim)
    assert claim.status is not None
    assert claim.status.allocation is not None
    result = claim.status.allocation.to_json_dict()["devices"]["results"][0]
    assert result["shareID"].startswith("8f3a")
    with pytest.warns(SkippedObjectWarning, match=r"l.json: stream\[0\]: items\[1\]: ConfigMap"):
        assert len(load(json.dumps(LIST), "l.json")) == 2


def test_typed_list_and_error_inside_list_item():
    typed = dict(LIST, kind="ResourceSliceList", items=[LIST["items"][0]])
    assert len(load(json.dumps(typed), "t")) == 1
    bad = json.loads(json.dumps(LIST))
    bad["items"][2]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
        "memory": "4 Gi"
    }
    with pytest.raises(SchemaError) as info:
        load_with_warnings(json.dumps(bad), "l.json")
    [problem] = info.value.problems
    assert problem.path == ("items[2].status.allocation.devices.results[0].consumedCapacity.memory")
    assert problem.message.startswith("ResourceClaim/ns/c: ")


def test_unknown_api_version_is_skipped():
    text = "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: x}\n"
    with pytest.warns(SkippedObjectWarning, match="does not read resource.k8s.io/v1beta1"):
        assert load(text, "x.yaml") == []


def test_no_warning_for_supported_objects():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(MULTI, "m.yaml")


def test_yaml_error_has_line_number():
    with pytest.raises(SchemaError) as info:
        load("apiVersion: v1\nkind: Node\nmetadata: {name: [\n", "broken.yaml")
    [problem] = info.value.problems
    assert problem.source == "broken.yaml"
    assert "invalid YAML at line 4" in problem.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- 1\n- 2\n", "expected an object"),
        ("kind: Node\n", "apiVersion and kind must be strings"),
        ("apiVersion: v1\nkind: List\nitems: 3\n", "items must be a list"),
    ],
)
def test_malformed_documents(text, message):
    with pytest.raises(SchemaError, match=message):
        load(text, "x")


def test_load_files_reports_all_files(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(MULTI, encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: Bad_Name}\n", encoding="utf-8")
    assert len(load_files([good])) == 4
    with pytest.raises(SchemaError) as info:
        load_files([good, bad, bad])
    assert [(p.source, p.path) for p in info.value.problems] == [
        (str(bad), "metadata.name"),
        (str(bad), "metadata.name"),
    ]


def test_assembled_models_are_what_validation_makes():
    """``assemble`` (no validation) gives the model validating the same document gives."""
    values = {"request": "gpu", "driver": "d.example.com", "pool": "p", "device": "g0"}
    for _ in range(2):  # the first of a class is checked against model_construct's
        made = assemble(DeviceRequestAllocationResult, **values, admin_access=None)
        valid = DeviceRequestAllocationResult.model_validate(values, strict=True)
        assert made == valid
        assert made.to_json_dict() == valid.to_json_dict() == values
        assert made.model_fields_set == set(values)


def test_assembling_a_model_whose_default_is_not_none_keeps_the_default():
    """A missing field whose default is not None gets its default, as ``model_construct`` gives
    it, whichever values the class was first assembled with."""
    from pydantic import Field  # noqa: PLC0415

    class Counted(DeviceRequestAllocationResult):
        count: int = 3
        tags: list[str] = Field(default_factory=list)

    values = {"request": "gpu", "driver": "d.example.com", "pool": "p", "device": "g0"}
    first = assemble(Counted, **values, count=5, tags=["a"])
    assert (first.count, first.tags) == (5, ["a"])
    later = assemble(Counted, **values)
    assert (later.count, later.tags) == (3, [])
    assert later == Counted.model_construct(**values)
