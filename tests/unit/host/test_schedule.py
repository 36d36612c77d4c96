"""The pure scheduler: template claims, shared state, PodGroup claims, reservedFor, errors."""

from test_schedule_fakes import (
    GPU,
    by_name,
    claim,
    claim_spec,
    device_class,
    devices_of,
    from_template,
    gpu,
    node,
    node_slice,
    obj,
    pod,
    pod_group,
    template,
)

from kvdev.host.k8s.claim import RESERVED_FOR_MAX
from kvdev.host.scheduling import schedule
from kvdev.host.scheduling.claims import generated_name


def placements(result):
    return {p.pod.metadata.name: p.node for p in result.placed}


def claims_by_name(result):
    return {c.metadata.name: c for c in result.claims}


def two_gpu_cluster():
    return [
        device_class(),
        node("node-a"),
        node_slice("node-a", [gpu("gpu-0"), gpu("gpu-1")]),
        template(),
    ]


def test_template_claims_are_generated_named_and_reserved_for_their_pod():
    result = schedule([*two_gpu_cluster(), pod("p1", [from_template()])])
    name = generated_name("p1", "gpu", "ns")
    assert name.startswith("p1-gpu-")
    assert len(name) == len("p1-gpu-") + 5
    assert name == generated_name("p1", "gpu", "ns")  # deterministic
    assert name != generated_name("p1", "gpu", "other")
    (placed,) = result.placed
    assert placed.node == "node-a"
    assert placed.claim_statuses == (("gpu", name),)
    made = claims_by_name(result)[name]
    assert devices_of(made) == [("node-a", "gpu-0")]
    assert [(r.resource, r.name) for r in made.status.reserved_for] == [("pods", "p1")]


def test_long_generated_names_keep_both_ends_within_the_limit():
    name = generated_name("p" * 60, "c" * 40, "ns")
    assert len(name) == 57 - 1 + 5  # 28 + 28 characters of the base, then the suffix
    assert name.startswith("p" * 28)
    assert name[28:56] == "c" * 27 + "-"


def test_later_pods_see_earlier_allocations():
    pods = [pod(f"p{i}", [from_template()]) for i in range(3)]
    result = schedule([*two_gpu_cluster(), *pods])
    assert placements(result) == {"p0": "node-a", "p1": "node-a"}
    used = [devices_of(c)[0] for c in result.claims]
    assert sorted(used) == [("node-a", "gpu-0"), ("node-a", "gpu-1")]
    (unplaced,) = result.unplaced
    assert unplaced.pod.metadata.name == "p2"
    assert unplaced.reason == "0/1 nodes are available: 1 cannot allocate all claims."


def test_claims_allocated_in_the_input_are_in_use():
    taken = claim(
        "old",
        status={
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": GPU, "pool": "node-a", "device": "gpu-0"}
                    ]
                }
            }
        },
    )
    result = schedule([*two_gpu_cluster(), taken, pod("p1", [from_template()])])
    assert devices_of(result.claims[0]) == [("node-a", "gpu-1")]


def test_rotating_start_spreads_pods_over_nodes():
    objs = [device_class(), template()]
    for n in ("n1", "n2", "n3"):
        objs += [node(n), node_slice(n, [gpu("gpu-0"), gpu("gpu-1")])]
    objs += [pod(f"p{i}", [from_template()]) for i in range(6)]
    result = schedule(objs)
    assert [p.node for p in result.placed] == ["n1", "n2", "n3", "n1", "n2", "n3"]


def test_allocated_claim_restricts_to_its_node_selector():
    objs = [device_class(), template()]
    for n in ("n1", "n2"):
        objs += [node(n), node_slice(n, [gpu("gpu-0"), gpu("gpu-1")])]
    shared = claim("shared")
    objs += [shared, pod("a", [by_name("gpu", "shared")]), pod("b", [by_name("gpu", "shared")])]
    result = schedule(objs)
    assert placements(result) == {"a": "n1", "b": "n1"}  # b's scan starts at n2, rejected
    (out,) = result.claims
    assert [r.name for r in out.status.reserved_for] == ["a", "b"]


def test_named_claim_shared_by_more_than_256_pods_hits_the_reserved_for_limit():
    objs = [device_class(), node("n1"), node_slice("n1", [gpu("gpu-0")]), claim("shared")]
    objs += [pod(f"p{i}", [by_name("gpu", "shared")]) for i in range(RESERVED_FOR_MAX + 1)]
    result = schedule(objs)
    assert len(result.placed) == RESERVED_FOR_MAX
    (unplaced,) = result.unplaced
    assert unplaced.pod.metadata.name == f"p{RESERVED_FOR_MAX}"
    assert "reservedFor limit" in unplaced.reason
    assert len(result.claims[0].status.reserved_for) == RESERVED_FOR_MAX


def test_missing_claim_template_and_group_make_the_pod_unschedulable():
    objs = [
        *two_gpu_cluster(),
        pod("a", [by_name("gpu", "nope")]),
        pod("b", [from_template(tmpl="nope")]),
        pod("c", [from_template()], group="nope"),
    ]
    reasons = {u.pod.metadata.name: u.reason for u in schedule(objs).unplaced}
    assert reasons == {
        "a": "resourceclaim ns/nope not found",
        "b": "resourceclaimtemplate ns/nope not found",
        "c": "podgroup ns/nope not found",
    }


def test_allocator_error_fails_the_pod_with_its_keyword():
    objs = [
        node("n1"),
        node_slice("n1", [gpu("gpu-0")]),
        claim("c", spec=claim_spec(class_name="missing")),
        pod("p", [by_name("gpu", "c")]),
    ]
    (unplaced,) = schedule(objs).unplaced
    assert unplaced.reason.startswith("class-not-found: ")


def test_pod_without_claims_is_placed_and_no_nodes_means_unschedulable():
    assert placements(schedule([node("n1"), pod("p")])) == {"p": "n1"}
    (unplaced,) = schedule([pod("p")]).unplaced
    assert unplaced.reason == "no nodes available to schedule pods"


def test_extended_resource_pod_gets_its_claim():
    objs = [
        device_class(extended="example.com/gpu"),
        node("n1", allocatable={"cpu": "4"}),
        node_slice("n1", [gpu("gpu-0")]),
        pod("p", requests={"example.com/gpu": "1", "cpu": "1"}),
    ]
    result = schedule(objs)
    (placed,) = result.placed
    assert placed.special is not None
    (made,) = result.claims
    assert made.metadata.name == placed.special.claim.metadata.name
    assert devices_of(made) == [("n1", "gpu-0")]
    assert [r.name for r in made.status.reserved_for] == ["p"]


# ------------------------------------------------------------------ PodGroup claims (KEP-5729)


def group_cluster(nodes=("n1", "n2")):
    objs = [device_class(), template(), template("other")]
    for n in nodes:
        objs += [node(n), node_slice(n, [gpu("gpu-0")])]
    return objs


def test_podgroup_claim_is_allocated_once_and_reserved_for_the_group():
    members = [
        pod(f"m{i:03d}", [from_template("shared", "one-gpu")], group="g")
        for i in range(RESERVED_FOR_MAX + 44)
    ]
    group = pod_group("g", [from_template("shared", "one-gpu")], uid="g-uid")
    result = schedule([*group_cluster(), group, *members])
    assert not result.unplaced
    assert result.allocated_claims == 1
    (shared,) = result.claims
    assert shared.metadata.name == generated_name("g", "shared", "ns")
    assert [(r.api_group, r.resource, r.name, r.uid) for r in shared.status.reserved_for] == [
        ("scheduling.k8s.io", "podgroups", "g", "g-uid")
    ]
    # every member lands where the one allocation is reachable
    assert set(placements(result).values()) == {"n1"}
    assert {p.claim_statuses for p in result.placed} == {(("shared", shared.metadata.name),)}


def test_podgroup_member_that_cannot_reach_the_allocation_is_unschedulable():
    group = pod_group("g", [from_template("shared", "one-gpu")])
    first = pod("m1", [from_template("shared", "one-gpu")], group="g")
    # needs a second GPU next to the group's: n1 has only one, n2 cannot reach the claim
    greedy = pod(
        "m2", [from_template("shared", "one-gpu"), from_template("own", "other")], group="g"
    )
    result = schedule([*group_cluster(), group, first, greedy])
    assert placements(result) == {"m1": "n1"}
    (unplaced,) = result.unplaced
    assert unplaced.reason == (
        "0/2 nodes are available: 1 cannot allocate all claims, "
        "1 resourceclaim not available on the node."
    )


def test_pod_entry_that_differs_from_the_group_entry_is_the_pods_own():
    group = pod_group("g", [from_template("shared", "one-gpu")])
    own = pod("m1", [from_template("shared", "other")], group="g")  # other template
    result = schedule([*group_cluster(), group, own])
    (made,) = result.claims
    assert made.metadata.name == generated_name("m1", "shared", "ns")
    assert [r.resource for r in made.status.reserved_for] == ["pods"]


def test_podgroup_existing_claim_is_reserved_for_the_group():
    group = pod_group("g", [by_name("shared", "pre")])
    members = [pod(f"m{i}", [by_name("shared", "pre")], group="g") for i in range(3)]
    result = schedule([*group_cluster(), claim("pre"), group, *members])
    assert len(result.placed) == 3
    (pre,) = result.claims
    assert [r.resource for r in pre.status.reserved_for] == ["podgroups"]


def test_shared_counters_are_written_back_between_pods():
    counters = obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n1-counters"},
            "spec": {
                "driver": GPU,
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
                "nodeName": "n1",
                "sharedCounters": [{"name": "gpu-0", "counters": {"mem": {"value": "40Gi"}}}],
            },
        }
    )
    parts = [
        gpu(
            f"gpu-0-part-{i}",
            consumesCounters=[{"counterSet": "gpu-0", "counters": {"mem": {"value": "20Gi"}}}],
        )
        for i in range(3)
    ]
    objs = [device_class(), template(), node("n1"), counters, node_slice("n1", parts)]
    objs += [pod(f"p{i}", [from_template()]) for i in range(3)]
    result = schedule(objs)
    assert placements(result) == {"p0": "n1", "p1": "n1"}  # 2 x 20Gi of the 40Gi counter
    assert sorted(devices_of(c)[0][1] for c in result.claims) == ["gpu-0-part-0", "gpu-0-part-1"]
    assert result.unplaced[0].reason == "0/1 nodes are available: 1 cannot allocate all claims."
