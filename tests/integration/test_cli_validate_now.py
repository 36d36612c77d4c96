"""`kvdev metadata validate` on streams as drivers write them now: v1 and v1beta1 only read,
the note that KubeVirt up to v1.9 cannot read a stream without v1alpha1, two slashes a warning."""

import json
import shutil
from pathlib import Path

from test_cli_validate import run

from kvdev.schema.metadata import OLDER_READERS_NOTE

DATA = Path(__file__).resolve().parents[1] / "data" / "metadata-now"


def place(tmp_path, name, claim, request, driver):
    path = tmp_path / "resourceclaims" / claim / request / f"{driver}-metadata.json"
    path.parent.mkdir(parents=True)
    shutil.copyfile(DATA / name, path)


def test_a_tree_of_v1_and_v1beta1_only_streams_is_valid_with_the_kubevirt_note(tmp_path):
    place(tmp_path, "gpu.example.com-v1-only-metadata.json", "vm1-gpu", "gpu", "gpu.example.com")
    place(tmp_path, "dra.cpu-v1beta1-only-metadata.json", "vm1-cpu-claim", "req-cpu", "dra.cpu")
    place(tmp_path, "gpu.example.com-v1-metadata.json", "vm1-gpu-2", "gpu", "gpu.example.com")
    done = run("metadata", "validate", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 file(s): 3 valid, 0 invalid" in done.stdout
    assert done.stdout.count(f"note: {OLDER_READERS_NOTE}") == 2  # not the one with v1alpha1
    assert "metadata.resource.k8s.io/v1," in done.stdout
    report = json.loads(run("metadata", "validate", "--json", str(tmp_path)).stdout)
    used = sorted(f["apiVersion"] for f in report["files"])
    assert used == [
        "metadata.resource.k8s.io/v1",
        "metadata.resource.k8s.io/v1",
        "metadata.resource.k8s.io/v1beta1",
    ]


def test_two_slashes_and_mixed_names_are_warnings_not_errors(tmp_path):
    place(
        tmp_path, "nic.example.com-mixed-names-metadata.json", "vm1-dpdk", "nic", "nic.example.com"
    )
    done = run("metadata", "validate", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr  # valid, not conforming ([upstream])
    assert "more than one '/'" in done.stdout
    assert "are the same attribute of driver nic.example.com" in done.stdout
    assert "INVALID" not in done.stdout
