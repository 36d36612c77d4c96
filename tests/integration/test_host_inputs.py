"""What kvdev-host reads and says on the way in: ``-f -`` and ``-f DIR`` (as kubectl reads them),
the shipped allocation examples, a missing kubeconfig, and a ``--driver`` no claim uses.

Each runs the real console script (stdin is a pipe, as in ``kubectl get -o yaml | kvdev-host``)
or ``cli.main`` on the repository's own example files.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvdev.host import cli

REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "packaging/examples/host"
KVDEV_HOST = shutil.which("kvdev-host") or str(Path(sys.executable).parent / "kvdev-host")


def host(*args, stdin=""):
    return subprocess.run(
        [KVDEV_HOST, *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def both_files():
    return (HOST / "claims.yaml").read_text() + "---\n" + (HOST / "slices.yaml").read_text()


def test_allocate_reads_standard_input_and_a_directory():
    fits = host("allocate", "-f", HOST / "slices.yaml", "-f", HOST / "allocate", "--node", "node-a")
    assert fits.returncode == 0, fits.stderr
    piped = (HOST / "slices.yaml").read_text()
    same = host("allocate", "-f", "-", "-f", HOST / "allocate", "--node", "node-a", stdin=piped)
    assert (same.returncode, same.stdout) == (0, fits.stdout)


@pytest.mark.parametrize(
    "command",
    [
        ["status", "--driver", "dra.net", "-o", "json"],
        ["controller", "--once", "-o", "json"],
    ],
)
def test_commands_read_objects_from_standard_input(command, tmp_path):
    text = both_files() + "---\n" + (HOST / "vmi.yaml").read_text()
    by_file = host(
        *command, "-f", HOST / "claims.yaml", "-f", HOST / "slices.yaml", "-f", HOST / "vmi.yaml"
    )
    piped = host(*command, "-f", "-", stdin=text)
    assert by_file.returncode == 0, by_file.stderr
    assert (piped.returncode, piped.stdout) == (0, by_file.stdout)
    assert json.loads(piped.stdout)["items"]


def test_prepare_reads_a_directory_in_name_order(tmp_path):
    tree = tmp_path / "objects"
    tree.mkdir()
    (tree / "b-slices.yml").write_text((HOST / "slices.yaml").read_text())
    (tree / "a-claims.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": []})
    )
    (tree / "c-claims.yaml").write_text((HOST / "claims.yaml").read_text())
    (tree / "notes.txt").write_text("not an object file: never read")
    args = ["--driver", "dra.net", "--plugin-data-dir", tmp_path / "p", "--cdi-dir", tmp_path / "c"]
    done = host("prepare", "-f", tree, *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [c["name"] for c in json.loads(done.stdout)["items"]] == [
        "vm1-devices",
        "virt-launcher-vm1-fast-nic-q7w2x",
    ]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p, "{p}: no such file or directory"),
        (lambda p: p.mkdir() or p, "{p}: a directory with no *.yaml, *.yml, *.json file"),
    ],
)
def test_a_path_with_nothing_to_read_is_named(tmp_path, capsys, make, message):
    path = make(tmp_path / "objects")
    assert cli.main(["allocate", "-f", str(path), "--node", "node-a"]) == 2
    assert message.format(p=path) in capsys.readouterr().err


def test_the_shipped_examples_allocate_and_explain_an_unschedulable_claim(capsys):
    examples = ["-f", str(HOST / "slices.yaml"), "-f", str(HOST / "allocate")]
    assert cli.main(["allocate", *examples, "--node", "node-a", "-o", "json"]) == 0
    claim = json.loads(capsys.readouterr().out)["items"][0]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert claim["metadata"]["name"] == "vm2-devices"
    assert [r["device"] for r in results] == ["vf-1", "vf-2", "gpu-vfio-0"]
    held = ["-f", str(HOST / "claims.yaml")]
    assert cli.main(["allocate", *examples, *held, "--node", "node-a", "--explain"]) == 1
    err = capsys.readouterr().err
    assert "claim vm2-devices, request nics (wants 2): 0 of 4 device(s) fit on their own" in err
    assert "  sriov.example.com/node-a/vf-1: in-use: in use (allocated to another claim)" in err
    assert "kvdev-host: allocate: claim vm2-devices: no device fits request nics" in err


def test_a_missing_kubeconfig_is_named(tmp_path, capsys):
    missing = tmp_path / "nonexist"
    assert cli.main(["controller", "--kubeconfig", str(missing)]) == 2
    assert (
        capsys.readouterr().err == f"kvdev-host controller: --kubeconfig {missing}: no such file\n"
    )


def test_without_any_kubeconfig_the_files_looked_for_are_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["controller"]) == 2
    assert capsys.readouterr().err == (
        "kvdev-host controller: no in-cluster service account, and no kubeconfig file at "
        f"{tmp_path}/a (name one with --kubeconfig)\n"
    )


@pytest.mark.parametrize("verb", ["prepare", "update"])
def test_a_driver_no_claim_uses_warns_exits_1_and_writes_nothing(verb, tmp_path, capsys):
    files = ["-f", str(HOST / "claims.yaml"), "-f", str(HOST / "slices.yaml")]
    layout = ["--plugin-data-dir", str(tmp_path / "p"), "--cdi-dir", str(tmp_path / "c")]
    assert cli.main([verb, *files, "--driver", "dra.nett", *layout]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"kvdev-host: {verb}: warning: no claim in the input has a device of driver dra.nett "
        "(the claims' drivers: dra.net, gpu.nvidia.com, sriov.example.com); nothing written\n"
    )
    assert not (tmp_path / "p").exists()
    assert not (tmp_path / "c").exists()
