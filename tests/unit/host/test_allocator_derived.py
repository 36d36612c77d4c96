"""Derived attributes (KEP-6080): API rules at load, the explanation, firstAvailable, the CLI.

The allocation rules themselves are the D cases of tests/data/allocator-extra.
"""

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from test_allocator_upstream import documents

from kvdev.host import cli
from kvdev.host.allocation.allocator import Allocated, NodeInfo, allocate
from kvdev.host.allocation.explain import explain
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice

HERE = Path(__file__).resolve().parent
EXTRA = HERE.parents[1] / "data" / "allocator-extra"


def _case(prefix):
    path = next(EXTRA.glob(f"{prefix}-*.yaml"))
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _claim(requests, constraints):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"devices": {"requests": requests, "constraints": constraints}},
    }


def _gpu(derived, name="gpu"):
    return {"name": name, "exactly": {"deviceClassName": "g", "derivedAttributes": derived}}


NUMA = [{"name": "derived/numa", "expression": "1"}]


@pytest.mark.parametrize(
    ("requests", "constraints", "words"),
    [
        ([_gpu(NUMA)], [], "derived attribute derived/numa is not used"),
        (
            [_gpu(NUMA), _gpu([], "nic")],
            [{"requests": ["nic"], "matchAttribute": "derived/numa"}],
            "of request gpu",
        ),
        ([_gpu([{"name": "numa", "expression": "1"}])], [], "must be fully qualified"),
        ([_gpu(NUMA * 2)], [{"matchAttribute": "derived/numa"}], "names must be unique"),
        (
            [_gpu([{"name": f"derived/a{i}", "expression": "1"} for i in range(33)])],
            [{"matchAttribute": f"derived/a{i}"} for i in range(32)],
            "at most 32",
        ),
        (
            [_gpu([{"name": "derived/numa", "expression": "1" * 10241}])],
            [{"matchAttribute": "derived/numa"}],
            "at most 10240 bytes",
        ),
    ],
    ids=["unused", "used-by-another-request", "not-qualified", "duplicate", "33", "long"],
)
def test_api_rules_are_checked_at_load(requests, constraints, words):
    with pytest.raises(ValidationError, match=words):
        ResourceClaim.model_validate(_claim(requests, constraints), strict=True)


def test_a_subrequest_derives_its_own_attribute():
    case = _case("D01")
    gpu, nic = case["claims"][0]["spec"]["devices"]["requests"]
    nic_sub = {"name": "any", **nic["exactly"]}
    del nic_sub["allocationMode"]
    case["claims"][0]["spec"]["devices"]["requests"] = [
        gpu,
        {"name": "nic", "firstAvailable": [nic_sub]},
    ]
    case["claims"][0]["spec"]["devices"]["constraints"][0]["requests"] = ["gpu", "nic/any"]
    out = _run(case)
    assert isinstance(out, Allocated), out
    picked = [(r.request, r.device) for r in out.results["job"].devices.results]
    assert picked == [("gpu", "gpu-2"), ("nic/any", "nic-1")]


def _inputs(case):
    return {
        "classes": [DeviceClass.model_validate(c, strict=True) for c in case["deviceClasses"]],
        "slices": [ResourceSlice.model_validate(s, strict=True) for s in case["resourceSlices"]],
        "allocated_devices": [
            (d["driver"], d["pool"], d["device"]) for d in case.get("allocatedDevices") or []
        ],
    }


def _run(case):
    claims = [ResourceClaim.model_validate(c, strict=True) for c in case["claims"]]
    return allocate(NodeInfo(case["node"]["name"]), claims, **_inputs(case))


def test_explain_names_the_derived_attribute_that_failed():
    case = _case("D05")
    claims = [ResourceClaim.model_validate(c, strict=True) for c in case["claims"]]
    reports = explain(NodeInfo("node-a"), claims, **_inputs(case))
    gpu = next(r for r in reports if r.request == "gpu")
    first = gpu.devices[0]
    assert first.reason == "selector-error"
    assert "derived attribute derived/numa" in first.detail
    assert "gpu.example.com/node-a-gpus/gpu-0" in first.detail


def test_through_the_command(tmp_path, capsys):
    case = _case("D01")
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(documents(case), sort_keys=False), encoding="utf-8")
    assert cli.main(["allocate", "-f", str(path), "--node", "node-a", "-o", "json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    results = items[0]["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-2", "nic-1"]
    off = ["--feature-gates", "DRADerivedAttributes=false"]  # upstream: an error, not ignored
    assert cli.main(["allocate", "-f", str(path), "--node", "node-a", *off]) == 2
