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

from kvdev.host.proto import dra_v1_pb2, dra_v1_pb2_grpc, registration_pb2, registration_pb2_grpc

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
