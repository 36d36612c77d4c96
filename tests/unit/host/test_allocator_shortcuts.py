"""The search's shortcuts change its speed, never its answer.

Random cases (``allocator_cases``) run twice, with shortcuts and as a plain step-by-step port
of upstream's search; outcome, keyword, every result and the notes must agree. Cases that do
not load (the generator may write an object the API would refuse) are counted and skipped.
"""

from collections import Counter
from pathlib import Path

import pytest
from allocator_cases import case
from pydantic import ValidationError

from kvdev.host.allocation import search
from kvdev.host.allocation.allocator import Allocated, Failed, NodeInfo, allocate
from kvdev.host.allocation.features import Features
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice

HERE = Path(__file__).resolve().parent
CASES = 1500


def _inputs(data):
    return {
        "classes": [DeviceClass.model_validate(c, strict=True) for c in data["deviceClasses"]],
        "slices": [ResourceSlice.model_validate(s, strict=True) for s in data["resourceSlices"]],
        "allocated_devices": [
            (d["driver"], d["pool"], d["device"]) for d in data["allocatedDevices"]
        ],
        "allocated_capacity": {
            (d["driver"], d["pool"], d["device"]): d["consumedCapacity"]
            for d in data["allocatedCapacity"]
        },
        "features": Features.from_overrides(data["features"]),
    }


def _view(outcome):
    if isinstance(outcome, Allocated):
        return ("allocated", {k: r.to_json_dict() for k, r in outcome.results.items()})
    if isinstance(outcome, Failed):
        return ("failed", outcome.keyword, outcome.message)
    return ("unschedulable",)


def run(data, *, shortcuts):
    node = NodeInfo(data["node"]["name"], data["node"]["labels"])
    claims = [ResourceClaim.model_validate(c, strict=True) for c in data["claims"]]
    return allocate(node, claims, shortcuts=shortcuts, **_inputs(data))


@pytest.mark.parametrize("block", range(10))
@pytest.mark.parametrize("probe", ["default", "at once"])
def test_shortcuts_never_change_the_answer(block, probe, monkeypatch):
    """``at once``: the hopeless proofs are tried after 3 steps, on every case."""
    if probe == "at once":
        monkeypatch.setattr(search, "PROBE_STEPS", 3)
        monkeypatch.setattr(search, "PROBE_WORK", 10)
    kinds = Counter()
    for seed in range(block * CASES // 10, (block + 1) * CASES // 10):
        data = case(seed)
        try:
            plain = run(data, shortcuts=False)
        except ValidationError:
            kinds["not loaded"] += 1
            continue
        fast = run(data, shortcuts=True)
        assert _view(fast) == _view(plain), f"seed {seed}"
        if getattr(fast, "stopped", ""):
            kinds["stopped early"] += 1
        assert set(fast.notes) <= set(plain.notes), f"seed {seed}"
        kinds[_view(plain)[0]] += 1
    print(probe, dict(kinds))
    assert kinds["allocated"]
    assert kinds["unschedulable"]
    assert kinds["failed"]
    if probe == "at once":
        assert kinds["stopped early"]
