"""The controller's index at scale: a claim or slice event reaches exactly the VMIs it concerns
without looking at every cached VMI (the work is bounded, counted, not timed)."""

import pytest

from kvdev.host.controller import index as index_module
from kvdev.host.controller.index import Index, Kind, parse

DRIVER = "sriov.example.com"


def vmi(i, claim=None):
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": f"vm-{i}",
            "namespace": "vms",
            "uid": f"uid-{i}",
            "resourceVersion": "1",
        },
        "spec": {"resourceClaims": [{"name": "nic", "resourceClaimName": claim or f"vm-{i}-nic"}]},
    }


def claim(i, version="1", pool="node-a"):
    result = {"request": "nic", "driver": DRIVER, "pool": pool, "device": f"vf-{i}"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"vm-{i}-nic",
            "namespace": "vms",
            "uid": f"c-{i}",
            "resourceVersion": version,
        },
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "vf"}}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def slice_(pool, version="1"):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": pool, "resourceVersion": version},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "nodeName": pool,
            "devices": [{"name": "vf-0"}],
        },
    }


@pytest.fixture
def counted(monkeypatch):
    """How often the index derives a VMI's claim names (the per-VMI work of a scan)."""
    calls = {"n": 0}
    original = Index._claim_names

    def counting(vmi, pods):
        calls["n"] += 1
        return original(vmi, pods)

    monkeypatch.setattr(index_module.Index, "_claim_names", staticmethod(counting))
    return calls


def test_a_claim_event_among_5000_vmis_looks_at_its_vmi_only(counted):
    index = Index()
    for i in range(5000):
        index.upsert(Kind.VMI, parse(Kind.VMI, vmi(i)))
        index.upsert(Kind.CLAIM, parse(Kind.CLAIM, claim(i, pool=f"node-{i % 50}")))
    index.upsert(Kind.SLICE, parse(Kind.SLICE, slice_("node-7")))
    counted["n"] = 0
    assert index.upsert(Kind.CLAIM, parse(Kind.CLAIM, claim(42, version="2", pool="node-42"))) == {
        ("vms", "vm-42")
    }
    touched = index.upsert(Kind.SLICE, parse(Kind.SLICE, slice_("node-7", version="2")))
    assert touched == {("vms", f"vm-{i}") for i in range(7, 5000, 50)}
    assert counted["n"] == 0  # was: every cached VMI, for each of the two events


def test_the_joins_follow_vmis_claims_and_removals():
    index = Index()
    index.upsert(Kind.VMI, parse(Kind.VMI, vmi(1, claim="shared")))
    index.upsert(Kind.VMI, parse(Kind.VMI, vmi(2, claim="shared")))
    shared = claim(0)
    shared["metadata"]["name"] = "shared"
    assert index.upsert(Kind.CLAIM, parse(Kind.CLAIM, shared)) == {("vms", "vm-1"), ("vms", "vm-2")}
    assert index.upsert(Kind.SLICE, parse(Kind.SLICE, slice_("node-a"))) == {
        ("vms", "vm-1"),
        ("vms", "vm-2"),
    }
    # vm-2 now names another claim: the shared claim's events reach vm-1 only
    index.upsert(
        Kind.VMI,
        parse(Kind.VMI, {**vmi(2), "metadata": {**vmi(2)["metadata"], "resourceVersion": "2"}}),
    )
    shared["metadata"]["resourceVersion"] = "2"
    assert index.upsert(Kind.CLAIM, parse(Kind.CLAIM, shared)) == {("vms", "vm-1")}
    assert index.remove(Kind.VMI, ("vms", "vm-1")) == {("vms", "vm-1")}
    shared["metadata"]["resourceVersion"] = "3"
    assert index.upsert(Kind.CLAIM, parse(Kind.CLAIM, shared)) == set()
    assert index.remove(Kind.CLAIM, ("vms", "shared")) == set()
    assert index.upsert(Kind.SLICE, parse(Kind.SLICE, slice_("node-a", version="2"))) == set()
