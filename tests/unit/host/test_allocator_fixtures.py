"""Run the allocator over the conformance corpus and compare with each case's ``expect``.

Comparison rules are those of tests/data/allocator/README.md, with one strictness more: where
a case tagged ``upstream-quirk`` also has an ``alternativeExpect`` (what the API documentation
implies), kvdev must give the primary ``expect``, what the upstream allocator does.
"""

from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from kvdev.host.allocation.allocator import (
    Allocated,
    Allocator,
    Failed,
    Features,
    NodeInfo,
    Unschedulable,
    allocate,
)
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice, parse_quantity
from kvdev.host.k8s.claim import AllocationResult

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "allocator"
FILES = sorted(FIXTURES.glob("*.yaml"))

# Cases not passed yet: case id -> reason. Each is run as a strict expected failure.
KNOWN_FAILURES: dict[str, str] = {}


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _inputs(case):
    """The case's node, claims, and the rest of ``allocate``'s inputs by keyword."""
    node = NodeInfo(case["node"]["name"], case["node"].get("labels") or {})
    claims = [ResourceClaim.model_validate(c, strict=True) for c in case["claims"]]
    capacity = {
        (d["driver"], d["pool"], d["device"]): {
            k: str(v) for k, v in (d.get("consumedCapacity") or {}).items()
        }
        for d in case.get("allocatedCapacity") or []
    }
    return (
        node,
        claims,
        {
            "classes": [DeviceClass.model_validate(c, strict=True) for c in case["deviceClasses"]],
            "slices": [
                ResourceSlice.model_validate(s, strict=True) for s in case["resourceSlices"]
            ],
            "allocated_devices": [
                (d["driver"], d["pool"], d["device"]) for d in case.get("allocatedDevices") or []
            ],
            "allocated_capacity": capacity,
            "features": Features.from_overrides(case.get("features") or {}),
        },
    )


def run_case(case):
    node, claims, inputs = _inputs(case)
    return allocate(node, claims, **inputs)


def _requirements(reqs):
    return frozenset(
        (r["key"], r["operator"], frozenset(str(v) for v in r.get("values") or []))
        for r in reqs or []
    )


def _selector(sel):
    if sel is None:
        return None
    return [
        (_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
        for t in sel["nodeSelectorTerms"]
    ]


def _quantities(values):
    return {k: parse_quantity(str(v)) for k, v in (values or {}).items()}


def _device(actual):
    """Project an actual device result onto the expectation's vocabulary."""
    out = {k: actual[k] for k in ("request", "driver", "pool", "device")}
    if actual.get("adminAccess"):
        out["adminAccess"] = True
    for key in ("tolerations", "bindingConditions", "bindingFailureConditions"):
        if actual.get(key):
            out[key] = actual[key]
    if actual.get("shareID"):
        out["shared"] = True
    if actual.get("consumedCapacity"):
        out["consumedCapacity"] = _quantities(actual["consumedCapacity"])
    return out


def _expected_device(expected):
    out = {k: v for k, v in expected.items() if v not in (None, False, [], {})}
    if "consumedCapacity" in out:
        out["consumedCapacity"] = _quantities(out["consumedCapacity"])
    return out


def _norm_config(entries):
    return [
        {"source": e["source"], "requests": list(e.get("requests") or []), "opaque": e["opaque"]}
        for e in entries or []
    ]


def _outcome_kind(outcome, expect):
    if expect.get("unschedulable"):
        return None if isinstance(outcome, Unschedulable) else f"want unschedulable, got {outcome}"
    if "error" in expect:
        want = expect["error"]
        ok = isinstance(outcome, Failed) and (
            outcome.keyword == want
            or (want == "cel-cost-limit" and outcome.keyword == "cel-runtime-error")
        )
        return None if ok else f"want error {want}, got {outcome}"
    if not isinstance(outcome, Allocated):
        return f"want allocation, got {outcome}"
    return None


def _allocation(dumped, expect):
    want = expect["allocation"]
    if set(dumped) != set(want):
        return f"claims differ: {sorted(dumped)} != {sorted(want)}"
    for name, devices in want.items():
        got = [_device(d) for d in dumped[name].get("devices", {}).get("results") or []]
        exp = [_expected_device(d) for d in devices]
        if got != exp:
            return f"claim {name}: got {got}, want {exp}"
    return None


def _extras(dumped, expect):
    for name, sel in (expect.get("nodeSelectors") or {}).items():
        if _selector(dumped[name].get("nodeSelector")) != _selector(sel):
            return f"claim {name}: node selector {dumped[name].get('nodeSelector')} != {sel}"
    for name, config in (expect.get("config") or {}).items():
        got_config = _norm_config(dumped[name].get("devices", {}).get("config"))
        if got_config != _norm_config(config):
            return f"claim {name}: config {got_config} != {config}"
    return None


def mismatch(outcome, expect):
    """None when ``outcome`` satisfies ``expect``, else a description of the difference."""
    problem = _outcome_kind(outcome, expect)
    if problem or not isinstance(outcome, Allocated):
        return problem
    dumped = {name: r.to_json_dict() for name, r in outcome.results.items()}
    return _allocation(dumped, expect) or _extras(dumped, expect)


def check(path):
    case = _load(path)
    return mismatch(run_case(case), case["expect"])


def _params():
    for path in FILES:
        case_id = path.stem.split("-", 1)[0]
        marks = []
        if case_id in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(reason=KNOWN_FAILURES[case_id], strict=True))
        yield pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("path", list(_params()))
def test_allocator_fixture(path):
    problem = check(path)
    assert problem is None, problem


def test_corpus_present():
    assert len(FILES) == 88


def test_no_case_is_an_upstream_quirk_any_more():
    """Upstream v1.37.2 follows the documentation where an older build did not (fixture 414)."""
    assert [p for p in FILES if "upstream-quirk" in (_load(p).get("tags") or [])] == []


def test_outcomes_are_reproducible():
    path = next(p for p in FILES if p.stem.startswith("801"))
    case = _load(path)
    first, second = run_case(case), run_case(case)
    assert isinstance(first, Allocated)
    assert first == second


@pytest.mark.parametrize("path", list(_params()))
def test_one_allocator_answers_each_node_as_a_fresh_one(path):
    """Claims planned once (``Allocator``) and tried on node after node, as the scheduler does.

    The case's node, then a node that sees none of its slices, then the case's node again:
    each answer is the fresh ``allocate`` call's, and the corpus' expectation holds each time
    (a run must not inherit the last one's constraints, picks or device lists).
    """
    case = _load(path)
    node, claims, inputs = _inputs(case)
    slices, allocated, capacity = (
        inputs.pop("slices"),
        inputs.pop("allocated_devices"),
        inputs.pop("allocated_capacity"),
    )
    planned = Allocator(claims, **inputs)
    elsewhere = NodeInfo("node-with-nothing", {"kvdev.test/none": "true"})
    per_node = {"slices": slices, "allocated_devices": allocated, "allocated_capacity": capacity}
    for where in (node, elsewhere, node):
        again = planned.allocate(where, **per_node)
        fresh = allocate(where, claims, **inputs, **per_node)
        assert again == fresh, where.name
        assert type(again) is type(fresh)
    assert mismatch(again, case["expect"]) is None


def test_fraction_capacity_accepted():
    assert parse_quantity("4Gi") == Fraction(4 * 2**30)


def test_results_are_valid_models():
    """Results are assembled without validation: they must still validate as written."""
    for path in FILES:
        outcome = run_case(_load(path))
        if not isinstance(outcome, Allocated):
            continue
        for result in outcome.results.values():
            data = result.to_json_dict()
            again = AllocationResult.model_validate(data, strict=True)
            assert again.to_json_dict() == data, path.stem
