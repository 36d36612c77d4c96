"""Upstream's metadata writer judges kvdev's: the same claim, the same files, byte for byte.

The oracle is ``build/upstream/bin/metadatawriter`` (tests/upstream/cmd/metadatawriter):
K/DRA ``kubeletplugin`` v0.37.2 with ``EnableDeviceMetadata`` for both API versions, driven
through its public API (``Start``, NodePrepareResources over its gRPC socket,
``Helper.UpdateRequestMetadata``). For each generated claim (names, pod claim annotation,
requests and subrequests, shares, attributes of every type with the characters Go escapes,
network data) kvdev's writer (``writer.prepare``, then ``writer.update``) and upstream's write
into the same directories in turn; every metadata file and CDI spec must be byte-identical,
with the same mode, and the CDI device IDs must go to the same devices. The one difference,
named and asserted: upstream renames a new file over each metadata file it updates (a new
inode), kvdev rewrites it in place (the same inode, which a container's bind mount keeps).

The devices upstream's writer is handed are what a driver built on kvdev hands it: per
allocation result of the driver, its request, pool, device, shareID, the slice's attributes
with kvdev's derived standard ones (the driver's choice, not the writer's) and its network
data. kvdev's own record (``.kvdev-prepared.json``) and lock files are its bookkeeping, not
part of the compared layout.

One oracle process serves every example (one JSON line per case). ``METADATA_ORACLE_EXAMPLES``
sets the number of examples (default 60).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stream_properties import attribute, c_ident, cidr, label, subdomain

from kvdev.host.k8s import ResourceClaim, ResourceSlice, load
from kvdev.host.k8s.device import NetworkDeviceData
from kvdev.host.publish import writer
from kvdev.host.publish.files import RECORD_FILE
from kvdev.host.publish.metadata import POD_CLAIM_NAME_ANNOTATION, device_attributes, find_device
from kvdev.schema.metadata import V1ALPHA1, V1BETA1
from upstreamlab import JsonLines

pytestmark = pytest.mark.upstream

EXAMPLES = int(os.environ.get("METADATA_ORACLE_EXAMPLES", "60"))
DRIVERS = ("dra.net", "gpu.nvidia.com", "sriov.example.com", "x9.example")


class Oracle(JsonLines):
    """One long-lived ``metadatawriter``: a case in, its result out."""

    def __init__(self) -> None:
        super().__init__("metadatawriter")

    def run(self, case: dict[str, object]) -> dict[str, object]:
        out = self.ask(case)
        assert not out.get("fatal"), out
        return out


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    o = Oracle()
    yield o
    o.close()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("writer-oracle")


# --------------------------------------------------------------------------- generated claims

network_data = st.fixed_dictionaries(
    {},
    optional={
        "interfaceName": st.sampled_from(["net1", "eth0", "<a&b>", "n\u2028x", "\u00e9t\x01"]),
        "ips": st.lists(cidr, max_size=3, unique=True),
        "hardwareAddress": st.sampled_from(["02:00:00:3b:02:01", "AA-BB-CC-DD-EE-FF"]),
    },
)
uid = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())


@st.composite
def claims(draw: st.DrawFn) -> dict[str, object]:
    """A claim of one driver's devices (maybe with another driver's), its slices, its data."""
    driver = draw(st.sampled_from(DRIVERS))
    bases = draw(st.lists(label, min_size=1, max_size=3, unique=True))
    results: list[dict[str, object]] = []
    devices: dict[tuple[str, str], dict[str, object]] = {}
    for base in bases:
        sub = draw(st.none() | label)
        for _ in range(draw(st.integers(1, 3))):
            pool = draw(st.sampled_from(["node-a", "pool.b/part-1"]))
            reuse = [k for k in devices if k[0] == pool]
            share = draw(st.booleans()) and bool(reuse)
            name = draw(st.sampled_from(reuse))[1] if share else f"dev-{len(devices)}"
            devices.setdefault(
                (pool, name),
                {
                    "name": name,
                    "attributes": draw(
                        st.dictionaries(
                            st.sampled_from(
                                [
                                    "pciAddress",
                                    "numa",
                                    "model",
                                    f"{driver}/pcieBusID",
                                    "resource.kubernetes.io/pcieRoot",
                                    "x.io/b",
                                ]
                            )
                            | c_ident,
                            attribute | st.just({"string": "0000:3B:00.1"}),
                            max_size=4,
                        )
                    ),
                },
            )
            result = {
                "request": f"{base}/{sub}" if sub else base,
                "driver": driver,
                "pool": pool,
                "device": name,
            }
            if share:
                result["shareID"] = draw(st.uuids()).__str__()
            results.append(result)
    if draw(st.booleans()):  # another driver's device: not this writer's
        results.insert(
            draw(st.integers(0, len(results))),
            {"request": bases[0], "driver": "other.example", "pool": "node-a", "device": "o-0"},
        )
    meta: dict[str, object] = {"name": draw(subdomain), "namespace": draw(label), "uid": draw(uid)}
    if draw(st.booleans()):
        meta["annotations"] = {POD_CLAIM_NAME_ANNOTATION: draw(label)}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {},
        "status": {"allocation": {"devices": {"results": results}}},
    }
    pools: dict[str, list[dict[str, object]]] = {}
    for (pool, _), dev in devices.items():
        pools.setdefault(pool, []).append(dev)
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"slice-{i}"},
            "spec": {
                "driver": driver,
                "nodeName": "node-a",
                "devices": devs,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            },
        }
        for i, (pool, devs) in enumerate(pools.items())
    ]
    keys = sorted(devices)
    nets = [
        {k: draw(network_data) for k in draw(st.lists(st.sampled_from(keys), unique=True))}
        for _ in range(draw(st.integers(1, 2)))
    ]
    return {"driver": driver, "claim": claim, "slices": slices, "networks": nets}


# --------------------------------------------------------------------------- the two writers


def _tree(top: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``top`` but kvdev's bookkeeping: relative path -> (mode, bytes)."""
    out = {}
    for path in sorted(top.rglob("*")):
        if path.is_file() and path.name != RECORD_FILE and not path.name.endswith(".lock"):
            out[str(path.relative_to(top))] = (path.stat().st_mode & 0o7777, path.read_bytes())
    return out


_NOT_YAML_TEXT = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def _json_text(value: object) -> str:
    """JSON that kvdev-host's YAML loader reads back as the same value.

    Raw UTF-8 (no surrogate-pair escapes, which the loader refuses), with escapes for what YAML
    takes as a line break or does not accept raw.
    """
    text = json.dumps(value, ensure_ascii=False)
    return _NOT_YAML_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _inodes(plugin_data_dir: Path) -> dict[str, int]:
    """Each metadata file under the plugin data dir (relative path) -> its inode."""
    return {
        str(p.relative_to(plugin_data_dir)): p.stat().st_ino
        for p in plugin_data_dir.rglob("metadata.json")
    }


def _reset(top: Path) -> None:
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir()


def _upstream_devices(
    claim: ResourceClaim, slices: list[ResourceSlice], driver: str, net: dict
) -> list[dict[str, object]]:
    """What a driver built on kvdev hands upstream's writer: one device per allocation result."""
    out = []
    assert claim.status is not None
    assert claim.status.allocation is not None
    for r in claim.status.allocation.devices.results or []:  # type: ignore[union-attr]
        if r.driver != driver:
            continue
        found = find_device(slices, driver, r.pool, r.device)
        assert found is not None
        attrs = {k: v.to_json_dict() for k, v in device_attributes(found, driver).items()}
        metadata: dict[str, object] = {"attributes": attrs}
        if (r.pool, r.device) in net:
            metadata["networkData"] = net[(r.pool, r.device)]
        device = {"requests": [r.request], "pool": r.pool, "device": r.device, "metadata": metadata}
        if r.share_id is not None:
            device["shareID"] = r.share_id
        out.append(device)
    return out


def _kvdev_network(driver: str, net: dict) -> dict[tuple[str, str, str], NetworkDeviceData]:
    return {
        (driver, pool, dev): NetworkDeviceData.model_validate(data, strict=True)
        for (pool, dev), data in net.items()
    }


def _upstream(oracle, top, base, steps):
    """Upstream's files after prepare (``steps[0]``) and then each update step, in turn.

    Each snapshot is one oracle case from empty directories: NodePrepareResources with the
    first step's devices, then UpdateRequestMetadata for every request with each later step's.
    """
    trees, results = [], []
    for n in range(1, len(steps) + 1):
        _reset(top)
        updates = [
            {"request": req, "devices": [d for d in devices if d["requests"] == [req]]}
            for devices in steps[1:n]
            for req in sorted({d["requests"][0] for d in devices})
        ]
        out = oracle.run(base | {"devices": steps[0], "updates": updates})
        assert out["error"] == "", out
        assert not any(out["updateErrors"]), out
        trees.append(_tree(top))
        results.append(out)
    return trees, results


def _ids(devices):
    """(pool, device, shareID) -> the metadata CDI device IDs it carries, in order."""
    return {
        (d["poolName"], d["deviceName"], d.get("shareID")): [
            i for i in d["cdiDeviceIDs"] if "/metadata=" in i
        ]
        for d in devices
    }


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(claims())
def test_kvdev_writes_the_bytes_upstreams_writer_writes(oracle, root, case):
    driver = case["driver"]
    (claim,) = load(_json_text(case["claim"]), "claim")
    slices = list(
        load(_json_text({"apiVersion": "v1", "kind": "List", "items": case["slices"]}), "slices")
    )
    nets = case["networks"]
    top = root / "files"
    layout = writer.Layout(driver, top / "plugins" / driver, top / "cdi")

    _reset(top)
    ours, prepared, inodes = [], None, []
    for n, net in enumerate([nets[0], *nets]):  # prepare, then an update per network data
        step = writer.prepare if n == 0 else writer.update
        done = step(claim, slices, layout, network_data=_kvdev_network(driver, net))
        prepared = prepared or done
        ours.append(_tree(top))
        inodes.append(_inodes(layout.plugin_data_dir))

    base = {
        "driver": driver,
        "pluginDataDir": str(layout.plugin_data_dir),
        "cdiDir": str(layout.cdi_dir),
        "versions": [V1BETA1, V1ALPHA1],
        "claim": case["claim"],
    }
    steps = [_upstream_devices(claim, slices, driver, net) for net in [nets[0], *nets]]
    theirs, results = _upstream(oracle, top, base, steps)
    for n, (mine, upstream) in enumerate(zip(ours, theirs, strict=True)):
        what = "prepare" if n == 0 else f"update {n}"
        assert sorted(mine) == sorted(upstream), what
        for path in mine:
            assert mine[path][0] == upstream[path][0], f"{what}: {path}: mode"
            diff = difflib.unified_diff(
                upstream[path][1].decode().splitlines(),
                mine[path][1].decode().splitlines(),
                "upstream",
                "kvdev",
                lineterm="",
            )
            assert mine[path] == upstream[path], f"{what}: {path}:\n" + "\n".join(diff)
    # The one named difference: upstream (writeFileAtomically) renames a new file over each
    # metadata file it updates; kvdev rewrites it in place, so a bind mount sees the update.
    # (after one update: a later one may get a freed inode number back)
    assert inodes[-1] == inodes[0]
    moved = results[1]["inodes"]
    assert sorted(moved) == sorted(inodes[0])
    assert all(before != after for before, after in moved.values())
    ours_ids = {(d.pool, d.device, d.share_id): list(d.cdi_device_ids) for d in prepared.devices}
    assert {k: v for k, v in ours_ids.items() if v} == {
        k: v for k, v in _ids(results[0]["devices"]).items() if v
    }
