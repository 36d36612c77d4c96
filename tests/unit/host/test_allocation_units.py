"""Small unit checks of the allocator's helpers (the corpus runner covers the whole flow)."""

from fractions import Fraction

import pytest

from kvdev.host.allocation.capacity import consumption, counters_fit, fits, qualify
from kvdev.host.allocation.constraints import EMPTY, Constraint, admit
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.pools import NodeInfo, term_matches
from kvdev.host.k8s.common import NodeSelectorTerm
from kvdev.host.k8s.resource import Device

GI = 2**30
NODE = NodeInfo("node-a", {"zone": "z1", "gpus": "4"})


def _device(policy):
    return Device.model_validate(
        {
            "name": "nic-0",
            "allowMultipleAllocations": True,
            "capacity": {"memory": {"value": "16Gi", "requestPolicy": policy}},
        }
    )


def test_valid_range_rounds_up_to_step():
    dev = _device({"validRange": {"min": "2Gi", "step": "2Gi", "max": "8Gi"}})
    assert consumption("d.example.com", dev, {"d.example.com/memory": Fraction(3 * GI)}) == {
        "memory": 4 * GI
    }
    assert consumption("d.example.com", dev, {"d.example.com/memory": Fraction(GI)}) == {
        "memory": 2 * GI
    }


def test_valid_range_max_exceeded_makes_device_unusable():
    dev = _device({"validRange": {"min": "2Gi", "max": "8Gi"}})
    assert consumption("d.example.com", dev, {"d.example.com/memory": Fraction(10 * GI)}) is None


def test_valid_values_pick_next_and_default_applies():
    dev = _device({"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]})
    assert consumption("d.example.com", dev, {"d.example.com/memory": Fraction(3 * GI)}) == {
        "memory": 4 * GI
    }
    assert consumption("d.example.com", dev, {}) == {"memory": 2 * GI}
    assert consumption("d.example.com", dev, {"d.example.com/memory": Fraction(9 * GI)}) is None


def test_undefined_capacity_and_fit():
    dev = _device(None)
    assert consumption("d.example.com", dev, {"d.example.com/bandwidth": Fraction(1)}) is None
    assert fits(dev, {"memory": Fraction(12 * GI)}, {"memory": Fraction(4 * GI)})
    assert not fits(dev, {"memory": Fraction(13 * GI)}, {"memory": Fraction(4 * GI)})
    assert qualify("memory", "d.example.com") == "d.example.com/memory"
    assert qualify("x.io/memory", "d.example.com") == "x.io/memory"


def test_counters_fit():
    totals = {"set": {"mem": Fraction(8)}}
    assert counters_fit(totals, {("set", "mem"): Fraction(4)}, {("set", "mem"): Fraction(4)})
    assert not counters_fit(totals, {("set", "mem"): Fraction(5)}, {("set", "mem"): Fraction(4)})
    assert not counters_fit(totals, {}, {("other", "mem"): Fraction(1)})


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
    con = Constraint("d.example.com/x", distinct=False, requests=frozenset())
    ok, mem = admit(con, EMPTY, ("string", frozenset({"a", "b"})))
    assert ok
    ok, mem = admit(con, mem, ("string", frozenset({"b", "c"})))
    assert ok
    ok, _ = admit(con, mem, ("string", frozenset({"c", "a"})))
    assert not ok


def test_distinct_compares_with_every_earlier_value():
    con = Constraint("d.example.com/numa", distinct=True, requests=frozenset())
    _, mem = admit(con, EMPTY, ("int", frozenset({0})))
    _, mem = admit(con, mem, ("int", frozenset({1})))
    ok, _ = admit(con, mem, ("int", frozenset({0})))
    assert not ok
    assert not admit(con, mem, None)[0]


def test_constraint_scope_by_parent_or_subrequest():
    con = Constraint("d.example.com/x", distinct=False, requests=frozenset({"a", "b/large"}))
    assert con.applies("a", "a/small")
    assert con.applies("b", "b/large")
    assert not con.applies("b", "b/small")


def test_features_overrides():
    assert Features.from_overrides({"DRADeviceTaints": False}).DRADeviceTaints is False
    with pytest.raises(ValueError, match="unknown allocator features"):
        Features.from_overrides({"DRANope": True})
