"""`kvdev-host serve` as a process: one instance per socket, invalid options, help.

Runs ``python -m kvdev.host serve`` with a claims directory. Registration, prepare and
unprepare, restarts and the CDI device IDs containers get are judged by kubelet's own code in
test_host_serve_kubelet.py.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from hostlab import start_serve

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
    return start_serve(serve_args(root))


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

    bad_uid = [*serve_args(root), "--pod-uid", "../escape"]
    done = subprocess.run(bad_uid, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--pod-uid '../escape': must be a pod UID" in done.stderr
    assert not (root / "registry").exists()


def test_an_empty_pod_uid_means_kubelets_fixed_socket_names(root):
    proc = start_serve([*serve_args(root), "--pod-uid", ""])  # as upstream's helper: off
    try:
        assert (root / "plugin" / "dra.sock").is_socket()
        assert (root / "registry" / f"{DRIVER}-reg.sock").is_socket()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


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
    assert "<plugin-data-dir>/dra-UID.sock and <registry-dir>/<driver>-UID-reg.sock" in done.stdout
