"""`kvdev-host serve` as a process: register, prepare over gRPC, SIGTERM, clean exit.

Runs ``python -m kvdev.host serve`` with a claims directory, talks to it with a real gRPC
client over its Unix sockets, then stops it with SIGTERM.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import pytest
import yaml

from kvdev.host.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)

DRIVER = "sriov.example.com"
UID = "0b7cf1e0-7a57-4d0b-9a37-3f6a4c9d0001"


def objects() -> list[dict]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-vfs"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-a",
                "devices": [
                    {
                        "name": "vf-1",
                        "attributes": {
                            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:02.1"}
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "vm1-nic", "namespace": "vms", "uid": UID},
            "spec": {
                "devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "vf"}}]}
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "nic", "driver": DRIVER, "pool": "node-a", "device": "vf-1"}
                        ]
                    }
                }
            },
        },
    ]


@pytest.fixture
def root():
    path = Path(tempfile.mkdtemp(prefix="kvdev-serve-", dir="/tmp"))
    (path / "claims").mkdir()
    (path / "claims" / "objects.yaml").write_text(yaml.safe_dump_all(objects()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def serve_args(root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kvdev.host",
        "serve",
        "--driver",
        DRIVER,
        "--claims-dir",
        str(root / "claims"),
        "--plugin-data-dir",
        str(root / "plugin"),
        "--cdi-dir",
        str(root / "cdi"),
        "--registry-dir",
        str(root / "registry"),
    ]


def start(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        serve_args(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once both sockets listen
    if not line.startswith("serving"):
        proc.kill()
        pytest.fail(f"serve did not start: {line!r} {proc.communicate()[1]}")
    return proc


def test_serve_prepares_over_grpc_and_stops_cleanly_on_sigterm(root):
    dra_sock = root / "plugin" / "dra.sock"
    reg_sock = root / "registry" / f"{DRIVER}-reg.sock"
    started = time.monotonic()
    proc = start(root)
    startup = time.monotonic() - started
    try:
        assert dra_sock.is_socket()
        assert reg_sock.is_socket()
        with grpc.insecure_channel(f"unix:{reg_sock}") as channel:
            stub = registration_pb2_grpc.RegistrationStub(channel)
            info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=10)
            assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(dra_sock))
            stub.NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=True), timeout=10
            )
        with grpc.insecure_channel(f"unix:{info.endpoint}") as channel:
            response = dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(
                    claims=[dra_v1_pb2.Claim(namespace="vms", name="vm1-nic", uid=UID)]
                ),
                timeout=30,
            )
        assert response.claims[UID].error == ""
        assert list(response.claims[UID].devices[0].cdi_device_ids) == [
            f"{DRIVER}/metadata={UID}_nic"
        ]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert not dra_sock.exists()
    assert not reg_sock.exists()
    assert "kubelet registered DRA plugin sriov.example.com" in stderr
    assert "SIGTERM: stopping" in stderr
    # Stopping is not unpreparing: the files stay until kubelet asks.
    assert list((root / "cdi").iterdir())
    print(f"serve: sockets up {startup:.2f}s after exec")


def test_a_second_instance_on_the_same_sockets_exits_1_and_the_first_keeps_serving(root):
    proc = start(root)
    try:
        second = subprocess.run(
            serve_args(root), capture_output=True, text=True, timeout=60, check=False
        )
        assert second.returncode == 1
        assert "another server is listening" in second.stderr
        assert (root / "plugin" / "dra.sock").is_socket()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0


def test_invalid_options_exit_2(root):
    bad_driver = [*serve_args(root)]
    bad_driver[bad_driver.index(DRIVER)] = "Not_A_Driver"
    done = subprocess.run(bad_driver, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "driver" in done.stderr
    assert not (root / "registry").exists()

    both = [*serve_args(root), "--kube"]
    done = subprocess.run(both, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


def test_help_shows_an_example():
    done = subprocess.run(
        [sys.executable, "-m", "kvdev.host", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "100"},
        check=True,
    )
    assert "kvdev-host serve --driver sriov.example.com --kube" in done.stdout
    assert "--claims-dir" in done.stdout


# ------------------------------------------------------------ kubelet's matching of the answer

SHARE = "7c1f4a52-9e0b-4f36-8d1a-2b6e5c9a0d44"
PLAIN, TEMPLATE, FIRST, SHARED = (
    f"0b7cf1e0-7a57-4d0b-9a37-3f6a4c9d00{i:02d}" for i in (11, 12, 13, 14)
)


def vf(i: int) -> dict:
    return {
        "name": f"vf-{i}",
        "attributes": {"resource.kubernetes.io/pciBusID": {"string": f"0000:3b:02.{i}"}},
    }


def claim(name: str, uid: str, requests: list[dict], results: list[dict], **meta) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "vms", "uid": uid, **meta},
        "spec": {"devices": {"requests": requests}},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": DRIVER, "pool": "node-a", **r} for r in results]}
            }
        },
    }


def kubelet_objects() -> list[dict]:
    exact = {"name": "nic", "exactly": {"deviceClassName": "vf", "count": 2}}
    first = {"name": "nic", "firstAvailable": [{"name": "rdma", "deviceClassName": "vf"}]}
    one = {"name": "nic", "exactly": {"deviceClassName": "vf"}}
    slice_ = objects()[0]
    slice_["spec"]["devices"] = [vf(i) for i in range(1, 7)]
    return [
        slice_,
        claim(  # a claim the pod names: two devices for one request
            "vm1-nics",
            PLAIN,
            [exact],
            [{"request": "nic", "device": "vf-1"}, {"request": "nic", "device": "vf-2"}],
        ),
        claim(  # made from a template: kubelet knows it by the pod's claim name
            "virt-launcher-vm1-fast-nic-q7w2x",
            TEMPLATE,
            [one],
            [{"request": "nic", "device": "vf-3"}],
            annotations={"resource.kubernetes.io/pod-claim-name": "fast-nic"},
        ),
        claim("vm1-rdma", FIRST, [first], [{"request": "nic/rdma", "device": "vf-4"}]),
        claim(  # a share of a device with consumable capacity
            "vm1-share", SHARED, [one], [{"request": "nic", "device": "vf-5", "shareID": SHARE}]
        ),
    ]


def cdi_ids_for(container_request: str, answer) -> list[str]:
    """kubelet's rule for one container's resources.claims[] entry (pkg/kubelet/cm/dra).

    The container gets a device's CDI IDs when its entry names no request, or a request that
    is one of the device's request_names (compared as given: kubelet strips nothing).
    """
    return [
        cdi
        for device in answer.devices
        if not container_request or container_request in device.request_names
        for cdi in device.cdi_device_ids
    ]


@pytest.fixture
def kubelet_root():
    path = Path(tempfile.mkdtemp(prefix="kvdev-serve-", dir="/tmp"))
    (path / "claims").mkdir()
    (path / "claims" / "objects.yaml").write_text(yaml.safe_dump_all(kubelet_objects()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_kubelet_gives_each_container_the_metadata_of_its_request_once(kubelet_root, version):
    pb2, grpc_mod = (
        (dra_v1_pb2, dra_v1_pb2_grpc)
        if version == "v1"
        else (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)
    )
    claims = {
        PLAIN: "vm1-nics",
        TEMPLATE: "virt-launcher-vm1-fast-nic-q7w2x",
        FIRST: "vm1-rdma",
        SHARED: "vm1-share",
    }
    proc = start(kubelet_root)
    try:
        with grpc.insecure_channel(f"unix:{kubelet_root / 'plugin' / 'dra.sock'}") as channel:
            response = grpc_mod.DRAPluginStub(channel).NodePrepareResources(
                pb2.NodePrepareResourcesRequest(
                    claims=[pb2.Claim(namespace="vms", name=n, uid=u) for u, n in claims.items()]
                ),
                timeout=30,
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    for uid in claims:
        assert response.claims[uid].error == "", response.claims[uid].error
        # virt-launcher's compute container asks for the base request name ...
        got = cdi_ids_for("nic", response.claims[uid])
        assert got == [f"{DRIVER}/metadata={uid}_nic"], uid  # ... and gets the file once
        assert cdi_ids_for("", response.claims[uid]) == got  # a container naming no request
        assert cdi_ids_for("nic/rdma", response.claims[uid]) == []  # never a subrequest
    rdma = response.claims[FIRST].devices[0]
    assert list(rdma.request_names) == ["nic"]  # the base name, not "nic/rdma"
    plain = response.claims[PLAIN].devices
    assert [list(d.cdi_device_ids) for d in plain] == [[f"{DRIVER}/metadata={PLAIN}_nic"], []]
    share = response.claims[SHARED].devices[0]
    if version == "v1":
        assert share.HasField("share_id")
        assert share.share_id == SHARE
        assert not plain[0].HasField("share_id")  # a whole device has no share
