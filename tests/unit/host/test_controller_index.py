"""The controller's index at scale: a claim or slice event reaches exactly the VMIs it concerns
without looking at every cached VMI (the work is bounded, counted, not timed)."""

import random

import pytest

from kvdev.host.controller import index as index_module
from kvdev.host.controller.index import Index, Kind, parse
from kvdev.host.k8s import resource
from kvdev.host.k8s.resource import IndexedSlices

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


def _scan(slices, driver, pool, name):
    """The device and taints as a scan of every slice in order finds them (the reference)."""
    best, taints = None, ()
    for s in slices:
        spec = s.spec
        for d in spec.devices or []:
            if (spec.driver, spec.pool.name, d.name) != (driver, pool, name):
                continue
            if best is None or spec.pool.generation > best[0]:
                best = (spec.pool.generation, d)
            if d.taints:
                taints = tuple(d.taints)
    return (best[1] if best else None), taints


def test_indexed_slices_answer_what_a_scan_of_the_slices_answers():
    rng = random.Random(7)  # noqa: S311 - test data
    raws = []
    for n in range(40):
        devices = []
        for name in rng.sample(["vf-0", "vf-1", "vf-2", "vf-3"], rng.randint(1, 4)):
            device = {"name": name, "attributes": {"slice": {"string": f"s{n}"}}}
            if rng.random() < 0.3:
                device["taints"] = [{"key": f"t{n}", "effect": "NoSchedule"}]
            devices.append(device)
        pool = rng.choice(["a", "b"])
        generation = rng.randint(1, 3)
        raws.append(
            {
                "metadata": {"name": f"s{n}", "resourceVersion": "1"},
                "spec": {
                    "driver": rng.choice([DRIVER, "gpu.example.com"]),
                    "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
                    "nodeName": pool,
                    "devices": devices,
                },
            }
        )
    slices = [parse(Kind.SLICE, r).model for r in raws]
    indexed = IndexedSlices(slices)
    assert list(indexed) == slices
    assert len(indexed) == 40
    assert IndexedSlices.of(indexed) is indexed
    for driver in (DRIVER, "gpu.example.com", "other.example.com"):
        for pool in ("a", "b"):
            for name in ("vf-0", "vf-1", "vf-2", "vf-3", "vf-9"):
                device, taints = _scan(slices, driver, pool, name)
                assert indexed.device(driver, pool, name) is device
                assert indexed.taints(driver, pool, name) == taints


def test_renders_look_devices_up_in_an_index_made_once_per_slice_change(monkeypatch):
    made = {"n": 0}
    original = resource.IndexedSlices.__init__

    def counting(self, slices=()):
        made["n"] += 1
        original(self, slices)

    monkeypatch.setattr(resource.IndexedSlices, "__init__", counting)
    index = Index()
    index.replace(Kind.SLICE, [parse(Kind.SLICE, slice_(f"node-{p}")) for p in range(20)])
    for i in range(1000):
        index.upsert(Kind.VMI, parse(Kind.VMI, vmi(i)))
        index.upsert(Kind.CLAIM, parse(Kind.CLAIM, claim(i, pool=f"node-{i % 20}")))
    seen = [index.inputs(("vms", f"vm-{i}")).slices[DRIVER] for i in range(1000)]
    assert made["n"] == 1
    assert all(s is seen[0] for s in seen)
    assert len(seen[0]) == 20
    assert seen[0].device(DRIVER, "node-3", "vf-0").attributes is None
    # a slice changes: the next render sees it, in an index made again once
    changed = slice_("node-3", version="2")
    changed["spec"]["devices"][0]["attributes"] = {"pf": {"string": "ens9"}}
    index.upsert(Kind.SLICE, parse(Kind.SLICE, changed))
    after = [index.inputs(("vms", f"vm-{i}")).slices[DRIVER] for i in range(3, 1000, 20)]
    assert made["n"] == 2
    assert all(s is after[0] for s in after)
    assert after[0].device(DRIVER, "node-3", "vf-0").attributes["pf"].string == "ens9"
    index.remove(Kind.SLICE, ("", "node-3"))
    assert index.inputs(("vms", "vm-3")).slices[DRIVER].device(DRIVER, "node-3", "vf-0") is None
    assert made["n"] == 3


def test_the_cache_keeps_what_the_models_declare_and_no_unknown_field():
    from kvdev.host.k8s.model import unknown_fields  # noqa: PLC0415

    raw = claim(1)
    raw["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    raw["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"], "x": 1}]}
        ]
    }
    raw["status"]["somethingNew"] = {"deep": [{"x": 1}]}
    raw["status"]["allocation"]["devices"]["results"][0]["extra"] = "kept by the model alone"
    full = index_module.MODELS[Kind.CLAIM].model_validate(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **raw}, strict=True
    )
    assert len(list(unknown_fields(full))) == 4
    cached = parse(Kind.CLAIM, raw)
    assert list(unknown_fields(cached.model)) == []
    assert cached.model.to_json_dict() == full.to_json_dict()  # every declared field kept
    assert cached.raw == {}  # and no JSON beside it


def test_cached_models_share_what_equal_models_hold_alike_and_stay_independent():
    first, second = (parse(Kind.CLAIM, claim(i)).model for i in (1, 2))
    assert first.metadata.__pydantic_fields_set__ is second.metadata.__pydantic_fields_set__
    assert first.metadata.__pydantic_extra__ is second.metadata.__pydantic_extra__ == {}
    copied = first.metadata.model_copy(update={"generation": 3})
    assert "generation" in copied.model_fields_set
    assert "generation" not in second.metadata.model_fields_set  # a copy changes its own set
    assert first.to_json_dict()["metadata"]["name"] == "vm-1-nic"
