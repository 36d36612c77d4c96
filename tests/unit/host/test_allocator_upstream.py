"""kvdev answers as the upstream Go allocator did, on every reproducer it once differed on.

tests/data/allocator-upstream holds one case per class A-M of issue 15 (see that folder's
README): the conformance-fixture format plus ``observed.upstream_go``, the exit status and
JSON stdout the upstream allocator (all gates on unless ``features`` says otherwise) produced.
Each case runs twice: through ``allocate()`` as the corpus runner builds it, and through
``kvdev-host allocate -o json`` on the case as documents (the input state as claims in use),
whose output is compared with upstream's stdout field by field.
"""

import json
from pathlib import Path

import pytest
import yaml
from allocator_cases import documents, fixture_runner

from kvdev.host import cli
from kvdev.host.allocation.allocator import (
    Allocated,
    Clock,
    Failed,
    NodeInfo,
    Unschedulable,
    allocate,
)
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE.parents[1] / "data" / "allocator-upstream"
FILES = sorted(UPSTREAM.glob("*.yaml"))
CLASSES = "ABCDEFGHIJKLM"


fixtures = fixture_runner()


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _upstream(case):
    seen = case["observed"]["upstream_go"]
    return seen["exit"], json.loads(seen["stdout"])


def _claims(items):
    return {item["metadata"]["name"]: item["status"]["allocation"] for item in items}


def differences(code, printed, case):  # noqa: PLR0911 - one return per difference
    """What differs between kvdev's (exit, JSON) and upstream's observed output."""
    want_code, want = _upstream(case)
    if code != want_code:
        return f"exit {code} ({printed}), upstream {want_code} ({want})"
    if code == 2:
        return None if printed["reason"] == want["reason"] else f"{printed} != {want}"
    if code == 1:
        return None
    got, expected = _claims(printed["items"]), _claims(want["items"])
    if set(got) != set(expected):
        return f"claims {sorted(got)} != {sorted(expected)}"
    for name, alloc in expected.items():
        mine = got[name]
        devices = [fixtures._device(d) for d in mine["devices"]["results"]]
        theirs = [fixtures._device(d) for d in alloc["devices"]["results"]]
        if devices != theirs:
            return f"claim {name}: {devices} != {theirs}"
        config = fixtures._norm_config(mine["devices"].get("config"))
        if config != fixtures._norm_config(alloc["devices"].get("config")):
            return f"claim {name}: config {config} != {alloc['devices'].get('config')}"
        if fixtures._selector(mine.get("nodeSelector")) != fixtures._selector(
            alloc.get("nodeSelector")
        ):
            return f"claim {name}: node selector {mine.get('nodeSelector')}"
    return None


def _printed(outcome):
    """``allocate()``'s outcome as the command would print it (-o json)."""
    if isinstance(outcome, Allocated):
        items = [
            {"metadata": {"name": name}, "status": {"allocation": r.to_json_dict()}}
            for name, r in outcome.results.items()
        ]
        return 0, {"items": items}
    if isinstance(outcome, Unschedulable):
        return 1, {"reason": "unschedulable"}
    assert isinstance(outcome, Failed)
    return 2, {"reason": outcome.keyword, "message": outcome.message}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_reproducer_in_process(path):
    case = _load(path)
    code, printed = _printed(fixtures.run_case(case))
    problem = differences(code, printed, case)
    assert problem is None, problem


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_reproducer_through_the_command(path, tmp_path, capsys):
    case = _load(path)
    objects = tmp_path / "objects.yaml"
    objects.write_text(yaml.safe_dump_all(documents(case), sort_keys=False), encoding="utf-8")
    args = ["allocate", "-f", str(objects), "--node", case["node"]["name"], "-o", "json"]
    if case.get("features"):
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in case["features"].items())
        args += ["--feature-gates", gates]
    code = cli.main(args)
    out, err = capsys.readouterr()
    problem = differences(code, json.loads(out), case)
    assert problem is None, f"{problem}\n{err}"


def test_every_class_has_a_reproducer():
    assert len(FILES) == 25
    assert {p.stem[0] for p in FILES} == set(CLASSES)


def test_the_search_limit_is_gone():
    """Class L: upstream finishes the exhaustive search; so does kvdev, without giving up."""
    for path in FILES:
        if path.stem.startswith("L"):
            outcome = fixtures.run_case(_load(path))
            assert isinstance(outcome, Unschedulable), outcome


def _steps_clock(limit):
    """A clock that moves one second per reading, read every step: at most ``limit`` steps."""
    ticks = iter(range(10**9))
    return Clock(now=lambda: float(next(ticks)), timeout=limit, every=1)


def test_the_result_limit_is_decided_per_alternative_before_any_device_510():
    """Fixture 510's mechanism: 20 + 16 results would pass the limit of 32, so the search goes
    back to the firstAvailable choice at once instead of trying other sets of 20 devices."""
    gpu = "gpu.example.com"
    case = {
        "node": {"name": "node-a", "labels": {}},
        "deviceClasses": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": gpu},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{gpu}"'}}]},
            }
        ],
        "resourceSlices": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "node-a-gpus"},
                "spec": {
                    "driver": gpu,
                    "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                    "nodeName": "node-a",
                    "devices": [{"name": f"gpu-{i}"} for i in range(40)],
                },
            }
        ],
        "claims": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "r0",
                                "firstAvailable": [
                                    {"name": "big", "deviceClassName": gpu, "count": 20},
                                    {"name": "small", "deviceClassName": gpu, "count": 2},
                                ],
                            },
                            {"name": "r1", "exactly": {"deviceClassName": gpu, "count": 16}},
                        ]
                    }
                },
            }
        ],
    }
    node = NodeInfo("node-a")
    claims = [ResourceClaim.model_validate(c, strict=True) for c in case["claims"]]
    inputs = {
        "classes": [DeviceClass.model_validate(c, strict=True) for c in case["deviceClasses"]],
        "slices": [ResourceSlice.model_validate(s, strict=True) for s in case["resourceSlices"]],
    }
    # upstream's own pruning, no kvdev shortcut: well under 200 steps (C(40, 20) without it)
    out = allocate(node, claims, clock=_steps_clock(200), shortcuts=False, **inputs)
    assert isinstance(out, Allocated), out
    picked = [(r.request, r.device) for r in out.results["c"].devices.results]
    assert picked == [("r0/small", "gpu-0"), ("r0/small", "gpu-1")] + [
        ("r1", f"gpu-{i}") for i in range(2, 18)
    ]
