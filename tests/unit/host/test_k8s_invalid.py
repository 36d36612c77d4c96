"""Invalid objects are rejected with the source, the object and the exact field path."""

import copy
import json

import pytest

from kvdev.errors import SchemaError
from kvdev.host.k8s import load

CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "gpu-claim", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.example.com",
                        "allocationMode": "ExactCount",
                        "count": 1,
                    },
                }
            ]
        }
    },
}
SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu"},
    "spec": {
        "driver": "gpu.example.com",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-a",
        "devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "16Gi"}}}],
    },
}
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.example.com"},
    "spec": {"selectors": [{"cel": {"expression": "true"}}]},
}


def _request(claim):
    return claim["spec"]["devices"]["requests"][0]


def _no_class(c):
    del _request(c)["exactly"]["deviceClassName"]


def _both(c):
    _request(c)["firstAvailable"] = [{"name": "a", "deviceClassName": "gpu.example.com"}]


def _neither(c):
    del _request(c)["exactly"]


def _many(c):
    c["spec"]["devices"]["requests"] = [
        {"name": f"r{i}", "exactly": {"deviceClassName": "gpu.example.com"}} for i in range(33)
    ]


def _nine_subrequests(c):
    del _request(c)["exactly"]
    _request(c)["firstAvailable"] = [
        {"name": f"s{i}", "deviceClassName": "gpu.example.com"} for i in range(9)
    ]


def _bad_count(c):
    _request(c)["exactly"]["count"] = 0


def _string_count(c):
    _request(c)["exactly"]["count"] = "1"


def _all_with_count(c):
    _request(c)["exactly"]["allocationMode"] = "All"


def _bad_request_name(c):
    _request(c)["name"] = "GPU"


def _bad_class_name(c):
    _request(c)["exactly"]["deviceClassName"] = "Gpu_Class"


def _bad_tolerations(c):
    _request(c)["exactly"]["tolerations"] = [{"operator": "Exists"}] * 17


def _unqualified_constraint(c):
    c["spec"]["devices"]["constraints"] = [{"matchAttribute": "numaNode"}]


def _bad_capacity_request(c):
    _request(c)["exactly"]["capacity"] = {"requests": {"memory": "lots"}}


def _bad_quantity(s):
    s["spec"]["devices"][0]["capacity"]["memory"]["value"] = "16 GiB"


def _name_and_all_nodes(s):
    s["spec"]["allNodes"] = True


def _too_many_devices(s):
    s["spec"]["devices"] = [{"name": f"d{i}"} for i in range(129)]


def _too_many_tainted_devices(s):
    taint = [{"key": "example.com/t", "effect": "NoSchedule"}]
    s["spec"]["devices"] = [{"name": f"d{i}", "taints": taint} for i in range(65)]


def _two_terms(s):
    del s["spec"]["nodeName"]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    s["spec"]["nodeSelector"] = {"nodeSelectorTerms": [term, term]}


def _bad_operator(s):
    del s["spec"]["nodeName"]
    term = {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["x"]}]}
    s["spec"]["nodeSelector"] = {"nodeSelectorTerms": [term]}


def _device_node_without_per_device(s):
    s["spec"]["devices"][0]["nodeName"] = "node-a"


def _bad_pool(s):
    s["spec"]["pool"]["resourceSliceCount"] = 0


def _bad_attribute(s):
    s["spec"]["devices"][0]["attributes"] = {"gpu.example.com/model": {"string": "a", "int": 1}}


def _policy_without_sharing(s):
    s["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"] = {"default": "1Gi"}


def _too_many_selectors(d):
    d["spec"]["selectors"] = [{"cel": {"expression": "true"}}] * 33


def _bad_driver(d):
    d["spec"]["config"] = [{"opaque": {"driver": "GPU", "parameters": {}}}]


CASES = [
    (CLAIM, _no_class, "spec.devices.requests[0].exactly.deviceClassName", "required"),
    (CLAIM, _both, "spec.devices.requests[0]", "exactly one of exactly and firstAvailable"),
    (CLAIM, _neither, "spec.devices.requests[0]", "exactly one of exactly and firstAvailable"),
    (CLAIM, _many, "spec.devices.requests", "at most 32 entries, got 33"),
    (CLAIM, _nine_subrequests, "spec.devices.requests[0].firstAvailable", "at most 8"),
    (CLAIM, _bad_count, "spec.devices.requests[0].exactly.count", "greater than or equal to 1"),
    (CLAIM, _string_count, "spec.devices.requests[0].exactly.count", "valid integer"),
    (CLAIM, _all_with_count, "spec.devices.requests[0].exactly", "count must not be set"),
    (CLAIM, _bad_request_name, "spec.devices.requests[0].name", "not a DNS label"),
    (
        CLAIM,
        _bad_class_name,
        "spec.devices.requests[0].exactly.deviceClassName",
        "not a DNS subdomain",
    ),
    (CLAIM, _bad_tolerations, "spec.devices.requests[0].exactly.tolerations", "at most 16"),
    (CLAIM, _unqualified_constraint, "spec.devices.constraints[0].matchAttribute", "fully"),
    (
        CLAIM,
        _bad_capacity_request,
        "spec.devices.requests[0].exactly.capacity.requests.memory",
        "not a quantity",
    ),
    (SLICE, _bad_quantity, "spec.devices[0].capacity.memory.value", "not a quantity"),
    (SLICE, _name_and_all_nodes, "spec", "mutually exclusive (found: nodeName, allNodes)"),
    (SLICE, _too_many_devices, "spec", "devices: at most 128 allowed, got 129"),
    (SLICE, _too_many_tainted_devices, "spec", "devices: at most 64 allowed, got 65"),
    (SLICE, _two_terms, "spec", "exactly one term"),
    (SLICE, _bad_operator, "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0]", "int"),
    (SLICE, _device_node_without_per_device, "spec", "devices[0]: nodeName"),
    (SLICE, _bad_pool, "spec.pool.resourceSliceCount", "greater than or equal to 1"),
    (
        SLICE,
        _bad_attribute,
        'spec.devices[0].attributes["gpu.example.com/model"]',
        "found: string, int",
    ),
    (SLICE, _policy_without_sharing, "spec.devices[0]", "needs allowMultipleAllocations"),
    (CLASS, _too_many_selectors, "spec.selectors", "at most 32 entries, got 33"),
    (CLASS, _bad_driver, "spec.config[0].opaque.driver", "not a DNS subdomain"),
]


@pytest.mark.parametrize(
    ("base", "mutate", "path", "message"), CASES, ids=[c[1].__name__ for c in CASES]
)
def test_invalid_object_is_rejected_with_field_path(base, mutate, path, message):
    obj = copy.deepcopy(base)
    mutate(obj)
    with pytest.raises(SchemaError) as info:
        load(json.dumps(obj), "cluster.json")
    problems = info.value.problems
    assert [p.path for p in problems] == [path], problems
    problem = problems[0]
    assert problem.source == "cluster.json"
    assert problem.index == 0
    assert message in problem.message
    kind, meta = obj["kind"], obj["metadata"]
    ns = f"{meta['namespace']}/" if "namespace" in meta else ""
    assert problem.message.startswith(f"{kind}/{ns}{meta['name']}: ")


def test_valid_bases_load():
    assert len(load(json.dumps([CLAIM, SLICE, CLASS][0]), "x")) == 1
    for base in (CLAIM, SLICE, CLASS):
        assert load(json.dumps(base), "x")[0].to_json_dict() == base


def test_every_invalid_object_of_a_stream_is_reported():
    bad_claim = copy.deepcopy(CLAIM)
    _no_class(bad_claim)
    bad_slice = copy.deepcopy(SLICE)
    _bad_quantity(bad_slice)
    text = "\n---\n".join(json.dumps(o) for o in (CLASS, bad_claim, bad_slice))
    with pytest.raises(SchemaError) as info:
        load(text, "s.yaml")
    assert [(p.index, p.path) for p in info.value.problems] == [
        (1, "spec.devices.requests[0].exactly.deviceClassName"),
        (2, "spec.devices[0].capacity.memory.value"),
    ]
    assert "s.yaml: stream[1]: spec.devices.requests[0]" in str(info.value)
