"""``kvdev-host bundle`` end to end on real files: prepare -> CDI specs -> bundle -> guest reader.

The round trip uses the real metadata writer (``kvdev.host.publish.writer.prepare``) on the example
claims and slices, rebuilds the container tree from its CDI specs, publishes the bundle and
reads it back with the guest agent's own file reader, belief and matcher.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdev.guest.adapters import files
from kvdev.guest.core import sources
from kvdev.guest.core.matching import MatchState, match
from kvdev.guest.core.observed import GuestDevice
from kvdev.host.cli import main
from kvdev.host.k8s import load
from kvdev.host.publish import writer

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "packaging/examples/host"
TREE = REPO / "packaging/examples/dra-device-attributes"
XML = REPO / "tests/data/libvirt/vm1-domain.xml"
PLAN = REPO / "tests/data/libvirt/vm1-plan.yaml"
VM1_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"


@pytest.fixture(scope="module")
def cdi_dir(tmp_path_factory):
    """The example claims prepared by the real writer for every driver of the slices."""
    root = tmp_path_factory.mktemp("host")
    claims = list(load((EXAMPLES / "claims.yaml").read_text(), "claims.yaml"))
    slices = list(load((EXAMPLES / "slices.yaml").read_text(), "slices.yaml"))
    for driver in sorted({s.spec.driver for s in slices}):
        layout = writer.Layout(driver, root / "plugins" / driver, root / "cdi")
        for claim in claims:
            writer.prepare(claim, slices, layout)
    return root / "cdi"


def HOSTS(cdi_dir):  # noqa: N802 - reads as the flag it gives
    return ("--host-dir", cdi_dir.parent / "plugins")


def run(capsys, *args):
    code = main(["bundle", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_round_trip_prepare_bundle_guest_reader(cdi_dir, tmp_path, capsys):
    out = tmp_path / "share"
    code, stdout, _ = run(
        capsys,
        "--from-cdi",
        cdi_dir,
        *HOSTS(cdi_dir),
        "--domain-xml",
        XML,
        "--out",
        out,
        "-o",
        "json",
    )
    assert code == 0
    report = json.loads(stdout)
    assert (report["changed"], report["unpinned"]) == (True, [])
    raws, complete = files.read_sources(out / "current")
    belief = sources.update(sources.Sources(), raws, listing_complete=complete)
    assert (complete, belief.errors()) == (True, {})
    described = belief.described()
    guest = [GuestDevice(d["guestPCI"]) for d in report["devices"]]
    matching = match(described, guest, belief.hints(), belief.tagged())
    seen = {
        b.device.name: (
            b.state,
            b.device.pci_address,
            b.guest.pci_address if b.guest else None,
            b.device.mac,
            b.device.ips,
        )
        for b in matching.bindings
    }
    assert seen == {
        "gpu-vfio-0": (MatchState.BOUND, "0000:ca:00.0", "0000:09:00.0", None, ()),
        "vf-1": (
            MatchState.BOUND,
            "0000:3b:02.1",
            "0000:07:00.0",
            "02:00:00:3b:02:01",
            ("10.1.0.5/24",),
        ),
        "vf-2": (
            MatchState.BOUND,
            "0000:3b:02.2",
            "0000:08:00.0",
            "02:00:00:3b:02:02",
            ("10.1.0.6/24",),
        ),
        "pci-0000-5e-00-1": (
            MatchState.BOUND,
            "0000:5e:00.1",
            "0000:0a:00.0",
            "0c:42:a1:5e:00:01",
            ("192.0.2.10/24", "2001:db8:5e::10/64"),
        ),
    }


def test_claim_uid_keeps_only_that_claims_files(cdi_dir, tmp_path, capsys):
    out = tmp_path / "share"
    code, stdout, _ = run(
        capsys,
        "--from-cdi",
        cdi_dir,
        *HOSTS(cdi_dir),
        "--claim-uid",
        VM1_UID,
        "--out",
        out,
        "-o",
        "json",
    )
    assert code == 0
    assert [d["device"].split("/")[-1] for d in json.loads(stdout)["devices"]] == [
        "gpu-vfio-0",
        "vf-1",
        "vf-2",
    ]
    assert sorted(p.name for p in (out / "current").iterdir()) == ["kvdev", "resourceclaims"]


def test_text_summary_and_the_second_run_is_unchanged(tmp_path, capsys):
    out = tmp_path / "share"
    code, stdout, stderr = run(capsys, "--from-tree", TREE, "--guest-plan", PLAN, "--out", out)
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].split() == ["DEVICE", "GUEST", "PCI", "MATCHED", "BY", "FROM", "TAG"]
    assert lines[-2] == (
        "unpinned, the agent matches them by MAC: "
        "vm1-devices/nic-2/sriov.example.com/node-a/vf-2, "
        "fast-nic/nic/dra.net/node-a/pci-0000-5e-00-1"
    )
    assert lines[-1] == f"published: {out}/current -> .gen-1; 4 devices, 2 pinned"
    assert "guest-hints.json: not copied (guest hints, replaced by the bundle's)" in stderr
    code, stdout, _ = run(capsys, "--from-tree", TREE, "--guest-plan", PLAN, "--out", out)
    assert (code, stdout.splitlines()[-1]) == (
        0,
        f"unchanged: {out}/current -> .gen-1; 4 devices, 2 pinned",
    )


def test_from_tree_never_says_a_gpu_is_matched_by_mac(tmp_path, capsys):
    code, stdout, _ = run(capsys, "--from-tree", TREE, "--out", tmp_path / "share")
    assert code == 0
    lines = stdout.splitlines()
    gpu = "vm1-devices/gpu/gpu.nvidia.com/node-a/gpu-vfio-0"
    by_mac = next(
        line for line in lines if line.startswith("unpinned, the agent matches them by MAC")
    )
    assert gpu not in by_mac
    assert (
        "unpinned, no MAC: the agent matches them only by a PCI vendor:device ID no other device "
        f"shares (pin them with --domain-xml or --guest-plan): {gpu}"
    ) in lines


def test_invalid_plan_exits_2_naming_file_and_field(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "apiVersion: bundle.kvdev.io/v1alpha1\nkind: GuestPlan\n"
        "devices: [{claim: vm1-devices, request: gpu, mtu: 1}]\n"
    )
    code, stdout, stderr = run(
        capsys, "--from-tree", TREE, "--guest-plan", plan, "--out", tmp_path / "o"
    )
    assert (code, stdout) == (2, "")
    assert stderr == (
        f"kvdev-host bundle: {plan}: devices[0].mtu: Input should be greater than or equal to 68\n"
    )
    assert not (tmp_path / "o").exists()


def test_hostile_xml_exits_2(tmp_path, capsys):
    xml = REPO / "tests/data/libvirt/billion-laughs.xml"
    code, _, stderr = run(capsys, "--from-tree", TREE, "--domain-xml", xml, "--out", tmp_path)
    assert code == 2
    assert "a document type declaration (DOCTYPE) refused" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "o"], "one of the arguments --from-tree --from-cdi is required"),
        (
            ["--from-tree", "t", "--from-cdi", "c", "--out", "o"],
            "argument --from-cdi: not allowed with argument --from-tree",
        ),
        (
            ["--from-tree", "t", "--domain-xml", "x", "--guest-plan", "p", "--out", "o"],
            "argument --guest-plan: not allowed with argument --domain-xml",
        ),
    ],
)
def test_usage_errors_exit_2(capsys, args, message):
    code, _, stderr = run(capsys, *args)
    assert code == 2
    assert message in stderr


def test_claim_uid_needs_from_cdi(capsys, tmp_path):
    code, _, stderr = run(capsys, "--from-tree", TREE, "--claim-uid", "u", "--out", tmp_path)
    assert (code, stderr) == (2, "kvdev-host bundle: --claim-uid needs --from-cdi\n")


def test_missing_tree_exits_2_and_unwritable_output_exits_1(tmp_path, capsys):
    code, _, stderr = run(capsys, "--from-tree", tmp_path / "nope", "--out", tmp_path / "o")
    assert (code, stderr) == (2, f"kvdev-host bundle: {tmp_path}/nope: not a directory\n")
    (tmp_path / "file").write_text("x")
    code, _, stderr = run(capsys, "--from-tree", TREE, "--out", tmp_path / "file/o")
    assert code == 1
    assert (
        stderr == f"kvdev-host bundle: cannot create directory {tmp_path}/file/o: Not a directory\n"
    )


def test_help_shows_examples():
    proc = subprocess.run(
        [sys.executable, "-m", "kvdev.host", "bundle", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    assert "kvdev-host bundle --from-tree ./dra-device-attributes --domain-xml vm1.xml" in (
        proc.stdout
    )
