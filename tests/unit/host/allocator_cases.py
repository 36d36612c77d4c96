"""Random small allocator cases in the conformance-fixture format (holds no tests).

Like the differential runs of issue 15: a node and a second node; pools node-local, by node
selector, on all nodes and with per-device node selection; several slices, older
generations, incomplete pools; typed and list attributes, capacities with request policies,
shared counters, taints, binding conditions; CEL selectors (some that fail on devices lacking
an attribute); ExactCount / All, adminAccess, tolerations, capacity requests, firstAvailable;
constraints, derived attributes (KEP-6080); claim config; devices and capacity already in use;
now and then a gate off.
``case(seed)`` is deterministic.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

GPU = "gpu.example.com"
NIC = "nic.example.com"
NUMA = "resource.kubernetes.io/numaNode"
PCIE = "resource.kubernetes.io/pcieRoot"
GATES = [
    "DRAConsumableCapacity",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRADeviceBindingConditions",
    "DRAListTypeAttributes",
    "DRAPrioritizedList",
    "DRAAdminAccess",
]
SELECTORS = [
    f'device.attributes["{GPU}"].model == "a100"',  # fails where model is missing
    f'has(device.attributes["{GPU}"].mem) && device.attributes["{GPU}"].mem >= 16',
    f'!has(device.attributes["{NIC}"].model) || device.attributes["{NIC}"].model != "l4"',
    "device.allowMultipleAllocations",
    f'device.capacity["{GPU}"].memory.compareTo(quantity("16Gi")) >= 0',  # may fail
]
DERIVED = [
    (
        'has(device.attributes["resource.kubernetes.io"].numaNode) ? '
        'device.attributes["resource.kubernetes.io"].numaNode : 7'
    ),
    f'device.driver == "{GPU}" ? "g" : "n"',
    f'device.attributes["{GPU}"].mem / 8',  # fails where mem is missing
]
NODE_SELECTORS: list[list[dict[str, Any]]] = [  # every operator and fields; one term (API)
    [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}],
    [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z2"]}]}],
    [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}],
    [{"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]}],
    [{"matchExpressions": [{"key": "slots", "operator": "Gt", "values": ["3"]}]}],
    [{"matchExpressions": [{"key": "slots", "operator": "Lt", "values": ["3"]}]}],
    [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}],
    [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}],
    [
        {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}],
        }
    ],
]
CLASSES = {
    "gpu": [f'device.driver == "{GPU}"'],
    "nic": [f'device.driver == "{NIC}"'],
    "any": [],
    "shared": ["device.allowMultipleAllocations"],
}


def _device(  # noqa: C901 - one optional field per branch
    rng: random.Random, name: str, *, per_device: bool, counters: bool
) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    attrs: dict[str, Any] = {}
    if rng.random() < 0.7:
        attrs["model"] = {"string": rng.choice(["a100", "h100", "l4"])}
    if rng.random() < 0.5:
        attrs["mem"] = {"int": rng.choice([8, 16, 32])}
    if rng.random() < 0.6:
        attrs[NUMA] = {"ints": [0, 1]} if rng.random() < 0.15 else {"int": rng.randrange(2)}
    if rng.random() < 0.4:
        attrs[PCIE] = {"string": rng.choice(["pci0", "pci1"])}
    if attrs:
        d["attributes"] = attrs
    multi = rng.random() < 0.25
    if rng.random() < 0.4:
        memory: dict[str, Any] = {"value": rng.choice(["8Gi", "16Gi", "40Gi"])}
        if multi and rng.random() < 0.5:
            memory["requestPolicy"] = rng.choice(
                [
                    {"default": "2Gi", "validRange": {"min": "2Gi", "step": "2Gi", "max": "8Gi"}},
                    {"validRange": {"min": "1Gi"}},
                    {"default": "4Gi", "validValues": ["4Gi", "8Gi"]},
                ]
            )
        d["capacity"] = {"memory": memory}
    if multi:
        d["allowMultipleAllocations"] = True
    if rng.random() < 0.15:
        d["taints"] = [{"key": "example.com/maint", "value": "planned", "effect": "NoSchedule"}]
    if rng.random() < 0.08:
        d["bindingConditions"] = ["ready"]
        d["bindingFailureConditions"] = ["failed"]
    if counters:
        d["consumesCounters"] = [
            {"counterSet": "cs", "counters": {"mem": {"value": rng.choice(["4Gi", "8Gi"])}}}
        ]
    if per_device:
        d |= rng.choice([{"nodeName": "node-a"}, {"nodeName": "node-b"}, {"allNodes": True}])
    return d


def _slice(name: str, driver: str, pool: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "pool": {"name": pool, **spec.pop("pool")}, **spec},
    }


def _pool(rng: random.Random, index: int) -> list[dict[str, Any]]:
    driver = rng.choice([GPU, NIC])
    kind = rng.choice(["node", "node", "node", "selector", "all", "perdevice", "other-node"])
    pool = f"{kind}-{driver.split('.')[0]}-{index}"
    where: dict[str, Any] = {
        "node": {"nodeName": "node-a"},
        "other-node": {"nodeName": "node-b"},
        "selector": {"nodeSelector": {"nodeSelectorTerms": rng.choice(NODE_SELECTORS)}},
        "all": {"allNodes": True},
        "perdevice": {"perDeviceNodeSelection": True},
    }[kind]
    counters = kind == "perdevice" or rng.random() < 0.2
    n_slices = rng.choice([1, 1, 2])
    generation = rng.choice([1, 2])
    out = []
    declared = n_slices + (1 if counters else 0) + (1 if rng.random() < 0.05 else 0)
    for s in range(n_slices):
        devices = [
            _device(
                rng,
                f"{driver[0]}{index}-{s}-{i}",
                per_device=kind == "perdevice",
                counters=counters,
            )
            for i in range(rng.randint(1, 5))
        ]
        if rng.random() < 0.03 and devices:
            devices.append(dict(devices[0]))  # a duplicate name: invalid pool
        spec = {
            "pool": {"generation": generation, "resourceSliceCount": declared},
            **where,
            "devices": devices,
        }
        out.append(_slice(f"{pool}-s{s}", driver, pool, spec))
    if counters:
        total = rng.choice(["8Gi", "16Gi"])
        spec = {
            "pool": {"generation": generation, "resourceSliceCount": declared},
            **({"nodeName": "node-a"} if kind == "perdevice" else where),
            "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": total}}}],
        }
        out.append(_slice(f"{pool}-counters", driver, pool, spec))
    if rng.random() < 0.15:
        old = {"pool": {"generation": 0, "resourceSliceCount": 1}, **where}
        old["devices"] = [{"name": f"old-{index}"}] if kind != "perdevice" else []
        if kind != "perdevice":
            out.append(_slice(f"{pool}-old", driver, pool, old))
    return out


def _request_fields(rng: random.Random, features: dict[str, bool]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "deviceClassName": rng.choice(["gpu", "gpu", "nic", "nic", "any", "any", "shared"])
    }
    if rng.random() < 0.06:
        fields["allocationMode"] = "All"
    else:
        fields["allocationMode"] = "ExactCount"
        fields["count"] = rng.choice([1, 1, 1, 1, 2, 3])
    if rng.random() < 0.3:
        risky = rng.random() < 0.25  # the first and the last selector fail on some devices
        expression = rng.choice(SELECTORS if risky else SELECTORS[1:-1])
        fields["selectors"] = [{"cel": {"expression": expression}}]
    if rng.random() < 0.2:
        fields["tolerations"] = [
            {"key": "example.com/maint", "operator": "Equal", "value": "planned"}
        ]
    if rng.random() < 0.15 and features.get("DRAConsumableCapacity", True):
        fields["capacity"] = {"requests": {"memory": rng.choice(["1Gi", "3Gi", "10Gi"])}}
    return fields


def _claim(rng: random.Random, index: int, features: dict[str, bool]) -> dict[str, Any]:
    requests = []
    for r in range(rng.choice([1, 1, 2, 3])):
        if rng.random() < 0.3 and features.get("DRAPrioritizedList", True):
            subs = [
                {"name": f"s{s}", **_request_fields(rng, features)}
                for s in range(rng.randint(1, 3))
            ]
            requests.append({"name": f"r{r}", "firstAvailable": subs})
        else:
            exactly = _request_fields(rng, features)
            if rng.random() < 0.08 and features.get("DRAAdminAccess", True):
                exactly["adminAccess"] = True
            requests.append({"name": f"r{r}", "exactly": exactly})
    devices: dict[str, Any] = {"requests": requests}
    if rng.random() < 0.12:  # KEP-6080: every request derives derived/n, one constraint on it
        expression = rng.choice(DERIVED)
        for request in requests:
            for fields in request.get("firstAvailable") or [request.get("exactly")]:
                fields["derivedAttributes"] = [{"name": "derived/n", "expression": expression}]
        devices["constraints"] = [
            {rng.choice(["matchAttribute", "distinctAttribute"]): "derived/n"}
        ]
    elif rng.random() < 0.45:
        names = [r["name"] for r in requests]
        attr = rng.choice([NUMA, PCIE, f"{GPU}/model", NUMA])
        constraint: dict[str, Any] = {
            rng.choice(["matchAttribute", "matchAttribute", "distinctAttribute"]): attr
        }
        if len(names) > 1 and rng.random() < 0.5:
            constraint["requests"] = rng.sample(names, 2)
        devices["constraints"] = [constraint]
    if rng.random() < 0.2:
        devices["config"] = [
            {
                "requests": [requests[0]["name"]] if rng.random() < 0.5 else [],
                "opaque": {"driver": GPU, "parameters": {"claim": index}},
            }
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c{index}", "namespace": "default"},
        "spec": {"devices": devices},
    }


def _taint_rule(
    rng: random.Random, index: int, devices: list[tuple[str, str, str]]
) -> dict[str, Any]:
    """A DeviceTaintRule selecting by driver, pool, device, all of them, or nothing at all."""
    driver, pool, device = rng.choice(devices) if devices else (GPU, "none", "none")
    selector: dict[str, Any] | None = rng.choice(
        [{"driver": driver}, {"pool": pool}, {"device": device}, {}, None]
        + [{"driver": driver, "pool": pool, "device": device}] * 3
    )
    effect = rng.choice(["NoSchedule", "NoExecute", "None"])
    spec: dict[str, Any] = {
        "taint": {
            "key": "example.com/maint",
            "value": rng.choice(["planned", "x"]),
            "effect": effect,
        }
    }
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"rule-{index}"},
        "spec": spec,
    }


def case(seed: int) -> dict[str, Any]:
    """One random case (module docstring), in the fixture format without ``expect``."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    features = {rng.choice(GATES): False} if rng.random() < 0.2 else {}
    slices = [s for i in range(rng.randint(1, 5)) for s in _pool(rng, i)]
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        for d in s["spec"].get("devices") or []
    ]
    held = rng.sample(devices, k=min(len(devices), rng.choice([0, 0, 1, 2])))
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
        }
        for name, exprs in CLASSES.items()
    ]
    classes[0]["spec"]["config"] = [{"opaque": {"driver": GPU, "parameters": {"class": "gpu"}}}]
    rules = [_taint_rule(rng, i, devices) for i in range(rng.choice([0, 0, 0, 1, 2]))]
    return {
        "taintRules": rules,
        "features": features,
        "node": {"name": "node-a", "labels": {"zone": "z1", "slots": "4"}},
        "deviceClasses": classes,
        "resourceSlices": slices,
        "allocatedDevices": [{"driver": a, "pool": b, "device": c} for a, b, c in held[:1]],
        "allocatedCapacity": [
            {"driver": a, "pool": b, "device": c, "consumedCapacity": {"memory": "4Gi"}}
            for a, b, c in held[1:]
        ],
        "claims": [_claim(rng, i, features) for i in range(rng.randint(1, 3))],
    }


def documents(case):
    """The case as objects for ``kvdev-host allocate`` (input state as claims in use)."""
    held = [
        {"request": "held", "driver": d["driver"], "pool": d["pool"], "device": d["device"]}
        for d in case.get("allocatedDevices") or []
    ]
    for i, d in enumerate(case.get("allocatedCapacity") or []):
        result = {"request": "held", "driver": d["driver"], "pool": d["pool"]}
        result |= {"device": d["device"], "shareID": f"00000000-0000-4000-8000-{i:012d}"}
        if d.get("consumedCapacity"):
            result["consumedCapacity"] = {k: str(v) for k, v in d["consumedCapacity"].items()}
        held.append(result)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": case["node"]["name"]}}
    if case["node"].get("labels"):
        node["metadata"]["labels"] = case["node"]["labels"]
    in_use = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"in-use-{n}", "namespace": "default"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": held[start : start + 32]}}},
        }
        for n, start in enumerate(range(0, len(held), 32))
    ]
    rules = case.get("taintRules") or []
    return [
        node,
        *case["deviceClasses"],
        *case["resourceSlices"],
        *rules,
        *in_use,
        *case["claims"],
    ]


def fixture_runner() -> ModuleType:
    """test_allocator_fixtures.py as a module (its comparison helpers), loaded once per session."""
    name = "kvdev_tests_allocator_fixtures"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent / "test_allocator_fixtures.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
