"""Small unit checks of the allocator's helpers (the corpus runner covers the whole flow)."""

from fractions import Fraction

import pytest

from kvdev.host.allocation.capacity import fits as capacity_fits
from kvdev.host.allocation.capacity import need, parse_capacity
from kvdev.host.allocation.constraints import EMPTY_LIST, Distinct, Match
from kvdev.host.allocation.counters import Counters
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.pools import NodeInfo, Pool, _candidates, term_matches
from kvdev.host.k8s.common import NodeSelectorTerm
from kvdev.host.k8s.resource import Device, ResourceSlice

GI = 2**30
NODE = NodeInfo("node-a", {"zone": "z1", "gpus": "4"})


def _caps(policy):
    dev = Device.model_validate(
        {
            "name": "nic-0",
            "allowMultipleAllocations": True,
            "capacity": {"memory": {"value": "16Gi", "requestPolicy": policy}},
        }
    )
    return {k: parse_capacity(v) for k, v in (dev.capacity or {}).items()}


def consumption(caps, requests):
    got = need(requests, caps)
    return None if got is None else {name: amount for name, amount, _ in got}


def test_valid_range_rounds_up_to_step():
    caps = _caps({"validRange": {"min": "2Gi", "step": "2Gi", "max": "8Gi"}})
    assert consumption(caps, {"memory": Fraction(3 * GI)}) == {"memory": 4 * GI}
    assert consumption(caps, {"memory": Fraction(GI)}) == {"memory": 2 * GI}


def test_valid_range_max_exceeded_makes_device_unusable():
    caps = _caps({"validRange": {"min": "2Gi", "max": "8Gi"}})
    assert consumption(caps, {"memory": Fraction(10 * GI)}) is None


def test_valid_values_pick_next_and_default_applies():
    caps = _caps({"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]})
    assert consumption(caps, {"memory": Fraction(3 * GI)}) == {"memory": 4 * GI}
    assert consumption(caps, {}) == {"memory": 2 * GI}
    assert consumption(caps, {"memory": Fraction(9 * GI)}) is None


def test_undefined_capacity_and_fit():
    caps = _caps(None)
    assert consumption(caps, {"bandwidth": Fraction(1)}) is None
    # capacity keys compare as written, as upstream compares them
    assert consumption(caps, {"d.example.com/memory": Fraction(1)}) is None
    four = need({"memory": Fraction(4 * GI)}, caps)
    assert four is not None
    assert capacity_fits(four, {"memory": Fraction(12 * GI)}, None)
    assert not capacity_fits(four, {"memory": Fraction(12 * GI)}, {"memory": Fraction(1)})


def _counter_candidate(used):
    slice_ = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": "d.example.com",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-a",
                "devices": [
                    {
                        "name": "part",
                        "consumesCounters": [
                            {"counterSet": "set", "counters": {"mem": {"value": str(used)}}}
                        ],
                    }
                ],
            },
        }
    )
    pool = Pool("d.example.com", "p", 1, slices=[slice_], counter_sets={"set": {"mem": 8}})
    return _candidates(pool, NODE)[0]


def test_counters_fit():
    counters = Counters(set())
    four = _counter_candidate(4)
    assert counters.take(four)
    assert counters.take(four)
    assert not counters.take(four)  # 12 > 8: refused, nothing taken
    counters.release(four)
    assert counters.take(four)
    assert not counters.take(_counter_candidate(5))


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        ({}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}, True),
        ({"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r"]}]}, True),
        ({"matchExpressions": [{"key": "rack", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["3"]}]}, True),
        ({"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["3"]}]}, False),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}, True),
    ],
)
def test_node_selector_terms(term, matches):
    assert term_matches(NodeSelectorTerm.model_validate(term), NODE) is matches


def test_list_attribute_match_keeps_running_intersection():
    con = Match("d.example.com/x", frozenset(), lists=True)
    assert con.add("r", ("string", True, frozenset({"a", "b"})))
    assert con.add("r", ("string", True, frozenset({"b", "c"})))
    assert not con.add("r", ("string", True, frozenset({"c", "a"})))


def test_distinct_compares_with_every_earlier_value():
    con = Distinct("d.example.com/numa", frozenset(), lists=True)
    assert con.add("a", ("int", False, frozenset({0})))
    assert con.add("b", ("int", False, frozenset({1})))
    assert not con.add("c", ("int", False, frozenset({0})))
    assert not con.add("c", None)


def test_distinct_compares_with_every_device_of_the_same_request():
    """Upstream v1.37.2 keeps every device's value (fixture 414): the third meets the first."""
    con = Distinct("d.example.com/numa", frozenset(), lists=False)
    assert con.add("r", ("int", False, frozenset({0})))
    assert con.add("r", ("int", False, frozenset({1})))
    assert not con.add("r", ("int", False, frozenset({0})))
    con.remove("r")  # backtracking pops the last device only
    assert not con.add("r", ("int", False, frozenset({0})))
    assert con.add("r", ("int", False, frozenset({2})))


def test_list_match_restores_its_intersection_when_backtracking():
    con = Match("d.example.com/x", frozenset(), lists=True)
    assert con.add("r", ("string", True, frozenset({"a", "b"})))
    assert con.add("r", ("string", True, frozenset({"b"})))
    con.remove("r")
    assert con.add("r", ("string", True, frozenset({"a"})))


def test_an_empty_list_value_is_no_value_in_list_mode():
    """Upstream's attributeAsSet gives nil for an empty list: no list-mode constraint admits it."""
    assert not Match("d.example.com/x", frozenset(), lists=True).add("r", EMPTY_LIST)
    assert not Distinct("d.example.com/x", frozenset(), lists=True).add("r", EMPTY_LIST)
    assert Match("d.example.com/x", frozenset(), lists=False).add("r", EMPTY_LIST)


def test_constraint_scope_by_parent_or_subrequest():
    con = Match("d.example.com/x", frozenset({"a", "b/large"}), lists=True)
    assert con.applies("a", "small")
    assert con.applies("b", "large")
    assert not con.applies("b", "small")


def test_features_overrides():
    assert Features.from_overrides({"DRADeviceTaints": False}).DRADeviceTaints is False
    with pytest.raises(ValueError, match="unknown allocator features"):
        Features.from_overrides({"DRANope": True})


def test_each_subrequest_is_checked_in_full_before_the_next():
    """Upstream's order: the first alternative (All: its pools) before the second's class."""
    from kvdev.host.allocation.allocator import Failed, allocate  # noqa: PLC0415
    from kvdev.host.k8s import DeviceClass, ResourceClaim  # noqa: PLC0415

    gpu = "gpu.example.com"
    incomplete = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": gpu,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
                "nodeName": "node-a",
                "devices": [{"name": "gpu-0"}],
            },
        }
    )
    cls = DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": gpu},
            "spec": {},
        }
    )
    subs = [
        {"name": "all", "deviceClassName": gpu, "allocationMode": "All"},
        {"name": "other", "deviceClassName": "missing"},
    ]
    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "firstAvailable": subs}]}},
        }
    )
    out = allocate(NODE, [claim], classes=[cls], slices=[incomplete])
    assert isinstance(out, Failed)
    assert out.keyword == "pool-incomplete"
