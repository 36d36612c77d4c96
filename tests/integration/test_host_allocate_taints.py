"""`kvdev-host allocate --explain`: the taints of the allocated devices and what tolerates them.

The example cluster (packaging/examples/host): its claims are allocated already; a
DeviceTaintRule taints vf-1 and the GPU with NoExecute (what evicts a VM's launcher pod), and
vm1-devices' allocation tolerates the taint on vf-1 only.
"""

from pathlib import Path

import yaml

from kvdev.host import cli

HOST = Path(__file__).resolve().parents[2] / "packaging" / "examples" / "host"


def rule(name, device, key):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"device": device} if device else {},
            "taint": {"key": key, "value": "soon", "effect": "NoExecute"},
        },
    }


def test_explain_shows_each_allocated_devices_taints_and_the_toleration_that_keeps_it(
    tmp_path, capsys
):
    claims = list(yaml.safe_load_all((HOST / "claims.yaml").read_text()))
    items = [o for d in claims for o in (d["items"] if d.get("kind") == "List" else [d])]
    vm1 = next(o for o in items if o["metadata"]["name"] == "vm1-devices")
    vf1 = vm1["status"]["allocation"]["devices"]["results"][0]
    vf1["tolerations"] = [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
    ]
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump_all(items), encoding="utf-8")
    rules = [
        rule("vf-1-maintenance", "vf-1", "example.com/maintenance"),
        rule("gpu-broken", "gpu-vfio-0", "example.com/broken"),
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump_all(rules), encoding="utf-8")
    files = [tmp_path / "claims.yaml", HOST / "slices.yaml", tmp_path / "rules.yaml"]
    args = ["allocate", *(a for f in files for a in ("-f", str(f))), "--node", "node-a"]
    assert cli.main([*args, "--explain"]) == 0
    err = capsys.readouterr().err
    assert (
        "claim vms/vm1-devices, request nic-1: device sriov.example.com/node-a/vf-1 is tainted\n"
        "  taint example.com/maintenance=soon:NoExecute: tolerated by "
        "example.com/maintenance (Exists), NoExecute\n"
    ) in err
    assert (
        "claim vms/vm1-devices, request gpu: device gpu.nvidia.com/node-a/gpu-vfio-0 is tainted\n"
        "  taint example.com/broken=soon:NoExecute: NOT tolerated: the pods using it "
        "(the VM's launcher pod) are evicted\n"
    ) in err
    assert "vf-2" not in err  # untainted devices are not listed
    assert cli.main(args) == 0
    assert "tainted" not in capsys.readouterr().err  # only with --explain


def test_a_claim_allocated_now_shows_the_toleration_its_request_carries(tmp_path, capsys):
    claims = list(yaml.safe_load_all((HOST / "claims.yaml").read_text()))
    items = [o for d in claims for o in (d["items"] if d.get("kind") == "List" else [d])]
    vm1 = next(o for o in items if o["metadata"]["name"] == "vm1-devices")
    del vm1["status"]
    tolerate = {"key": "example.com/maintenance", "operator": "Exists"}
    for request in vm1["spec"]["devices"]["requests"]:
        request["exactly"]["tolerations"] = [tolerate]
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump_all(items), encoding="utf-8")
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump(rule("pool-maintenance", None, "example.com/maintenance")), encoding="utf-8"
    )
    files = [tmp_path / "claims.yaml", HOST / "slices.yaml", HOST / "allocate" / "classes.yaml"]
    files.append(tmp_path / "rules.yaml")
    args = ["allocate", *(a for f in files for a in ("-f", str(f))), "--node", "node-a"]
    assert cli.main([*args, "--explain"]) == 0
    err = capsys.readouterr().err
    assert (
        "  taint example.com/maintenance=soon:NoExecute: tolerated by "
        "example.com/maintenance (Exists), every effect\n"
    ) in err
    assert "claim vms/vm1-devices, request gpu: device gpu.nvidia.com/node-a/gpu-vfio-0" in err
