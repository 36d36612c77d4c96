"""Streams as drivers write them now: v1beta1 only, `v1`, mixed attribute names, two slashes.

The files are in tests/data/metadata-now (see its README for where each shape comes from).
"""

from pathlib import Path

import pytest

from kvdev.guest.core import check
from kvdev.guest.core.matching import match
from kvdev.guest.core.observed import NetState, RawFile
from kvdev.guest.core.planning import plan
from kvdev.guest.core.status import MetadataState, Phase, summarize
from kvdev.guest.views import validation
from kvdev.guest.views.encode import device_json
from kvdev.guest.views.tables import devices_table, explain_text
from kvdev.schema import Role, check_file, metadata_location
from kvdev.schema.metadata import OLDER_READERS_NOTE, V1, V1ALPHA1, V1BETA1

DATA = Path(__file__).parents[1] / "data" / "metadata-now"


def read(name, claim="vm1", request="nic"):
    data = (DATA / name).read_bytes()
    driver = name.split("-", 1)[0] if not name.startswith("ovsdpdk") else "ovsdpdk.dra.example.com"
    location = metadata_location(f"resourceclaims/{claim}/{request}/{driver}-metadata.json")
    return check_file(name, Role.DEVICE_METADATA, data, location)


def test_v1beta1_only_stream_is_read_and_noted_as_unreadable_by_kubevirt_1_9():
    result = read("dra.cpu-v1beta1-only-metadata.json", "vm1-cpu-claim", "req-cpu")
    assert result.ok, result.errors
    assert result.api_version == V1BETA1
    (device,) = result.described
    assert (device.claim, device.request, device.driver, device.numa_nodes) == (
        "vm1-cpu-claim",
        "req-cpu",
        "dra.cpu",
        (0,),
    )
    assert device.usable
    assert device.notes == (OLDER_READERS_NOTE,)
    assert not [w for w in result.warnings if "v1alpha1" in w.message]


@pytest.mark.parametrize(
    ("name", "used"),
    [("gpu.example.com-v1-metadata.json", V1), ("gpu.example.com-v1-only-metadata.json", V1)],
)
def test_v1_is_read_with_v1beta1s_fields(name, used):
    result = read(name, "vm1-gpu", "gpu")
    assert result.ok, result.errors
    assert result.api_version == used
    assert result.skipped == ()
    (device,) = result.described
    assert device.pci_address == "0000:ca:00.0"
    assert not result.warnings, result.warnings  # v1beta1 and v1alpha1 after it agree
    has_alpha = V1ALPHA1 in (DATA / name).read_text()
    assert device.notes == (() if has_alpha else (OLDER_READERS_NOTE,))


def test_mixed_names_are_one_key_the_qualified_value_used_with_a_warning():
    result = read("nic.example.com-mixed-names-metadata.json", "vm1-dpdk", "nic")
    assert result.ok, result.errors
    (device,) = result.described
    assert device.mtu == 9000  # nic.example.com/mtu, over the unqualified mtu
    assert device.pci_address == "0000:05:00.1"  # the driver-local, unqualified pciAddress
    same = [w for w in result.warnings if "are the same attribute" in w.message]
    assert len(same) == 1
    assert same[0].path == "requests[0].devices[0].attributes.mtu"


def test_a_key_with_two_slashes_is_a_warning_never_an_error():
    result = read("nic.example.com-mixed-names-metadata.json", "vm1-dpdk", "nic")
    assert result.ok
    assert all(d.usable for d in result.described)
    (two,) = [w for w in result.warnings if "more than one '/'" in w.message]
    assert two.upstream_invalid
    assert '"nic.example.com/pf/name"' in two.path


def test_driver_mtu_is_read_from_the_unqualified_attribute():
    result = read("ovsdpdk-vhost-user-mtu-metadata.json", "vm1-dpdk", "nic")
    assert result.ok
    (device,) = result.described
    assert (device.mtu, device.mac, device.ips) == (1450, "52:54:00:aa:bb:01", ())


def test_validate_report_shows_the_kubevirt_note_and_driver_mtu():
    name = "ovsdpdk-vhost-user-mtu-metadata.json"
    relpath = "resourceclaims/vm1-dpdk/nic/ovsdpdk.dra.example.com-metadata.json"
    raw = RawFile(name, relpath, Role.DEVICE_METADATA, (DATA / name).read_bytes())
    report = check.build([raw])
    text = validation.render_text(report)
    assert f"note: {OLDER_READERS_NOTE}" in text
    assert "driver mtu 1450" in text
    device = validation.render_json(report)["files"][0]["devices"][0]
    assert (device["mtu"], device["notes"]) == (1450, [OLDER_READERS_NOTE])
    assert report.valid


def test_explain_shows_the_driver_mtu_and_the_kubevirt_note():
    body = {
        "ref": "vm1-dpdk/nic/ovsdpdk.dra.example.com/node-a/vhu-0",
        "phase": "Configured",
        "driverMtu": 1450,
        "notes": [OLDER_READERS_NOTE],
    }
    text = explain_text(body)
    assert "driver MTU: 1450" in text
    assert OLDER_READERS_NOTE in text


def test_a_cpu_claim_is_a_cpu_device_with_nothing_to_match_never_missing():
    result = read("dra.cpu-v1beta1-only-metadata.json", "vm1-cpu-claim", "req-cpu")
    matching = match(result.described, ())
    metadata = MetadataState()
    status = summarize(matching, plan(matching, NetState(())), (), metadata, reconcile=1)
    (device,) = status.devices
    assert device.phase is Phase.CONFIGURED
    assert [e.kind for e in device.evidence] == ["cpu"]
    assert "no guest device to match" in device.reason
    assert status.converged
    assert "Missing" not in devices_table([device_json(device)])
