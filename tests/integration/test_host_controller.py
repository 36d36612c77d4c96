"""``kvdev-host controller`` as a program: --help, --once on the example, live on the double."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from apidouble import ApiDouble

REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "packaging" / "examples" / "host"
KVDEV_HOST = Path(sys.executable).with_name("kvdev-host")
FILES = [a for n in ("claims.yaml", "slices.yaml", "vmi.yaml") for a in ("-f", str(HOST / n))]


def run(*args, **kwargs):
    return subprocess.run(
        [str(KVDEV_HOST), *args], capture_output=True, text=True, check=False, timeout=60, **kwargs
    )


def test_help_names_the_contract_page_and_gives_examples():
    done = run("controller", "--help")
    assert done.returncode == 0
    texts = ("kvdev-<vmi>", "guest-hints.json", "docs/reference/controller.md", "examples:")
    more = ("--once", "--leader-elect", "--http-address", "--renew-deadline", "exit status:")
    for text in (*texts, *more):
        assert text in done.stdout
    assert "controller" in run("--help").stdout


def test_once_on_the_example_changes_nothing_and_prints_one_configmap(tmp_path):
    done = run("controller", "--once", *FILES, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (cm,) = list(yaml.safe_load_all(done.stdout))
    assert cm["metadata"]["name"] == "kvdev-vm1"
    assert len(cm["data"]) == 5
    assert list(tmp_path.iterdir()) == []


def test_live_creates_the_configmap_and_stops_cleanly_on_sigterm(tmp_path, capsys):
    double = ApiDouble(bookmark_seconds=0.2)
    double.start()
    try:
        for n in ("claims.yaml", "slices.yaml", "vmi.yaml"):
            for doc in yaml.safe_load_all((HOST / n).read_text()):
                for obj in doc["items"] if doc.get("kind") == "List" else [doc]:
                    double.put(obj)
        config = tmp_path / "kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "d", "cluster": {"server": double.url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "d", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        env = {**os.environ, "POD_NAMESPACE": "kvdev-system", "POD_NAME": "ctl-0"}
        start = time.monotonic()
        proc = subprocess.Popen(
            [str(KVDEV_HOST), "controller", "--kubeconfig", str(config), "--leader-elect"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            end = time.monotonic() + 60
            while double.get("v1", "ConfigMap", "vms", "kvdev-vm1") is None:
                assert proc.poll() is None, proc.communicate()
                if time.monotonic() > end:
                    pytest.fail("no ConfigMap within 60 s")
                time.sleep(0.05)
            created = time.monotonic() - start
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        assert "SIGTERM: stopping" in err
        lease = double.get(
            "coordination.k8s.io/v1", "Lease", "kvdev-system", "kvdev-host-controller"
        )
        assert lease["spec"].get("holderIdentity") is None  # released on the way out
        with capsys.disabled():
            print(f"\n  controller: exec -> ConfigMap created: {created:.2f} s")
    finally:
        double.stop()


NIC1 = "vm1-devices.nic-1.sriov.example.com-metadata.json"
NIC2 = "vm1-devices.nic-2.sriov.example.com-metadata.json"
CLAIM_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"  # vm1-devices, the example's, on node-a
EXAMPLE_HINTS = REPO / "packaging/examples/dra-device-attributes/kvdev/guest-hints.json"


def test_once_leaves_out_a_relayed_file_that_is_no_device_metadata_of_its_claim(tmp_path):
    """was: a relayed file was copied to its stream key unread, so GuestHints written on the
    node (``network.primary: true``, ``0.0.0.0/1`` + ``128.0.0.0/1``) reached the guest."""
    from kvdev.host.publish.relayed import DriverFile, records  # noqa: PLC0415

    hints = json.loads(EXAMPLE_HINTS.read_text())
    vf2 = next(h for h in hints["devices"] if h.get("device") == "vf-2")
    vf2["network"] = {  # what a node could not say, if it could write hints
        "interfaceName": "evil0",
        "primary": True,
        "routes": [{"destination": d, "gateway": "10.1.0.1"} for d in ("0.0.0.0/1", "128.0.0.0/1")],
    }
    good = REPO / "packaging/examples/dra-device-attributes/resourceclaims/vm1-devices/nic-1"
    good_bytes = (
        (good / "sriov.example.com-metadata.json")
        .read_bytes()
        .replace(b'"generation": 2', b'"generation": 9')
    )
    files = [
        DriverFile(CLAIM_UID, "nic-1", "sriov.example.com", good_bytes, "/var/run/cdi/a.json"),
        DriverFile(
            CLAIM_UID,
            "nic-2",
            "sriov.example.com",
            (json.dumps(hints) + "\n").encode(),
            "/var/run/cdi/a.json",
        ),
    ]
    (record,), _ = records("node-a", "kvdev-system", files)
    (tmp_path / "record.yaml").write_text(yaml.safe_dump(record))
    rebuilt = yaml.safe_load(run("controller", "--once", *FILES, cwd=tmp_path).stdout)["data"]

    done = run("controller", "--once", *FILES, "-f", str(tmp_path / "record.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (cm,) = list(yaml.safe_load_all(done.stdout))
    assert cm["data"][NIC1] == good_bytes.decode()  # the driver's file of its claim: copied
    assert cm["data"][NIC2] == rebuilt[NIC2]  # the hints: left out, the reconstruction stays
    assert [k for k, v in cm["data"].items() if "GuestHints" in v] == ["guest-hints.json"]
    sources = json.loads(cm["metadata"]["annotations"]["kvdev.io/sources"])
    assert (sources[NIC1], sources[NIC2]) == ("driver", "reconstructed")
    warned = [line for line in done.stderr.splitlines() if "warning:" in line and NIC2 in line]
    assert len(warned) == 1, done.stderr
    assert "nic-2.sriov.example.com-metadata.json" in warned[0]
    assert "left out, the stream is the reconstruction" in warned[0]
    assert "'guest.kvdev.io/v1alpha1' is not a version of DeviceMetadata" in warned[0]
