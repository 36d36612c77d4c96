"""Run the allocator over tests/data/allocator-extra (KEP-5963 compatibility groups, KEP-6080
derived attributes: both alpha).

Same case format and comparison as the conformance corpus (``test_allocator_fixtures``, loaded
by path); the allocator oracle (``test_allocator_oracle``) judges the same cases by upstream.
"""

from pathlib import Path

import pytest
import yaml
from allocator_cases import fixture_runner

from kvdev.host.allocation.allocator import NodeInfo
from kvdev.host.allocation.explain import REASONS, explain
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice

HERE = Path(__file__).resolve().parent
EXTRA = HERE.parents[1] / "data" / "allocator-extra"
FILES = sorted(EXTRA.glob("*.yaml"))


fixtures = fixture_runner()


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def check(path):
    case = _load(path)
    outcome = fixtures.run_case(case)
    return fixtures.mismatch(outcome, case["expect"])


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_allocator_extra_fixture(path):
    problem = check(path)
    assert problem is None, problem


def test_extra_corpus_present_and_alpha():
    assert len(FILES) == 20
    assert sum(p.stem.startswith("D") for p in FILES) == 9
    for path in FILES:
        case = _load(path)
        assert path.stem == f"{path.stem.split('-', 1)[0]}-{case['name']}"
        assert "alpha" in case["tags"]


def test_gate_off_is_a_real_difference():
    """C06 with the gate on is C02: unschedulable, so the gate decides the outcome."""
    case = _load(next(p for p in FILES if p.stem.startswith("C06")))
    case["features"] = {}
    assert fixtures.mismatch(fixtures.run_case(case), {"unschedulable": True}) is None


def test_explain_reports_compatibility_group():
    case = _load(next(p for p in FILES if p.stem.startswith("C05")))
    reports = explain(
        NodeInfo(case["node"]["name"], case["node"]["labels"]),
        [ResourceClaim.model_validate(c, strict=True) for c in case["claims"]],
        classes=[DeviceClass.model_validate(c, strict=True) for c in case["deviceClasses"]],
        slices=[ResourceSlice.model_validate(s, strict=True) for s in case["resourceSlices"]],
        allocated_devices=[(d["driver"], d["pool"], d["device"]) for d in case["allocatedDevices"]],
    )
    verdicts = {v.device.rsplit("/", 1)[1]: v.reason for v in reports[0].devices}
    assert verdicts == {"part-0": "in-use", "part-1": "compatibility-group", "part-2": None}
    assert "compatibility-group" in REASONS


def test_duplicate_group_names_rejected():
    case = _load(FILES[0])
    slice_ = case["resourceSlices"][1]
    slice_["spec"]["devices"][0]["consumesCounters"][0]["compatibilityGroups"] = ["mig", "mig"]
    with pytest.raises(ValueError, match="unique"):
        ResourceSlice.model_validate(slice_, strict=True)
