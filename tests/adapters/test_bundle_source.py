"""host.bundlesource on real files: the container tree from a directory or from CDI specs."""

import json

import pytest

from kvdev.errors import SchemaError, TransientReadError
from kvdev.host.bundle.source import read_cdi_dir, read_tree_dir
from kvdev.schema.tree import ROOT

META = "resourceclaims/c/r/d.example.com-metadata.json"


def spec(cdi, name, mounts, *, device="uid1_r", spec_level=None, kind="d.example.com/metadata"):
    body = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": device, "containerEdits": {"mounts": mounts}}],
    }
    if spec_level is not None:
        body["containerEdits"] = {"mounts": spec_level}
    (cdi / name).write_text(json.dumps(body))


def mount(host, rel):
    return {"hostPath": str(host), "containerPath": f"{ROOT}/{rel}", "options": ["ro", "bind"]}


@pytest.fixture
def host_file(tmp_path):
    path = tmp_path / "plugins/metadata.json"
    path.parent.mkdir()
    path.write_bytes(b"META\n")
    return path


def test_mounts_become_the_tree_and_other_specs_are_ignored(tmp_path, host_file):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec(cdi, "a.json", [mount(host_file, META)])
    spec(cdi, "gpu.json", [mount(host_file, "x")], kind="nvidia.com/gpu")  # not a metadata spec
    (cdi / "notes.txt").write_text("not a spec")
    assert read_cdi_dir(cdi, host_dirs=[tmp_path]) == {META: b"META\n"}


def test_only_metadata_places_are_read(tmp_path, host_file):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("do not ship")
    spec(cdi, "a.json", [mount(host_file, META), mount(secret, "kvdev/guest-hints.json")])
    spec(cdi, "b.json", [{"hostPath": str(secret), "containerPath": "/etc/x"}])
    assert read_cdi_dir(cdi, host_dirs=[tmp_path]) == {META: b"META\n"}


def test_claim_uid_filters_devices_and_skips_spec_level_edits(tmp_path, host_file):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    other = tmp_path / "other.json"
    other.write_bytes(b"OTHER\n")
    rel2 = "resourceclaims/c2/r/d.example.com-metadata.json"
    spec(cdi, "a.yaml", [mount(host_file, META)], spec_level=[mount(other, rel2)])
    spec(cdi, "b.json", [mount(other, rel2)], device="uid2_r")
    assert read_cdi_dir(cdi, host_dirs=[tmp_path]) == {META: b"META\n", rel2: b"OTHER\n"}
    assert read_cdi_dir(cdi, ["uid1"], [tmp_path]) == {META: b"META\n"}
    assert read_cdi_dir(cdi, ["uid2"], [tmp_path]) == {rel2: b"OTHER\n"}


def test_broken_specs_and_conflicts_name_the_spec_and_field(tmp_path, host_file):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    other = tmp_path / "other.json"
    other.write_bytes(b"OTHER\n")
    spec(cdi, "a.json", [mount(host_file, META)])
    spec(cdi, "b.json", [mount(other, META)])
    spec(cdi, "c.json", [{"containerPath": f"{ROOT}/{META}"}])
    spec(cdi, "d.json", [mount(other, "../../etc/passwd")])
    (cdi / "e.json").write_text("{")
    with pytest.raises(SchemaError) as e:
        read_cdi_dir(cdi, host_dirs=[tmp_path])
    found = [str(p) for p in e.value.problems]
    assert found[:3] == [
        (
            f"{cdi}/b.json: devices[0].containerEdits.mounts: {ROOT}/{META} is also mounted "
            f"by {cdi}/a.json, with other content"
        ),
        (
            f"{cdi}/c.json: devices[0].containerEdits.mounts: a mount without hostPath and "
            "containerPath"
        ),
        (
            f"{cdi}/d.json: devices[0].containerEdits.mounts: containerPath "
            f"'{ROOT}/../../etc/passwd' leaves {ROOT}"
        ),
    ]
    assert found[3].startswith(f"{cdi}/e.json: not valid JSON or YAML: ")
    assert len(found) == 4


def test_missing_host_file_is_a_read_error_naming_it(tmp_path):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec(cdi, "a.json", [mount(tmp_path / "gone.json", META)])
    with pytest.raises(TransientReadError, match=f"{tmp_path}/gone.json: cannot read"):
        read_cdi_dir(cdi, host_dirs=[tmp_path])


def test_tree_dir_reads_metadata_files_only_and_refuses_links_out(tmp_path):
    tree = tmp_path / "tree"
    (tree / "resourceclaims/c/r").mkdir(parents=True)
    (tree / META).write_bytes(b"META\n")
    (tree / "README").write_text("x")
    assert read_tree_dir(tree) == {META: b"META\n", "README": b""}
    secret = tmp_path / "secret"
    secret.write_text("x")
    (tree / "resourceclaims/c/r/e.example.com-metadata.json").symlink_to(secret)
    with pytest.raises(SchemaError, match="symbolic link points outside the tree"):
        read_tree_dir(tree)


def test_oversized_metadata_file_is_refused(tmp_path):
    tree = tmp_path / "tree"
    (tree / "resourceclaims/c/r").mkdir(parents=True)
    (tree / META).write_bytes(b" " * (4 * 1024 * 1024 + 1))
    with pytest.raises(SchemaError, match="larger than 4194304 bytes"):
        read_tree_dir(tree)
