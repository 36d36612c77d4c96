"""`kvdev-host serve` driven by kubelet's own DRA client (v1.37.2), not by ours.

``tests.upstreamlab.KubeletDRA`` runs kubelet's plugin manager (plugin watcher, reconciler,
registration handshake) and DRA manager (PrepareResources / UnprepareResources for a pod,
GetResources for a container) from k8s.io/kubernetes v1.37.2 against a real ``serve``
process: registration over both gRPC services kubelet negotiates, many claims in one
NodePrepareResources call, restarts, and the CDI device IDs each container gets, computed by
kubelet's code and checked against the claims, the CDI specs and the metadata files serve
wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hostlab import DRIVER, allocated_claim, start_serve, uid_of, vf_slice
from kvdev.host.plugin.server import SOCKET_PATH_MAX, Sockets
from upstreamlab import KubeletDRA

POD_UID = "5d0f3a9e-6b1c-4e2a-9c47-0a1b2c3d4e5f"
V1, V1BETA1 = "v1.DRAPlugin", "v1beta1.DRAPlugin"
# the API versions of a metadata file serve writes, newest first
VERSIONS = ["metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"]


@dataclass
class Node:
    """One node's directories: serve's claims, plugin data, CDI specs; kubelet's registry."""

    root: Path

    @property
    def claims(self) -> Path:
        return self.root / "claims"

    @property
    def registry(self) -> Path:
        return self.root / "registry"

    @property
    def dra_socket(self) -> Path:
        return self.root / "plugin" / "dra.sock"

    def kubelet(self, offer: tuple[str, ...] = ()) -> KubeletDRA:
        return KubeletDRA(self.registry, self.root / "kubelet", offer)

    def publish(self, objects: list[dict]) -> None:
        """What the API server holds, as serve's --claims-dir sees it."""
        (self.claims / "objects.yaml").write_text(yaml.safe_dump_all(objects))

    def serve(self, *extra: str) -> subprocess.Popen[str]:
        args = [sys.executable, "-m", "kvdev.host", "serve", "--driver", DRIVER]
        args += ["--claims-dir", str(self.claims), "--plugin-data-dir", str(self.root / "plugin")]
        args += ["--cdi-dir", str(self.root / "cdi"), "--registry-dir", str(self.registry)]
        return start_serve([*args, *extra])

    def checkpoint(self) -> list[dict]:
        """Kubelet's claim info checkpoint: what it recorded of serve's answers."""
        blob = json.loads((self.root / "kubelet" / "dra_manager_state").read_text())
        return json.loads(blob["Data"])["ClaimInfoStateList"] or []


_read: dict[int, list[str]] = {}  # serve's stderr lines read before it stopped, by pid


def notified(proc: subprocess.Popen[str]) -> None:
    """Read serve's log until it has answered kubelet's NotifyRegistrationStatus (or it exits).

    kubelet registers a plugin with its handler first and notifies it after: a plugin killed
    in between is deregistered again. A test that stops serve waits for this first.
    """
    assert proc.stderr is not None
    seen = _read.setdefault(proc.pid, [])
    line = b""
    # Byte by byte from the pipe itself, so that nothing sits in a Python buffer that
    # communicate() (which reads the file descriptor) would not see; bounded by serve's
    # output: EOF when it exits.
    while byte := os.read(proc.stderr.fileno(), 1):
        line += byte
        if byte == b"\n":
            seen.append(line.decode())
            if b"kubelet registered DRA plugin" in line:
                return
            line = b""
    pytest.fail(f"serve exited before kubelet registered it: {''.join(seen)}")


def stop(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM) -> str:
    """Signal serve and wait for it (a generous failure guard); its stderr."""
    if proc.stderr is None or proc.stderr.closed:
        return ""  # stopped and read already
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return "".join(_read.pop(proc.pid, [])) + err


@pytest.fixture
def node() -> Iterator[Node]:
    path = Path(tempfile.mkdtemp(prefix="kvdev-kubelet-", dir="/tmp"))
    (path / "claims").mkdir()
    yield Node(path)
    shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------ claims and pods as kubelet sees them


def reserved(claim: dict, pod_uid: str = POD_UID, pod: str = "virt-launcher-vm1") -> dict:
    """The claim reserved for the pod (kubelet refuses to prepare it otherwise)."""
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": pod_uid}]
    return claim


def pod(claims: dict[str, str], containers: dict[str, list[tuple[str, str]]], **kw) -> dict:
    """A pod naming ``claims`` (pod claim name -> ResourceClaim name); each container's
    ``resources.claims`` as (pod claim name, request) pairs; ``kw``: uid, name, templates
    (pod claim name -> generated claim name, from a ResourceClaimTemplate)."""
    templates: dict[str, str] = kw.get("templates", {})
    spec_claims = [{"name": n, "resourceClaimName": c} for n, c in claims.items()]
    spec_claims += [{"name": n, "resourceClaimTemplateName": n} for n in templates]
    return {
        "metadata": {
            "name": kw.get("name", "virt-launcher-vm1"),
            "namespace": "vms",
            "uid": kw.get("uid", POD_UID),
        },
        "spec": {
            "resourceClaims": spec_claims,
            "containers": [
                {
                    "name": name,
                    "resources": {
                        "claims": [{"name": n, **({"request": r} if r else {})} for n, r in entries]
                    },
                }
                for name, entries in containers.items()
            ],
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": n, "resourceClaimName": c} for n, c in templates.items()
            ]
        },
    }


def many(count: int, pod_uid: str = POD_UID, first: int = 0) -> list[dict]:
    """``count`` claims of one VF each, reserved for the pod."""
    return [reserved(allocated_claim(i), pod_uid) for i in range(first, first + count)]


def cdi_id(uid: str, request: str = "nic") -> str:
    return f"{DRIVER}/metadata={uid}_{request}"


def cdi_devices(node: Node) -> dict[str, dict]:
    """Every CDI device serve's specs define, by its fully qualified name."""
    devices = {}
    for path in sorted((node.root / "cdi").glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec["devices"]:
            devices[f"{spec['kind']}={device['name']}"] = device
    return devices


def metadata_of(device: dict) -> list[dict]:
    """The metadata file a CDI device mounts into the container: its stream of documents."""
    (mount,) = device["containerEdits"]["mounts"]
    text, documents, at = Path(mount["hostPath"]).read_text(), [], 0
    decoder = json.JSONDecoder()
    while text[at:].strip():
        document, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        documents.append(document)
    return documents


# ------------------------------------------------------------ registration and many claims


@pytest.mark.parametrize(("offer", "chosen"), [((), V1), ((V1BETA1,), V1BETA1)])
def test_kubelet_registers_serve_and_prepares_many_claims_in_one_call(node, offer, chosen):
    count = 24
    claims = many(count)
    node.publish([vf_slice(count), *claims])
    names = {f"c{i}": c["metadata"]["name"] for i, c in enumerate(claims)}
    the_pod = pod(
        names,
        {
            "compute": [(n, "nic") for n in names],  # virt-launcher's compute container
            "sidecar": [("c0", "")],  # a container naming the claim, no request
            "other": [],
        },
    )
    with node.kubelet(offer) as kubelet:
        kubelet.call("claims", objects=claims)
        started = time.monotonic()
        proc = node.serve()
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            registered = time.monotonic() - started
            began = time.monotonic()
            got = kubelet.call("prepare", pod=the_pod)["containers"]
            prepared = time.monotonic() - began
            assert node.checkpoint()[0]["PodUIDs"] == {POD_UID: {}}
            kubelet.call("unprepare", pod=the_pod)
            left = node.checkpoint()
            spec_files = list((node.root / "cdi").glob("*.json"))
        finally:
            err = stop(proc)
        events = kubelet.events()
    (choice,) = [e for e in events if e["kind"] == "chosen"]
    assert (choice["endpoint"], choice["chosenService"]) == (str(node.dra_socket), chosen)
    (register,) = [e for e in events if e["kind"] == "register"]
    assert register["services"] == [V1, V1BETA1]  # what serve advertised, newest first
    assert "kubelet registered DRA plugin sriov.example.com" in err
    uids = [c["metadata"]["uid"] for c in claims]
    assert sorted(got["compute"]) == sorted(cdi_id(u) for u in uids)
    assert got["sidecar"] == [cdi_id(uids[0])]
    assert got["other"] == []
    assert left == []  # unprepared by kubelet: nothing left behind
    assert spec_files == []
    print(f"kubelet: registered {registered:.2f}s after serve's exec; {count} claims prepared")
    print(f"  in one call, {prepared:.2f}s for PrepareResources")


def test_a_plugin_kubelet_refuses_hears_why(node):
    """No service kubelet knows on offer: kubelet's validation refuses it and tells serve."""
    with node.kubelet(offer=("v1alpha4.DRAPlugin",)) as kubelet:
        proc = node.serve()
        try:
            # kubelet retries with back-off; its second try starts after the first one has
            # told serve
            kubelet.call("wait", driver=DRIVER, kind="validate-failed", count=2)
            events = kubelet.events()
        finally:
            err = stop(proc)
    refused = [e for e in events if e["kind"] == "validate-failed"]
    assert f"invalid supported gRPC versions of DRA driver plugin {DRIVER}" in refused[0]["error"]
    assert not [e for e in events if e["kind"] == "register"]
    assert "kubelet rejected DRA plugin sriov.example.com: RegisterPlugin error" in err, err
    assert "plugin validation failed" in err


def test_kubelet_prepares_many_pods_at_once_each_its_own_claims(node):
    pods, per_pod = 16, 4
    claims_of = {
        uid_of(p, base=0xAD): many(per_pod, pod_uid=uid_of(p, base=0xAD), first=p * per_pod)
        for p in range(pods)
    }
    every = [c for claims in claims_of.values() for c in claims]
    node.publish([vf_slice(pods * per_pod), *every])
    the_pods = [
        pod(
            {f"c{i}": c["metadata"]["name"] for i, c in enumerate(claims)},
            {"compute": [(f"c{i}", "nic") for i in range(per_pod)]},
            uid=pod_uid,
            name=f"virt-launcher-vm{p}",
        )
        for p, (pod_uid, claims) in enumerate(claims_of.items())
    ]
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=every)
        proc = node.serve()
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            began = time.monotonic()
            answers = kubelet.call("prepare", pods=the_pods)["pods"]
            took = time.monotonic() - began
            for the_pod in the_pods:
                kubelet.call("unprepare", pod=the_pod)
        finally:
            stop(proc)
    for answer, claims in zip(answers, claims_of.values(), strict=True):
        assert answer["ok"], answer["error"]
        want = sorted(cdi_id(c["metadata"]["uid"]) for c in claims)
        assert sorted(answer["containers"]["compute"]) == want
    assert node.checkpoint() == []
    assert list((node.root / "cdi").glob("*.json")) == []
    print(f"kubelet: {pods} pods x {per_pod} claims prepared concurrently in {took:.2f}s")


def test_each_cdi_id_kubelet_gives_a_container_names_the_metadata_of_its_claim(node):
    count = 6
    claims = many(count)
    node.publish([vf_slice(count), *claims])
    names = {f"c{i}": c["metadata"]["name"] for i, c in enumerate(claims)}
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=claims)
        proc = node.serve()
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            got = kubelet.call("prepare", pod=pod(names, {"compute": [(n, "nic") for n in names]}))
            devices = cdi_devices(node)
        finally:
            stop(proc)
    by_uid = {c["metadata"]["uid"]: c for c in claims}
    assert len(got["containers"]["compute"]) == count
    for cdi in got["containers"]["compute"]:
        uid = cdi.rsplit("=", 1)[1].removesuffix("_nic")
        claim = by_uid[uid]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        documents = metadata_of(devices[cdi])  # serve's spec defines the device kubelet names
        assert [d["apiVersion"] for d in documents] == VERSIONS
        for document in documents:  # every API version of it says the same
            identity = {k: document["metadata"].get(k) for k in ("name", "namespace", "uid")}
            assert identity == {"name": claim["metadata"]["name"], "namespace": "vms", "uid": uid}
            (request,) = document["requests"]
            assert request["name"] == result["request"]
            assert [d["name"] for d in request["devices"]] == [result["device"]]


# ------------------------------------------------------------ restarts


def test_serve_stops_cleanly_on_sigterm_and_kubelet_deregisters_it(node):
    claims = many(1)
    node.publish([vf_slice(1), *claims])
    the_pod = pod({"c0": claims[0]["metadata"]["name"]}, {"compute": [("c0", "nic")]})
    reg_socket = node.registry / f"{DRIVER}-reg.sock"
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=claims)
        started = time.monotonic()
        proc = node.serve()
        startup = time.monotonic() - started
        try:
            assert reg_socket.is_socket()
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            kubelet.call("prepare", pod=the_pod)
            notified(proc)
            err = stop(proc)
            kubelet.call("wait", driver=DRIVER, plugins=[])
        finally:
            if proc.poll() is None:
                stop(proc, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert not node.dra_socket.exists()
    assert not reg_socket.exists()
    assert "kubelet registered DRA plugin sriov.example.com" in err
    assert "SIGTERM: stopping" in err
    # Stopping is not unpreparing: the files stay until kubelet asks.
    assert list((node.root / "cdi").iterdir())
    print(f"serve: sockets up {startup:.2f}s after exec")


def test_kubelet_reregisters_a_restarted_plugin_and_prepares_again(node):
    first, second = many(4), many(4, pod_uid=uid_of(2, base=0xB0D), first=4)
    node.publish([vf_slice(8), *first, *second])
    pod_a = pod({f"c{i}": c["metadata"]["name"] for i, c in enumerate(first)}, {"compute": []})
    for entry in pod_a["spec"]["resourceClaims"]:
        pod_a["spec"]["containers"][0]["resources"]["claims"].append({"name": entry["name"]})
    pod_b = pod(
        {f"c{i}": c["metadata"]["name"] for i, c in enumerate(second)},
        {"compute": [(f"c{i}", "nic") for i in range(4)]},
        uid=uid_of(2, base=0xB0D),
        name="virt-launcher-vm2",
    )
    endpoint = [str(node.dra_socket)]
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=[*first, *second])
        proc = node.serve()
        try:
            kubelet.call("wait", driver=DRIVER, plugins=endpoint)
            kubelet.call("prepare", pod=pod_a)
            # SIGKILL: serve leaves its sockets behind; kubelet keeps the registration
            # and its calls fail until a plugin answers again.
            notified(proc)
            stop(proc, signal.SIGKILL)
            assert node.dra_socket.is_socket()
            down = kubelet.call("prepare", pod=pod_b, check=False)
            assert not down["ok"]
            assert "NodePrepareResources" in down["error"], down["error"]
            seq = down["seq"]
            proc = node.serve()  # replaces the stale sockets
            kubelet.call("wait", driver=DRIVER, plugins=endpoint, after=seq)
            got = kubelet.call("prepare", pod=pod_b)["containers"]
            kubelet.call("unprepare", pod=pod_a)  # prepared by the process that was killed
            # SIGTERM: serve removes its registration socket; kubelet deregisters it.
            notified(proc)
            stop(proc)
            kubelet.call("wait", driver=DRIVER, plugins=[])
            gone = kubelet.call("unprepare", pod=pod_b, check=False)
            assert not gone["ok"]
            assert f"DRA driver {DRIVER} is not registered" in gone["error"]
            seq = gone["seq"]
            proc = node.serve()
            kubelet.call("wait", driver=DRIVER, plugins=endpoint, after=seq)
            kubelet.call("unprepare", pod=pod_b)
        finally:
            stop(proc)
        events = kubelet.events()
    assert sorted(got["compute"]) == sorted(cdi_id(c["metadata"]["uid"]) for c in second)
    assert node.checkpoint() == []
    assert list((node.root / "cdi").glob("*.json")) == []
    kinds = [e["kind"] for e in events if e["kind"] in ("register", "deregister")]
    assert kinds == ["register", "deregister", "register", "deregister", "register"], events
    assert not [e for e in events if e["kind"].endswith("failed")], events


def test_a_restarted_kubelet_finds_the_running_plugin_and_unprepares_from_its_checkpoint(node):
    claims = many(3)
    node.publish([vf_slice(3), *claims])
    names = {f"c{i}": c["metadata"]["name"] for i, c in enumerate(claims)}
    the_pod = pod(names, {"compute": [(n, "nic") for n in names]})
    proc = node.serve()
    try:
        with node.kubelet() as kubelet:
            kubelet.call("claims", objects=claims)
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            kubelet.call("prepare", pod=the_pod)
            notified(proc)
        assert len(node.checkpoint()) == 3
        with node.kubelet() as kubelet:  # the same state dir: kubelet restarted
            # its watcher finds the registration socket already there and registers again
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            notified(proc)
            kubelet.call("unprepare", pod=the_pod)  # knows the claims from its checkpoint
        specs = list((node.root / "cdi").glob("*.json"))
    finally:
        err = stop(proc)
    assert specs == []
    assert node.checkpoint() == []
    assert err.count("kubelet registered DRA plugin sriov.example.com") == 2


# ------------------------------------------------------------ kubelet's matching of the answer

SHARE = "7c1f4a52-9e0b-4f36-8d1a-2b6e5c9a0d44"
PLAIN, TEMPLATE, FIRST, SHARED = (
    f"0b7cf1e0-7a57-4d0b-9a37-3f6a4c9d00{i:02d}" for i in (11, 12, 13, 14)
)
GENERATED = "virt-launcher-vm1-fast-nic-q7w2x"


def claim(name: str, uid: str, requests: list[dict], results: list[dict], **meta) -> dict:
    return reserved(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "vms", "uid": uid, **meta},
            "spec": {"devices": {"requests": requests}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"driver": DRIVER, "pool": "node-a", **r} for r in results]
                    }
                }
            },
        }
    )


def matching_claims() -> list[dict]:
    exact = {"name": "nic", "exactly": {"deviceClassName": "vf", "count": 2}}
    first = {"name": "nic", "firstAvailable": [{"name": "rdma", "deviceClassName": "vf"}]}
    one = {"name": "nic", "exactly": {"deviceClassName": "vf"}}
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "virt-launcher-vm1", "uid": POD_UID}
    return [
        claim(  # a claim the pod names: two devices for one request
            "vm1-nics",
            PLAIN,
            [exact],
            [{"request": "nic", "device": "vf-1"}, {"request": "nic", "device": "vf-2"}],
        ),
        claim(  # made from a template: kubelet knows it by the pod's claim name
            GENERATED,
            TEMPLATE,
            [one],
            [{"request": "nic", "device": "vf-3"}],
            annotations={"resource.kubernetes.io/pod-claim-name": "fast-nic"},
            ownerReferences=[{**owner, "controller": True, "blockOwnerDeletion": True}],
        ),
        claim("vm1-rdma", FIRST, [first], [{"request": "nic/rdma", "device": "vf-4"}]),
        claim(  # a share of a device with consumable capacity
            "vm1-share", SHARED, [one], [{"request": "nic", "device": "vf-5", "shareID": SHARE}]
        ),
    ]


@pytest.mark.parametrize(("offer", "share"), [((), SHARE), ((V1BETA1,), None)])
def test_kubelet_gives_each_container_the_metadata_of_its_request_once(node, offer, share):
    claims = matching_claims()
    node.publish([vf_slice(7), *claims])
    named = {"nics": "vm1-nics", "rdma": "vm1-rdma", "share": "vm1-share"}
    pod_claims = [*named, "fast-nic"]
    the_pod = pod(
        named,
        {
            "compute": [(n, "nic") for n in pod_claims],  # the base request name ...
            "any": [(n, "") for n in pod_claims],  # ... or no request at all
        },
        templates={"fast-nic": GENERATED},
    )
    with node.kubelet(offer) as kubelet:
        kubelet.call("claims", objects=claims)
        proc = node.serve()
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            got = kubelet.call("prepare", pod=the_pod)["containers"]
            recorded = {c["ClaimUID"]: c for c in node.checkpoint()}
        finally:
            stop(proc)
    want = sorted(cdi_id(uid) for uid in (PLAIN, TEMPLATE, FIRST, SHARED))
    assert sorted(got["compute"]) == want  # each claim's file once, never per device
    assert sorted(got["any"]) == want
    plain = recorded[PLAIN]["DriverState"][DRIVER]["Devices"]
    assert [d["CDIDeviceIDs"] for d in plain] == [[cdi_id(PLAIN)], None]
    (rdma,) = recorded[FIRST]["DriverState"][DRIVER]["Devices"]
    assert rdma["RequestNames"] == ["nic"]  # the base name, not "nic/rdma"
    (shared,) = recorded[SHARED]["DriverState"][DRIVER]["Devices"]
    assert shared.get("ShareID") == share  # v1 carries the share; v1beta1 has no field
    assert plain[0].get("ShareID") is None  # a whole device has no share


# ------------------------------------------------------------ errors and several drivers


def test_a_claim_serve_cannot_prepare_fails_the_pod_naming_it_and_a_retry_succeeds(node):
    claims = many(3)
    stale = json.loads(json.dumps(claims[1]))
    stale["metadata"]["uid"] = uid_of(99)  # what serve's source still holds: the old claim
    node.publish([vf_slice(3), claims[0], stale, claims[2]])
    names = {f"c{i}": c["metadata"]["name"] for i, c in enumerate(claims)}
    the_pod = pod(names, {"compute": [(n, "nic") for n in names]})
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=claims)
        proc = node.serve()
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            failed = kubelet.call("prepare", pod=the_pod, check=False)
            node.publish([vf_slice(3), *claims])  # the source catches up
            got = kubelet.call("prepare", pod=the_pod)["containers"]
            kubelet.call("unprepare", pod=the_pod)
        finally:
            stop(proc)
    assert not failed["ok"]
    error = failed["error"]
    assert "NodePrepareResources failed for ResourceClaim claim-1" in error, error
    assert f"has uid {uid_of(99)}, not the one kubelet asked for" in error, error
    assert sorted(got["compute"]) == sorted(cdi_id(c["metadata"]["uid"]) for c in claims)
    assert list((node.root / "cdi").glob("*.json")) == []
    assert node.checkpoint() == []


GPU = "gpu.nvidia.com"


def test_a_claim_of_two_drivers_is_prepared_by_both_plugins_and_the_container_gets_both(node):
    gpus = vf_slice(1)
    gpus["metadata"]["name"] = "node-a-gpus"
    gpus["spec"]["driver"] = GPU
    both = reserved(allocated_claim(0))
    both["spec"]["devices"]["requests"].append(
        {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    )
    both["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": GPU, "pool": "node-a", "device": "vf-0"}
    )
    node.publish([vf_slice(1), gpus, both])
    uid = both["metadata"]["uid"]
    the_pod = pod(
        {"dev": both["metadata"]["name"]}, {"nic": [("dev", "nic")], "all": [("dev", "")]}
    )
    gpu_plugin = node.root / "plugin-gpu"
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=[both])
        procs = [node.serve()]
        try:
            procs.append(node.serve("--driver", GPU, "--plugin-data-dir", str(gpu_plugin)))
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.dra_socket)])
            kubelet.call("wait", driver=GPU, plugins=[str(gpu_plugin / "dra.sock")])
            got = kubelet.call("prepare", pod=the_pod)["containers"]
            kubelet.call("unprepare", pod=the_pod)
        finally:
            for proc in procs:
                stop(proc)
    assert got["nic"] == [cdi_id(uid)]
    assert sorted(got["all"]) == sorted([cdi_id(uid), f"{GPU}/metadata={uid}_gpu"])
    assert list((node.root / "cdi").glob("*.json")) == []


# ------------------------------------------------------------ rolling update (--pod-uid)

OLD_POD, NEW_POD = uid_of(1, base=0x01D), uid_of(2, base=0x9E)


def test_a_rolling_update_overlaps_two_plugins_and_kubelet_always_has_one(node):
    first, second = many(3), many(3, pod_uid=uid_of(2, base=0xB0D), first=3)
    node.publish([vf_slice(6), *first, *second])
    pod_a = pod({f"c{i}": c["metadata"]["name"] for i, c in enumerate(first)}, {"compute": []})
    pod_b = pod(
        {f"c{i}": c["metadata"]["name"] for i, c in enumerate(second)},
        {"compute": [(f"c{i}", "nic") for i in range(3)]},
        uid=uid_of(2, base=0xB0D),
        name="virt-launcher-vm2",
    )
    old_dra, new_dra = (str(node.root / "plugin" / f"dra-{u}.sock") for u in (OLD_POD, NEW_POD))
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=[*first, *second])
        old = node.serve("--pod-uid", OLD_POD)
        new = None
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[old_dra])
            kubelet.call("prepare", pod=pod_a)
            # maxSurge 1: the new pod starts while the old one still serves
            new = node.serve("--pod-uid", NEW_POD)
            kubelet.call("wait", driver=DRIVER, plugins=[old_dra, new_dra])
            # kubelet prefers the newest plugin once its connection is up
            connected = {"endpoint": new_dra, "connected": True, "count": 1}
            kubelet.call("wait", driver=DRIVER, kind="connection", **connected)
            got = kubelet.call("prepare", pod=pod_b)["containers"]
            notified(old)
            old_err = stop(old)  # then the old pod stops
            kubelet.call("wait", driver=DRIVER, plugins=[new_dra])
            kubelet.call("unprepare", pod=pod_a)  # prepared by the old plugin, gone now
            kubelet.call("unprepare", pod=pod_b)
        finally:
            stop(old)
            new_err = stop(new) if new is not None else ""
        events = kubelet.events()
    registry = sorted(p.name for p in node.registry.iterdir())
    assert sorted(got["compute"]) == sorted(cdi_id(c["metadata"]["uid"]) for c in second)
    counts = [e["plugins"] for e in events if e["kind"] in ("register", "deregister")]
    assert counts == [1, 2, 1, 0][: len(counts)]
    assert counts[:3] == [1, 2, 1]  # never none from the first registration on
    wipes = [e["fieldSelector"] for e in events if e["kind"] == "wipe"]
    assert wipes == ["spec.nodeName=node-a"]  # only kubelet's own at its start
    # kubelet prefers the newest plugin: pod B went to the new one, and so did A's unprepare
    for uid in (c["metadata"]["uid"] for c in second):
        assert uid in new_err
        assert uid not in old_err
    assert all(c["metadata"]["uid"] in old_err for c in first)
    assert registry == []  # each pod removed its own sockets
    assert list((node.root / "cdi").glob("*.json")) == []


def test_a_killed_plugin_pods_sockets_stay_and_kubelet_uses_the_live_one(node):
    """SIGKILL leaves the old pod's sockets (nobody may remove another pod's): kubelet keeps
    that registration, disconnected, and sends calls to the plugin that answers."""
    claims = many(2)
    node.publish([vf_slice(2), *claims])
    the_pod = pod(
        {"c0": claims[0]["metadata"]["name"], "c1": claims[1]["metadata"]["name"]},
        {"compute": [("c0", "nic"), ("c1", "nic")]},
    )
    old_dra, new_dra = (str(node.root / "plugin" / f"dra-{u}.sock") for u in (OLD_POD, NEW_POD))
    with node.kubelet() as kubelet:
        kubelet.call("claims", objects=claims)
        old = node.serve("--pod-uid", OLD_POD)
        new = None
        try:
            kubelet.call("wait", driver=DRIVER, plugins=[old_dra])
            notified(old)
            stop(old, signal.SIGKILL)
            disconnected = {"endpoint": old_dra, "connected": False, "count": 1}
            kubelet.call("wait", driver=DRIVER, kind="connection", **disconnected)
            new = node.serve("--pod-uid", NEW_POD)
            kubelet.call("wait", driver=DRIVER, plugins=[old_dra, new_dra])
            got = kubelet.call("prepare", pod=the_pod)["containers"]
            kubelet.call("unprepare", pod=the_pod)
        finally:
            new_err = stop(new) if new is not None else ""
    assert sorted(got["compute"]) == sorted(cdi_id(c["metadata"]["uid"]) for c in claims)
    assert all(c["metadata"]["uid"] in new_err for c in claims)
    assert Path(old_dra).is_socket()  # the killed pod's, left as upstream's helper leaves it


FULL = f"{DRIVER}-{NEW_POD}-reg.sock"


def names_at(node: Node, kubelet: KubeletDRA, over: int) -> tuple[str, str]:
    """kvdev's and upstream's registration socket names where the full name's path is
    ``over`` bytes longer than 107 (gRPC's limit)."""
    depth = SOCKET_PATH_MAX + over - len(str(node.root)) - 2 - len(FULL)
    registry = node.root / ("r" * depth)
    assert len(str(registry / FULL)) == SOCKET_PATH_MAX + over
    sockets = Sockets.default(DRIVER, node.root / "plugin", registry, pod_uid=NEW_POD)
    assert sockets.dra.name == f"dra-{NEW_POD}.sock"
    upstream = kubelet.call("names", registryDir=str(registry), driver=DRIVER, podUID=NEW_POD)
    return sockets.registration.name, upstream["registration"]


def test_rolling_update_socket_names_are_upstreams(node):
    """Upstream's kubeletplugin helper names the registration socket: the full pod UID, then
    ``<driver>-<hash of the UID>``, then ``dra-<hash of both>``, the first whose path fits."""
    with node.kubelet() as kubelet:
        fits, at_limit, hashed, shortest = (names_at(node, kubelet, n) for n in (-10, 0, 10, 27))
    for kvdev, upstream in (fits, at_limit, hashed, shortest):
        assert kvdev == upstream
    assert fits[0] == at_limit[0] == FULL
    assert hashed[0].startswith(f"{DRIVER}-")
    assert len(hashed[0]) < len(FULL)
    assert shortest[0].startswith("dra-")


def test_a_socket_path_of_108_bytes_is_where_kvdev_names_differ_from_upstream(node):
    """The one difference: upstream's helper (Go) binds 108 bytes, gRPC's C core 107 at most.

    So where the full name's path is exactly 108 bytes, upstream keeps it and kvdev takes
    upstream's next name (kubelet registers whatever name the registry dir holds).
    """
    with node.kubelet() as kubelet:
        kvdev, upstream = names_at(node, kubelet, 1)
        _, next_name = names_at(node, kubelet, 10)
    assert upstream == FULL
    assert kvdev == next_name
