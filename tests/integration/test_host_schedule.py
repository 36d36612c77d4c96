"""`kvdev-host schedule` end to end: real files through ``cli.main``, and the console script."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvdev.host import cli
from kvdev.host.k8s import Pod, ResourceClaim, load

KVDEV_HOST = shutil.which("kvdev-host") or str(Path(sys.executable).parent / "kvdev-host")

CLUSTER = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {allocatable: {cpu: "4", pods: "10"}}
- apiVersion: v1
  kind: Node
  metadata: {name: node-b}
  status: {allocatable: {cpu: "4", pods: "10"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: a-gpu}
spec:
  driver: gpu.example.com
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  nodeName: node-a
  devices:
  - {name: gpu-0, attributes: {model: {string: A100}}}
  - {name: gpu-1, attributes: {model: {string: T4}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: b-gpu}
spec:
  driver: gpu.example.com
  pool: {name: node-b, generation: 1, resourceSliceCount: 1}
  nodeName: node-b
  devices:
  - {name: gpu-0, attributes: {model: {string: A100}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: a100, namespace: ns}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu
          selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "A100"'}}]
"""


def _pod(name: str) -> str:
    return f"""\
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ns}}
spec:
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: a100}}]
  containers: [{{name: c, image: "busybox:1.36", resources: {{requests: {{cpu: "1"}}}}}}]
"""


@pytest.fixture
def files(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)

    def make(*pods: str) -> list[str]:
        path = tmp_path / "pods.yaml"
        path.write_text("".join(_pod(p) for p in pods))
        return ["-f", str(cluster), "-f", str(path)]

    return make


def test_all_placed_yaml_output_and_exit_0(files, capsys):
    assert cli.main(["schedule", *files("p1", "p2")]) == 0
    captured = capsys.readouterr()
    objs = load(captured.out, "stdout")
    pods = {o.metadata.name: o for o in objs if isinstance(o, Pod)}
    claims = [o for o in objs if isinstance(o, ResourceClaim)]
    assert {n: p.spec.node_name for n, p in pods.items()} == {"p1": "node-a", "p2": "node-b"}
    assert sorted(
        (c.status.allocation.devices.results[0].pool, c.status.allocation.devices.results[0].device)
        for c in claims
    ) == [("node-a", "gpu-0"), ("node-b", "gpu-0")]
    assert all(len(c.status.reserved_for) == 1 for c in claims)
    assert "placed 2 of 2 pods, unschedulable 0; 2 claims allocated" in captured.err
    # fields kvdev does not read survive (the output can be applied as is)
    raw = list(yaml.safe_load_all(captured.out))
    assert raw[0]["spec"]["containers"][0]["image"] == "busybox:1.36"
    assert raw[0]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    assert "\r[" not in captured.err  # no progress bar when stderr is not a terminal


def test_some_unschedulable_json_output_and_exit_1(files, capsys):
    assert cli.main(["schedule", *files("p1", "p2", "p3"), "-o", "json"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["kind"] == "List"
    kinds = [i["kind"] for i in out["items"]]
    assert kinds == ["Pod", "Pod", "ResourceClaim", "ResourceClaim"]
    pods = [i for i in out["items"] if i["kind"] == "Pod"]
    claim_names = {i["metadata"]["name"] for i in out["items"] if i["kind"] == "ResourceClaim"}
    assert {p["status"]["resourceClaimStatuses"][0]["resourceClaimName"] for p in pods} == (
        claim_names
    )
    assert "unschedulable 1" in captured.err
    # node-a's T4 does not match the selector: cannot allocate on both nodes
    assert "0/2 nodes are available: 2 cannot allocate all claims. (pods ns/p3)" in captured.err


def test_summary_only_prints_no_objects(files, capsys):
    assert cli.main(["schedule", *files("p1"), "--summary-only"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "placed 1 of 1 pods" in captured.err


def test_invalid_input_names_object_and_field_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "scheduling.k8s.io/v1alpha3",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns"},
                "spec": {"resourceClaims": [{"name": "x"}]},
            }
        )
    )
    assert cli.main(["schedule", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "PodGroup/ns/g" in err
    assert "spec.resourceClaims[0]" in err


def test_bad_feature_gate_and_missing_file_exit_2(files, tmp_path, capsys):
    assert cli.main(["schedule", *files("p1"), "--feature-gates", "Nope=true"]) == 2
    assert "unknown allocator features: Nope" in capsys.readouterr().err
    assert cli.main(["schedule", "-f", str(tmp_path / "missing.yaml")]) == 2


def test_console_script_help_lists_schedule_with_examples():
    top = subprocess.run([KVDEV_HOST, "--help"], capture_output=True, text=True, check=True)
    assert "schedule" in top.stdout
    sub = subprocess.run(
        [KVDEV_HOST, "schedule", "--help"], capture_output=True, text=True, check=True
    )
    assert "examples:" in sub.stdout
    assert "--summary-only" in sub.stdout


def test_console_script_progress_bar_only_on_a_terminal(files):
    # stderr is a pipe here: no bar, only the summary
    run = subprocess.run(
        [KVDEV_HOST, "schedule", *files("p1"), "--summary-only"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stderr.startswith("kvdev-host: schedule: placed 1 of 1 pods")


def test_console_script_draws_a_progress_bar_on_a_terminal(files):
    import os  # noqa: PLC0415
    import pty  # noqa: PLC0415

    leader, follower = pty.openpty()
    try:
        subprocess.run(
            [KVDEV_HOST, "schedule", *files("p1", "p2"), "--summary-only"],
            stdout=subprocess.DEVNULL,
            stderr=follower,
            check=True,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    text = seen.decode()
    assert "\r[" + "#" * 30 + "] 2/2 pods" in text
    assert "placed 2 of 2 pods" in text
    assert "kvdev-host: schedule: loading 2 file argument(s)" in text


def test_progress_flag_shows_the_loading_on_stderr_and_keeps_json_stdout_clean(files):
    args = files("p1", "p2")
    run = subprocess.run(
        [KVDEV_HOST, "schedule", *args, "-o", "json", "--progress"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(run.stdout)["kind"] == "List"  # stdout is the JSON alone
    lines = run.stderr.replace("\r", "\n").splitlines()
    assert lines[0] == "kvdev-host: schedule: loading 2 file argument(s)"
    assert re.fullmatch(
        rf"kvdev-host: schedule: read {re.escape(args[1])} \(0\.0 MiB\): \d+ objects so far, "
        r"\d+\.\d s",
        lines[1],
    )
    assert re.fullmatch(
        rf"kvdev-host: schedule: read {re.escape(args[3])} \(0\.0 MiB\): \d+ objects so far, "
        r"\d+\.\d s",
        lines[2],
    )
    assert re.fullmatch(r"kvdev-host: schedule: loaded \d+ objects in \d+\.\d s", lines[3])
    assert "[" + "#" * 30 + "] 2/2 pods" in run.stderr
    quiet = subprocess.run(
        [KVDEV_HOST, "schedule", *args, "-o", "json"], capture_output=True, text=True, check=True
    )
    assert "loading" not in quiet.stderr
    assert quiet.stdout == run.stdout
