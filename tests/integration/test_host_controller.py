"""``kvdev-host controller`` as a program: --help, --once on the example, live on the double."""

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


def test_help_lists_the_contract_and_examples():
    done = run("controller", "--help")
    assert done.returncode == 0
    texts = ("kvdev-<vmi>", "guest-hints.json", "--once", "--leader-elect", "examples:")
    more = ("--http-address", "/readyz", "/metrics", "--renew-deadline", "ConfigMapNotOwned")
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
