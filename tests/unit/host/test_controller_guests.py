"""Whether each guest applied its NICs: the comparison, the tracker over time, the annotation,
the metrics, and the live controller writing the verdict from a VMI's guest-agent status."""

import copy
import json
import sys
from pathlib import Path

import pytest
import yaml

from apidouble import ApiDouble
from kvdev.host import cli
from kvdev.host.contract import GUEST_ANNOTATION, HINTS_KEY
from kvdev.host.controller.guests import (
    DescribedNic,
    NicState,
    UnreportedReason,
    annotate,
    compare,
    described_nics,
)
from kvdev.host.controller.guestwatch import Tracker
from kvdev.host.controller.live import Controller
from kvdev.host.controller.metrics import Metrics
from kvdev.host.controller.render import Inputs, Verb, render
from kvdev.host.controller.vmievents import Reason
from kvdev.host.kube.wire import KubeApi

sys.path.insert(0, str(Path(__file__).parent))
from test_controller_live import CM, Running, configmap, example_objects, kubeconfig, until
from test_controller_ops import Clock, Notes
from test_controller_render import KEY, docs, index_of

# The example VMI's three DRA NICs (packaging/examples/host): network, MAC, address.
NICS = {
    "data0": ("02:00:00:3b:02:01", "10.1.0.5/24"),
    "data1": ("02:00:00:3b:02:02", "10.1.0.6/24"),
    "fast": ("0c:42:a1:5e:00:01", "192.0.2.10/24"),
}


def guest_agent(names=None, drop=(), link=None):
    """status.interfaces[] as virt-handler writes them from the guest agent's answer."""
    out = [
        {
            "name": "default",
            "mac": "02:00:00:00:00:01",
            "infoSource": "domain, guest-agent",
            "interfaceName": "enp1s0",
            "ipAddresses": ["10.0.2.2"],
        }
    ]
    for network, (mac, address) in NICS.items():
        ips = [] if address in drop else [address.split("/")[0]]
        if network == "fast":
            ips.append("2001:db8:5e::10")
        entry = {
            "mac": mac.upper(),
            "infoSource": "guest-agent",
            "ipAddresses": ips,
            "interfaceName": (names or {}).get(network, network),
        }
        if link and network in link:
            entry["linkState"] = link[network]
        out.append(entry)
    return out


def objects_with(status=None, phase="Running"):
    objects = docs()
    vmi = next(o for o in objects if o["kind"] == "VirtualMachineInstance")
    vmi["status"] = {"nodeName": "node-a", "phase": phase, **(status or {})}
    return objects


def example(status=None, phase="Running"):
    inputs = index_of(objects_with(status, phase)).inputs(KEY)
    assert inputs is not None
    return inputs.vmi, render(inputs)


def verdicts(vmi, result, grace_left=0.0):
    report = compare(vmi, described_nics(vmi, result.data), grace_left=grace_left)
    return report, {n.nic.label: (n.state, n.reason, n.detail) for n in report.nics}


def test_the_described_nics_are_the_vmis_networks_with_the_hints_macs_and_the_metadata_ips():
    vmi, result = example()
    nics = described_nics(vmi, result.data)
    assert {n.network: (n.mac, n.addresses[0], n.mac_from) for n in nics} == {
        network: (mac, address, "hints") for network, (mac, address) in NICS.items()
    }
    assert all(n.waiting is None and n.name is None for n in nics)  # the GPU is no NIC


def test_every_nic_the_guest_agent_reports_as_described_is_applied():
    vmi, result = example({"interfaces": guest_agent()})
    report, got = verdicts(vmi, result)
    assert {k: v[0] for k, v in got.items()} == dict.fromkeys(NICS, NicState.APPLIED)
    assert report.state is NicState.APPLIED
    assert report.summary == "Applied: 3/3 Applied"


def test_a_missing_address_differs_naming_the_address_and_the_guests_interface():
    vmi, result = example({"interfaces": guest_agent(drop=("10.1.0.5/24",))})
    report, got = verdicts(vmi, result)
    assert got["data0"][:2] == (NicState.DIFFERS, None)
    assert got["data0"][2] == "10.1.0.5/24 not on the guest's data0"
    assert got["data1"][0] is NicState.APPLIED
    assert report.summary == (
        "Differs: 2/3 Applied, 1 Differs (data0: 10.1.0.5/24 not on the guest's data0)"
    )


def test_within_the_grace_what_differs_is_pending_and_says_why():
    vmi, result = example({"interfaces": guest_agent(drop=("10.1.0.5/24",))})
    report, got = verdicts(vmi, result, grace_left=30.0)
    assert got["data0"] == (
        NicState.PENDING,
        None,
        "within the grace: 10.1.0.5/24 not on the guest's data0",
    )
    assert report.state is NicState.PENDING


def test_a_name_the_hints_ask_for_and_a_link_down_differ():
    vmi, result = example(
        {"interfaces": guest_agent(names={"data1": "eth7"}, link={"data1": "down"})}
    )
    data = dict(result.data)
    hints = data[HINTS_KEY].replace(
        '"request":"nic-2"', '"request":"nic-2","network":{"interfaceName":"data1"}'
    )
    assert hints != data[HINTS_KEY]
    data[HINTS_KEY] = hints
    nics = described_nics(vmi, data)
    assert {n.network: n.name for n in nics}["data1"] == "data1"
    got = {n.nic.label: n for n in compare(vmi, nics).nics}
    assert got["data1"].state is NicState.DIFFERS
    assert got["data1"].detail == (
        "the guest names it eth7, not data1; the guest's eth7 link is down"
    )


@pytest.mark.parametrize(
    ("status", "phase", "reason"),
    [
        ({}, "Scheduled", UnreportedReason.VMI_NOT_RUNNING),
        ({}, "Running", UnreportedReason.NO_GUEST_AGENT),
        (
            {"interfaces": [{"mac": "02:00:00:00:00:01", "infoSource": "domain, guest-agent"}]},
            "Running",
            UnreportedReason.MAC_NOT_SEEN,
        ),
    ],
)
def test_unreported_says_why(status, phase, reason):
    vmi, result = example(status, phase)
    _report, got = verdicts(vmi, result)
    assert {v[:2] for v in got.values()} == {(NicState.UNREPORTED, reason)}
    # the grace never hides a VMI that is not running
    _, within = verdicts(vmi, result, grace_left=30.0)
    expected = (
        NicState.UNREPORTED if reason is UnreportedReason.VMI_NOT_RUNNING else NicState.PENDING
    )
    assert {v[0] for v in within.values()} == {expected}


def test_domain_only_data_is_not_the_guests_and_a_nic_without_a_mac_cannot_be_looked_up():
    entries = [
        {
            "name": "data0",
            "mac": "02:00:00:3b:02:01",
            "infoSource": "domain",
            "ipAddresses": ["10.1.0.5"],
        }
    ]
    vmi, result = example({"interfaces": entries})
    _, got = verdicts(vmi, result)
    assert got["data0"][:2] == (NicState.UNREPORTED, UnreportedReason.NO_GUEST_AGENT)
    bare = DescribedNic(ref="c/r/d/p/n", addresses=("10.9.0.1/24",))
    (only,) = compare(vmi, [bare]).nics
    assert (only.state, only.reason) == (NicState.UNREPORTED, UnreportedReason.MAC_UNKNOWN)


def test_deferred_metadata_is_pending():
    vmi, _ = example({"interfaces": guest_agent()})
    nic = DescribedNic(ref="c/r/d/p/n", mac="02:00:00:3b:02:09", waiting="the driver has not")
    (only,) = compare(vmi, [nic]).nics
    assert only.state is NicState.PENDING


def test_the_status_is_read_within_bounds():
    many = [
        {"mac": f"02:00:00:00:{i // 256:02x}:{i % 256:02x}", "infoSource": "guest-agent"}
        for i in range(300)
    ]
    vmi, result = example({"interfaces": [*many, *guest_agent()]})
    _, got = verdicts(vmi, result)  # the described MACs are past the first 256 entries
    assert {v[1] for v in got.values()} == {UnreportedReason.MAC_NOT_SEEN}


# --------------------------------------------------------------------------- the annotation


def test_the_annotation_rides_on_the_write_and_alone_only_when_it_changed():
    _vmi, result = example({"interfaces": guest_agent()})
    assert result.verb is Verb.CREATE
    created = annotate(result, None, "Applied: 3/3 Applied")
    assert created.body["metadata"]["annotations"][GUEST_ANNOTATION] == "Applied: 3/3 Applied"
    assert GUEST_ANNOTATION not in result.body["metadata"]["annotations"]  # not changed in place
    stored = copy.deepcopy(created.body)
    stored["metadata"]["resourceVersion"] = "7"
    objects = objects_with({"interfaces": guest_agent()})
    objects.append(stored)
    inputs = index_of(objects).inputs(KEY)
    again = render(inputs)
    assert again.verb is Verb.NONE
    assert annotate(again, inputs.existing, "Applied: 3/3 Applied") is again
    changed = annotate(again, inputs.existing, "Differs: 2/3 Applied, 1 Differs (x)")
    assert changed.verb is Verb.UPDATE
    assert changed.body["metadata"]["resourceVersion"] == "7"
    assert changed.body["data"] == stored["data"]


# --------------------------------------------------------------------------- over time


def test_the_grace_runs_from_the_first_running_sight_and_from_a_metadata_change():
    tracker = Tracker(grace=100.0, event_interval=0.0)
    vmi, result = example({"interfaces": guest_agent(drop=("10.1.0.5/24",))})
    first = tracker.assess(KEY, vmi, result.data, now=0.0)
    assert first.report.state is NicState.PENDING
    assert first.recheck == pytest.approx(100.0)
    assert first.notes == ()  # first seen Pending: nothing to say
    later = tracker.assess(KEY, vmi, result.data, now=100.0)
    assert later.report.state is NicState.DIFFERS
    assert [(n.reason, n.message) for n in later.notes] == [
        (
            Reason.GUEST_NIC_DIFFERS,
            (
                "NIC data0 (MAC 02:00:00:3b:02:01): Differs: 10.1.0.5/24 not on the guest's data0 "
                "(was Pending)"
            ),
        )
    ]
    unchanged = {**result.data}  # new strings, the same content: no new grace
    assert tracker.assess(KEY, vmi, unchanged, now=120.0).report.state is NicState.DIFFERS
    hints = result.data[HINTS_KEY].replace(
        '"request":"nic-2"', '"request":"nic-2","network":{"mtu":9000}'
    )
    changed = {**result.data, HINTS_KEY: hints}
    again = tracker.assess(KEY, vmi, changed, now=150.0)
    assert again.report.state is NicState.PENDING  # the metadata changed: a new grace
    assert again.recheck == pytest.approx(100.0)


def test_events_for_one_nic_are_held_to_one_per_interval_and_the_last_state_is_told():
    tracker = Tracker(grace=0.0, event_interval=60.0)
    good, result = example({"interfaces": guest_agent()})
    bad, _ = example({"interfaces": guest_agent(drop=("10.1.0.5/24",))})
    nics = result.data
    assert tracker.assess(KEY, bad, nics, now=0.0).notes[0].reason is Reason.GUEST_NIC_DIFFERS
    held = tracker.assess(KEY, good, nics, now=10.0)
    assert held.notes == ()
    assert held.recheck == pytest.approx(50.0)
    told = tracker.assess(KEY, good, nics, now=60.0)
    assert [n.reason for n in told.notes] == [Reason.GUEST_NIC_APPLIED]
    assert told.notes[0].message.endswith("(was Differs)")


def test_counts_and_the_oldest_differs_age_and_a_new_uid_starts_afresh():
    tracker = Tracker(grace=0.0, event_interval=0.0)
    bad, result = example({"interfaces": guest_agent(drop=("10.1.0.5/24", "10.1.0.6/24"))})
    nics = result.data
    tracker.assess(KEY, bad, nics, now=5.0)
    tracker.assess(KEY, bad, nics, now=20.0)
    counts = tracker.counts(now=65.0)
    assert counts.nics[NicState.DIFFERS] == 2
    assert counts.nics[NicState.APPLIED] == 1
    assert counts.vmis == {
        NicState.DIFFERS: 1,
        NicState.UNREPORTED: 0,
        NicState.PENDING: 0,
        NicState.APPLIED: 0,
    }
    assert counts.differs_oldest_seconds == pytest.approx(60.0)  # since 5.0, continuously
    other = bad.model_copy(update={"metadata": bad.metadata.model_copy(update={"uid": "new"})})
    stopped = other.model_copy(
        update={"status": other.status.model_copy(update={"phase": "Failed"})}
    )
    tracker.assess(KEY, stopped, nics, now=70.0)
    counts = tracker.counts(now=70.0)
    assert counts.differs_oldest_seconds == 0.0
    assert counts.unreported[UnreportedReason.VMI_NOT_RUNNING] == 3
    tracker.forget(KEY)
    assert sum(tracker.counts(now=71.0).nics.values()) == 0


def test_the_metrics_have_the_names_the_alerts_use():
    tracker = Tracker(grace=0.0)
    bad, result = example({"interfaces": guest_agent(drop=("10.1.0.5/24",))})
    tracker.assess(KEY, bad, result.data, now=0.0)
    metrics = Metrics()
    metrics.watch_guests(lambda: tracker.counts(now=42.0))
    text = metrics.exposition().decode()
    assert 'kvdev_controller_guest_nics{state="Differs"} 1.0' in text
    assert 'kvdev_controller_guest_nics{state="Applied"} 2.0' in text
    assert 'kvdev_controller_guest_unreported_nics{reason="mac_not_seen"} 0.0' in text
    assert 'kvdev_controller_guest_unreported_nics{reason="no_guest_agent"} 0.0' in text
    assert 'kvdev_controller_guest_unreported_nics{reason="vmi_not_running"} 0.0' in text
    assert 'kvdev_controller_guest_vmis{state="Differs"} 1.0' in text
    assert "kvdev_controller_guest_differs_oldest_seconds 42.0" in text


# --------------------------------------------------------------------------- live


def test_the_live_controller_annotates_from_the_vmi_status_and_follows_its_changes(tmp_path):
    double = ApiDouble(bookmark_seconds=0.1)
    double.start()
    try:
        objects = example_objects()
        for obj in objects:
            if obj["kind"] == "VirtualMachineInstance":
                obj["status"]["interfaces"] = guest_agent()
            double.put(obj)
        api = KubeApi.connect(kubeconfig(tmp_path / "kubeconfig", double.url))

        def annotation():
            cm = configmap(double)
            return ((cm or {}).get("metadata", {}).get("annotations") or {}).get(GUEST_ANNOTATION)

        with Running(api, resync=3600, guest_grace=0.0) as controller:
            until(lambda: annotation() == "Applied: 3/3 Applied", "the guest is Applied")
            creates = double.count("POST", "/configmaps")
            vmi = double.get("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1")
            vmi["status"]["interfaces"] = guest_agent(drop=("10.1.0.6/24",))
            double.put(vmi)
            until(lambda: (annotation() or "").startswith("Differs"), "the guest Differs")
            until(controller.idle.is_set, "the controller is idle")
            assert "10.1.0.6/24 not on the guest's data1" in annotation()
            assert controller.guest_counts().nics[NicState.DIFFERS] == 1
            text = controller.metrics.exposition().decode()
            assert 'kvdev_controller_guest_vmis{state="Differs"} 1.0' in text
        assert creates == 1
        assert double.count("PUT", "/configmaps") == 1  # the annotation alone, once
        assert double.get(*CM)["data"] == configmap(double)["data"]
    finally:
        double.stop()


def test_a_sync_queues_the_vmi_again_when_its_grace_ends():
    clock, notes = Clock(), Notes()
    ctl = Controller(KubeApi(client=None), clock=clock, recorder=notes, guest_grace=50.0)
    vmi, result = example({"interfaces": guest_agent(drop=("10.1.0.5/24",))})
    assessed = ctl._assess(KEY, Inputs(vmi), result)
    assert assessed is not None
    assert assessed.report.state is NicState.PENDING
    ctl._record(KEY, Inputs(vmi), result, assessed)
    ctl._queue_rechecks()
    assert len(ctl._queue) == 0
    clock.now += 50.0
    ctl._queue_rechecks()
    assert len(ctl._queue) == 1
    assessed = ctl._assess(KEY, Inputs(vmi), result)
    ctl._record(KEY, Inputs(vmi), result, assessed)
    assert notes.asked[-1] == ("vm1", ["GuestNICDiffers", "ConfigMapCreated"])


# --------------------------------------------------------------------------- kvdev-host guests


def cli_files(tmp_path, drop=()):
    objects = objects_with({"interfaces": guest_agent(drop=drop)})
    inputs = index_of(objects).inputs(KEY)
    body = annotate(render(inputs), None, "Applied: 3/3 Applied").body
    vmi = next(o for o in objects if o["kind"] == "VirtualMachineInstance")
    path = tmp_path / "vms.yaml"
    path.write_text(yaml.safe_dump_all([vmi, body]))
    return str(path)


def test_guests_prints_a_state_per_nic_as_json_and_exits_0_when_applied(tmp_path, capsys):
    status = cli.main(["guests", "-f", cli_files(tmp_path), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    (vmi,) = out["vmis"]
    assert (vmi["namespace"], vmi["name"], vmi["state"]) == ("vms", "vm1", "Applied")
    assert vmi["annotation"] == "Applied: 3/3 Applied"
    assert {n["nic"]: n["state"] for n in vmi["nics"]} == dict.fromkeys(NICS, "Applied")
    data0 = next(n for n in vmi["nics"] if n["nic"] == "data0")
    assert data0["described"] == {"interfaceName": None, "addresses": ["10.1.0.5/24"]}
    assert data0["reported"]["addresses"] == ["10.1.0.5"]
    assert data0["macFrom"] == "hints"


def test_guests_names_what_differs_in_its_table_and_exits_1(tmp_path, capsys):
    path = cli_files(tmp_path, drop=("10.1.0.6/24",))
    status = cli.main(["guests", "-f", path, "-n", "vms", "vm1"])
    out = capsys.readouterr().out
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == "vms/vm1: Differs (controller: Applied: 3/3 Applied)"
    assert lines[1].split() == ["NIC", "MAC", "STATE", "DESCRIBED", "REPORTED", "WHY"]
    row = next(line for line in lines if line.startswith("data1 "))
    assert row.split()[:5] == ["data1", "02:00:00:3b:02:02", "Differs", "10.1.0.6/24", "data1"]
    assert row.endswith("10.1.0.6/24 not on the guest's data1")
    assert cli.main(["guests", "-f", path, "-n", "other"]) == 0
    assert capsys.readouterr().out == "no VMI with DRA claims found\n"


def test_the_e2e_turns_a_guest_agent_answer_into_the_status_kubevirt_writes():
    sys.path.insert(0, str(Path(__file__).parents[2] / "e2e"))
    from e2e_guestagent import status_interfaces  # noqa: PLC0415 - a test helper of the e2e

    answer = [
        {"name": "lo", "hardware-address": "00:00:00:00:00:00",
         "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}]},
        {"name": "data0", "hardware-address": "02:00:00:3b:02:01",
         "ip-addresses": [
             {"ip-address-type": "ipv6", "ip-address": "fe80::1", "prefix": 64},
             {"ip-address-type": "ipv4", "ip-address": "10.1.0.5", "prefix": 24},
         ]},
        *({"name": f"g{i}", "hardware-address": f"02:00:00:00:01:{i:02x}"} for i in range(12)),
    ]  # fmt: skip
    spec = [{"name": "data0", "macAddress": "02:00:00:3b:02:01", "binding": {"name": "x"}}]
    statuses = status_interfaces(spec, answer)
    assert statuses[0] == {
        "name": "data0",
        "mac": "02:00:00:3b:02:01",
        "infoSource": "domain, guest-agent",
        "queueCount": 1,
        "linkState": "up",
        "interfaceName": "data0",
        "ipAddress": "10.1.0.5",
        "ipAddresses": ["10.1.0.5", "fe80::1"],  # IPv4 first
    }
    guest_only = statuses[1:]
    assert len(guest_only) == 10  # KubeVirt's guestOnlyInterfaceLimit
    assert all(s["infoSource"] == "guest-agent" and "name" not in s for s in guest_only)
    vmi, result = example({"interfaces": statuses})
    _, got = verdicts(vmi, result)
    assert got["data0"][0] is NicState.APPLIED
    assert got["data1"][1] is UnreportedReason.MAC_NOT_SEEN


def test_a_dra_network_no_stream_describes_yet_is_pending():
    vmi, result = example({"interfaces": guest_agent()})
    data = {k: v for k, v in result.data.items() if "fast-nic" not in k}
    report = compare(vmi, described_nics(vmi, data))
    fast = next(n for n in report.nics if n.nic.label == "fast")
    assert (fast.state, fast.nic.ref) == (NicState.PENDING, "fast-nic/nic")
    assert fast.detail.startswith("no metadata describes fast-nic/nic yet")
    assert report.summary == "Pending: 2/3 Applied, 1 Pending (fast: " + fast.detail + ")"
