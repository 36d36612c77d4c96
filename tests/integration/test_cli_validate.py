"""`kvdev metadata validate` end to end: the installed console script on real files."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import stream_objects
from kvdev.guest.cli import main as cli
from upstreamlab import publish_configmap as publish

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "packaging" / "examples"
TREE = EXAMPLES / "dra-device-attributes"
NICS = "resourceclaims/vm1-devices/nic-2/sriov.example.com-metadata.json"  # vf-2


KVDEV = shutil.which("kvdev") or str(Path(sys.executable).parent / "kvdev")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KVDEV, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def tree(tmp_path):
    copy = tmp_path / "tree"
    shutil.copytree(TREE, copy)
    return copy


def test_bundled_examples_are_valid():
    done = run("metadata", "validate", str(EXAMPLES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 file(s): 6 valid, 0 invalid, 0 warning(s)" in done.stdout
    assert "pci 0000:3b:02.1" in done.stdout


def test_json_output_carries_normalized_content():
    done = run("metadata", "validate", "--json", str(TREE))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["kind"] == "MetadataValidation"
    assert report["valid"] is True
    by_path = {Path(f["path"]).relative_to(TREE).as_posix(): f for f in report["files"]}
    nics = by_path[NICS]
    assert nics["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert nics["location"] == {
        "template": False,
        "claim": "vm1-devices",
        "request": "nic-2",
        "driver": "sriov.example.com",
    }
    assert [d["pciAddress"] for d in nics["devices"]] == ["0000:3b:02.2"]
    assert [d["mac"] for d in nics["devices"]] == ["02:00:00:3b:02:02"]
    assert [d["usable"] for d in nics["devices"]] == [True]
    gpu = by_path["resourceclaims/vm1-devices/gpu/gpu.nvidia.com-metadata.json"]
    assert gpu["devices"][0]["numaNodes"] == [1]
    assert by_path["kvdev/guest-hints.json"]["role"] == "GuestHints"


def test_a_device_kvdev_cannot_act_on_exits_2_naming_file_object_and_field(tree):
    path = tree / NICS
    first, second = stream_objects(path)
    first["requests"][0]["devices"][0]["networkData"]["ips"] = ["10.1.0.6/24", "10.1.0.7", "x"]
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    done = run("metadata", "validate", str(tree))
    assert done.returncode == 2
    assert f"INVALID {path}" in done.stdout
    ips = "stream[0]: requests[0].devices[0].networkData.ips"
    assert f"error: {ips}[2]: 'x' is not an IP address" in done.stdout
    assert f"[upstream] {ips}[1]: '10.1.0.7' is not a CIDR" in done.stdout
    assert "1 invalid" in done.stdout


def test_a_value_only_upstreams_writer_rules_refuse_exits_1(tree):
    path = tree / NICS
    first, second = stream_objects(path)
    first["requests"][0]["devices"][0]["networkData"]["ips"] = ["10.1.0.6/24", "10.1.0.7"]
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    done = run("metadata", "validate", str(tree))
    assert done.returncode == 1, done.stdout  # usable (as the host address 10.1.0.7/32)
    assert f"valid   {path}" in done.stdout
    assert "used as the host address 10.1.0.7/32" in done.stdout
    report = json.loads(run("metadata", "validate", "--json", str(tree)).stdout)
    assert (report["valid"], report["conforming"]) == (True, False)


def test_non_mac_hardware_address_is_a_warning_not_an_error(tree):
    path = tree / NICS
    text = path.read_text().replace("02:00:00:3b:02:02", "ib0-port-1")
    path.write_text(text)
    done = run("metadata", "validate", str(path))
    assert done.returncode == 0, done.stdout
    assert "warning: stream[0]: requests[0].devices[0].networkData.hardwareAddress" in done.stdout
    assert "cannot be matched by MAC" in done.stdout


def test_misplaced_file_warns(tree):
    wrong = tree / "resourceclaims/other-claim/nic-2/sriov.example.com-metadata.json"
    wrong.parent.mkdir(parents=True)
    shutil.copy(tree / NICS, wrong)
    done = run("metadata", "validate", "--json", str(wrong))
    assert done.returncode == 0
    (f,) = json.loads(done.stdout)["files"]
    assert [w["path"] for w in f["warnings"]] == ["metadata.name"]


def test_bad_directory_name_is_an_error(tree):
    bad = tree / "resourceclaims/Bad_Claim/nic-2/sriov.example.com-metadata.json"
    bad.parent.mkdir(parents=True)
    shutil.copy(tree / NICS, bad)
    done = run("metadata", "validate", str(bad))
    assert done.returncode == 2
    assert "path: claim directory: 'Bad_Claim' is not a DNS subdomain" in done.stdout


def test_missing_path_is_a_usage_error(tmp_path):
    done = run("metadata", "validate", str(tmp_path / "nope"))
    assert done.returncode == 2
    assert "no such file or directory" in done.stderr


def test_empty_tree_is_valid_and_says_so(tmp_path):
    done = run("metadata", "validate", str(tmp_path))
    assert done.returncode == 0
    assert "no metadata, hints or config-drive files found" in done.stdout


def test_help_teaches():
    done = run("metadata", "validate", "--help")
    assert done.returncode == 0
    assert "examples:" in done.stdout
    assert "exit status" in done.stdout


def test_color_only_when_asked(tree, capsys):
    assert cli.main(["metadata", "validate", "--color", "always", str(tree)]) == 0
    assert "\x1b[32m" in capsys.readouterr().out
    assert cli.main(["metadata", "validate", str(tree)]) == 0  # captured: not a TTY
    assert "\x1b[" not in capsys.readouterr().out


@pytest.mark.parametrize("script", ["kvdev-agent", "kvdev-host"])
def test_other_entry_points_answer_version(script):
    exe = shutil.which(script) or str(Path(sys.executable).parent / script)
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith(script + " ")


def test_a_configmap_volume_is_checked_key_by_key_as_the_agent_reads_it(tmp_path):
    """The guest's view of a VMI's kvdev ConfigMap: flat keys, ``..data``, role by key name."""
    volume = tmp_path / "volume"
    streams = sorted(TREE.rglob("*-metadata.json"))
    keys = {f"key-{i}.json": p.read_bytes() for i, p in enumerate(streams)}
    hints = (TREE / "kvdev/guest-hints.json").read_bytes()
    publish(volume, {**keys, "guest-hints.json": hints})
    done = run("metadata", "validate", "--json", str(volume))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    kinds = sorted(f["role"] for f in report["files"])
    assert kinds == sorted(["GuestHints"] + ["DeviceMetadata"] * len(streams))
    assert {Path(f["path"]).parent for f in report["files"]} == {volume}  # keys, not versions

    publish(volume, {"key-0.json": b'{"kind": "DeviceMetadata", "apiVersion": '})
    broken = run("metadata", "validate", str(volume))
    assert broken.returncode == 2, broken.stdout
    assert f"{volume}/key-0.json" in broken.stdout
    assert "1 file(s): 0 valid, 1 invalid" in broken.stdout


def test_a_configmap_volume_of_more_keys_than_the_agent_reads_is_invalid(tmp_path):
    from kvdev.schema.tree import CONFIGMAP_MAX_KEYS  # noqa: PLC0415

    root = tmp_path / "volume"
    keys = {f"a-{n:03d}": b"{}" for n in range(CONFIGMAP_MAX_KEYS + 1)}
    publish(root, keys)
    done = run("metadata", "validate", str(root))
    assert done.returncode == 2, done.stdout
    assert f"{CONFIGMAP_MAX_KEYS + 1} keys, only the first {CONFIGMAP_MAX_KEYS}" in done.stdout


def test_hints_under_a_stream_key_are_invalid_and_never_read_as_hints(tmp_path):
    """was: a key's role came from its content: GuestHints under any key were hints."""
    streams = sorted(TREE.rglob("*-metadata.json"))
    keys = {f"key-{i}": p.read_bytes() for i, p in enumerate(streams)}
    hints = (TREE / "kvdev/guest-hints.json").read_bytes()
    keys["guest-hints.json"] = hints
    root = tmp_path / "volume"
    publish(root, {**keys, "zz-hints": hints})
    done = run("metadata", "validate", str(root))
    assert done.returncode == 2, done.stdout
    assert f"INVALID {root / 'zz-hints'}" in done.stdout
    assert "a GuestHints object in a stream key: on a ConfigMap volume" in done.stdout
    publish(root, keys)
    assert run("metadata", "validate", str(root)).returncode != 2
