"""The reconcile pass itself, without root: a ``Reconciler`` over an in-memory kernel.

The bundled example tree and config drive are copied into ``tmp_path``; the kernel is a
``MemoryNetlink`` holding the example's three NICs (as veth links, the kind the agent is told
to match, as in the network-namespace tests); state and ``.link`` files go to ``tmp_path`` too.
The example's GPU is left out: nothing here has PCI devices, so it could only be Missing.
"""

import json

import pytest

from kvdev.errors import RetryableError
from kvdev.guest import reconciler as reconciler_module
from kvdev.guest.adapters.state import RENAMES
from kvdev.guest.core import steps as s
from kvdev.guest.core.observed import Link
from kvdev.guest.core.planning import temp_name
from kvdev.guest.reconciler import STATUS_FILE, Reconciler, attempt, converge
from memlab import MACS, example_config, example_kernel


@pytest.fixture
def cfg(tmp_path):
    return example_config(tmp_path, gpu=False)


def names(kernel):
    return {lk.ifindex: lk.ifname for lk in kernel.state.links}


def link(kernel, ifindex):
    return kernel.state.link(ifindex)


def test_a_pass_configures_the_example_in_memory_and_then_changes_nothing(cfg):
    kernel = example_kernel()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert outcome.status.converged
    assert names(kernel) == {1: "data0", 2: "data1", 3: "fast0"}
    assert (link(kernel, 1).mtu, link(kernel, 1).up) == (9000, True)
    addresses = {(a.ifindex, a.address) for a in kernel.state.addresses}
    assert {(1, "10.1.0.5/24"), (2, "10.1.0.6/24"), (3, "198.51.100.7/24")} <= addresses
    assert any(r.destination == "10.3.0.0/16" for r in kernel.state.routes)
    again = Reconciler(cfg, kernel, scan_devices=tuple)
    before = len(kernel.applied)
    assert again.reconcile().results == []
    assert len(kernel.applied) == before  # converged: nothing sent to the kernel


def test_link_wish_steps_go_to_disk_and_kernel_steps_to_netlink(cfg):
    kernel = example_kernel()
    converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert not any(isinstance(x, s.WriteLinkFile | s.RemoveLinkFile) for x in kernel.applied)
    written = sorted(p.name for p in cfg.link_dir.iterdir())
    assert written == ["data0.wish", "data1.wish", "fast0.wish"]
    assert (cfg.link_dir / "data0.wish").read_text() == f"mac {MACS[1]}\n"


def test_the_status_is_saved_and_written_only_when_it_changes(cfg):
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    converge(r)
    path = cfg.state_dir / STATUS_FILE
    saved = json.loads(path.read_text())
    assert (saved["kind"], saved["converged"]) == ("AgentStatus", True)
    assert "reconcile" not in saved  # the pass counter would rewrite it on every pass
    inode = path.stat().st_ino
    r.reconcile()
    assert path.stat().st_ino == inode  # same content: not replaced


def test_the_first_pass_removes_only_what_interrupted_writes_left(cfg):
    cfg.state_dir.mkdir()
    cfg.link_dir.mkdir()
    left = [
        cfg.state_dir / ".status.json.k1l2.tmp",
        cfg.state_dir / ".renames.json.x9.tmp",
        cfg.state_dir / ".altnames.json.x9.tmp",
        cfg.state_dir / ".addresses.json.x9.tmp",  # was left: only two journals were tidied
        cfg.link_dir / ".data0.wish.ab12.tmp",
    ]
    kept = [cfg.state_dir / ".other.json.q.tmp", cfg.link_dir / ".50-mine.link.z.tmp"]
    for path in left + kept:
        path.write_text("half")
    r = Reconciler(cfg, example_kernel(), scan_devices=tuple)
    r.reconcile()
    assert [p.name for p in left if p.exists()] == []
    assert [p.exists() for p in kept] == [True, True]
    (cfg.state_dir / ".status.json.later.tmp").write_text("half")
    r.reconcile()  # only the first pass tidies: later temporaries may be a write in progress
    assert (cfg.state_dir / ".status.json.later.tmp").exists()


def test_a_dry_run_tidies_nothing_and_changes_nothing(cfg):
    cfg.state_dir.mkdir()
    (cfg.state_dir / ".status.json.k1.tmp").write_text("half")
    kernel = example_kernel()
    outcome = converge(Reconciler(dry(cfg), kernel, scan_devices=tuple))
    assert kernel.applied == []
    assert names(kernel) == {1: "eth1", 2: "eth2", 3: "eth3"}
    assert outcome.plan.steps  # it says what it would do
    assert (cfg.state_dir / ".status.json.k1.tmp").exists()
    assert not cfg.link_dir.exists()


def test_a_dry_run_writes_no_status_and_leaves_a_damaged_journal_where_it_is(cfg):
    cfg.state_dir.mkdir()
    (cfg.state_dir / RENAMES.name).write_text("not JSON")
    outcome = converge(Reconciler(dry(cfg), example_kernel(), scan_devices=tuple))
    assert outcome.plan.steps
    assert not outcome.status.converged  # so --once --dry-run exits 1, as documented
    assert sorted(p.name for p in cfg.state_dir.iterdir()) == [RENAMES.name]
    assert (cfg.state_dir / RENAMES.name).read_text() == "not JSON"


def dry(cfg):
    from dataclasses import replace  # noqa: PLC0415

    return replace(cfg, dry_run=True)


def swap_names(cfg):
    """Hints that ask vf-1 (now eth1) to be eth2 and vf-2 (now eth2) to be eth1: a trade."""
    path = cfg.hints_path
    hints = json.loads(path.read_text())
    for device, name in (("vf-1", "eth2"), ("vf-2", "eth1")):
        entry = next(d for d in hints["devices"] if d.get("device") == device)
        entry["network"]["interfaceName"] = name
    path.write_text(json.dumps(hints))


def test_the_rename_journal_is_on_disk_before_any_link_takes_a_temporary_name(cfg):
    swap_names(cfg)
    journal = cfg.state_dir / RENAMES.name
    seen = []

    def check_journal(step):
        if isinstance(step, s.Rename) and step.new_name == temp_name(step.ifindex):
            on_disk = json.loads(journal.read_text())  # must exist already
            seen.append(on_disk.get(str(step.ifindex)) == step.ifname)
        # None: then apply it

    kernel = example_kernel()
    kernel.fault = check_journal
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert seen
    assert all(seen)  # each link's name before the trade was on disk before it moved
    assert names(kernel)[1] == "eth2"
    assert names(kernel)[2] == "eth1"
    assert outcome.status.converged
    assert not journal.exists()  # dropped once no link holds a temporary name


def test_a_link_left_on_its_temporary_name_gets_a_freed_name_back(cfg):
    swap_names(cfg)
    kernel = example_kernel()

    def crash_after_the_first_temporary_rename(step):
        if isinstance(step, s.Rename) and step.new_name != temp_name(step.ifindex):
            return s.StepResult(step=step, ok=False, error="killed", retryable=True)
        return None

    kernel.fault = crash_after_the_first_temporary_rename
    Reconciler(cfg, kernel, scan_devices=tuple).reconcile()  # the trade stops half-way
    assert any(n.startswith(temp_name(i)) for i, n in names(kernel).items())
    kernel.fault = None
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))  # a new agent
    assert outcome.status.converged
    assert names(kernel)[1] == "eth2"
    assert names(kernel)[2] == "eth1"


def test_a_retryable_step_failure_asks_for_a_retry_and_the_next_pass_applies_it(cfg):
    kernel = example_kernel()
    refused = []

    def busy_once(step):
        if isinstance(step, s.SetMtu) and not refused:
            refused.append(step)
            return s.StepResult(step=step, ok=False, error="busy", retryable=True)
        return None

    kernel.fault = busy_once
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    first = r.reconcile()
    assert first.retry
    assert not first.status.converged
    outcome = converge(r)
    assert outcome.status.converged
    assert link(kernel, refused[0].ifindex).mtu == refused[0].mtu


def test_the_first_pass_backs_off_and_retries_an_interrupted_observation(cfg, monkeypatch):
    slept = []
    monkeypatch.setattr(reconciler_module.time, "sleep", slept.append)
    kernel = example_kernel()
    kernel.fail_reads = 3
    outcome = attempt(Reconciler(cfg, kernel, scan_devices=tuple), None)
    assert slept == [0.25, 0.5, 1.0]
    assert kernel.reads == 4
    assert not outcome.failed


def test_a_first_pass_that_keeps_failing_raises_for_systemd_to_restart(cfg, monkeypatch):
    monkeypatch.setattr(reconciler_module.time, "sleep", lambda _s: None)
    kernel = example_kernel()
    kernel.fail_reads = 100
    with pytest.raises(RetryableError):
        attempt(Reconciler(cfg, kernel, scan_devices=tuple), None)
    assert kernel.reads == reconciler_module.FIRST_PASS_TRIES


def test_a_later_pass_that_fails_keeps_the_last_status_and_does_not_sleep(cfg, monkeypatch):
    monkeypatch.setattr(reconciler_module.time, "sleep", pytest.fail)
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    good = r.reconcile()
    kernel.fail_reads = 1
    r.stale_links = True
    again = attempt(r, good)
    assert again.failed
    assert again.retry
    assert again.status is good.status


def test_hot_plugged_link_is_configured_on_the_next_pass(cfg):
    kernel = example_kernel()
    kernel.remove_link(3)
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    converge(r)
    assert 3 not in names(kernel)
    kernel.add_link(Link(ifindex=9, ifname="eth9", mac=MACS[3], kind="veth"))
    r.stale_links = True  # what the netlink event would say
    converge(r)
    assert names(kernel)[9] == "fast0"


# ------------------------------------------------------------ a bad value costs only its device

NIC1 = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"
NIC2 = "resourceclaims/vm1-devices/nic-2/sriov.example.com-metadata.json"


def rewrite_nics(cfg, change, rel=NIC1):
    """Apply ``change`` to every object of a NIC file's stream (any layout), write it back."""
    path = cfg.metadata_root / rel
    decoder, text, pos, objects = json.JSONDecoder(), path.read_text(), 0, []
    while (start := text.find("{", pos)) != -1:
        value, pos = decoder.raw_decode(text, start)
        objects.append(change(value) or value)
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))


def by_ref(outcome):
    return {d.ref.rsplit("/", 1)[-1]: d for d in outcome.status.devices}


def test_an_ip_that_is_no_address_costs_only_its_device_and_changes_nothing_of_it(cfg):
    def bad_ip(doc):
        doc["requests"][0]["devices"][0]["networkData"]["ips"] = ["banana"]

    rewrite_nics(cfg, bad_ip, NIC2)
    kernel = example_kernel()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    devices = by_ref(outcome)
    assert devices["vf-1"].phase.value == "Configured"
    assert devices["vf-2"].phase.value == "Error"
    assert devices["vf-2"].reason == (
        "metadata: requests[0].devices[0].networkData.ips[0]: 'banana' is not an IP address; "
        "the device is left as it is"
    )
    assert names(kernel) == {1: "data0", 2: "eth2", 3: "fast0"}  # eth2 untouched
    assert not [s for s in kernel.applied if s.ifindex == 2]
    assert not outcome.status.converged


def test_a_device_whose_new_description_is_unusable_keeps_its_last_good_one(cfg):
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    converge(r)
    addresses = set(kernel.state.addresses)

    def bad_ip(doc):
        doc["requests"][0]["devices"][0]["networkData"]["ips"] = ["10.1.0.99/24", "not-an-ip"]

    rewrite_nics(cfg, bad_ip)
    outcome = converge(r)
    assert by_ref(outcome)["vf-1"].phase.value == "Configured"  # the last good one, in force
    assert set(kernel.state.addresses) == addresses  # 10.1.0.99 not added: nothing applied
    [error] = outcome.status.file_errors
    assert "'not-an-ip' is not an IP address" in str(error)
    assert not outcome.status.converged

    def fixed(doc):
        doc["requests"][0]["devices"][0]["networkData"]["ips"] = ["10.1.0.99/24"]

    rewrite_nics(cfg, fixed)
    outcome = converge(r)
    assert outcome.status.converged
    assert (1, "10.1.0.99/24") in {(a.ifindex, a.address) for a in kernel.state.addresses}


def test_an_undecodable_newer_version_falls_back_and_the_status_says_so(cfg):
    def break_beta(doc):
        if doc["apiVersion"].endswith("/v1beta1"):
            doc["metadata"]["generation"] = "2"  # Go cannot decode a string into int64

    rewrite_nics(cfg, break_beta)
    outcome = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    assert outcome.status.converged  # the v1alpha1 object the writer also put there is used
    [nics] = [c for c in outcome.status.claims if c.source.endswith(NIC1)]
    assert nics.api_version == "metadata.resource.k8s.io/v1alpha1"
    assert nics.fallback.startswith("stream[0]: metadata.generation: Input should be a valid")


def test_a_pass_says_whether_it_acted_on_new_metadata(cfg):
    # What the loop's streaks are kept apart by (issue 25 "First"): a pass acting on metadata
    # unlike the pass before counts in the metadata streak, any other in the link-drift one.
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    assert r.reconcile().new_metadata is True  # the first pass: all of it is new
    assert r.reconcile().new_metadata is False
    hints = json.loads(cfg.hints_path.read_text())
    hints["devices"][0].setdefault("network", {})["mtu"] = 4000
    cfg.hints_path.write_text(json.dumps(hints))
    changed = r.reconcile()
    assert (changed.new_metadata, changed.changed) == (True, True)
    assert r.reconcile().new_metadata is False


def test_a_preview_rescans_devices_only_when_udev_said_they_changed(cfg):
    # Regression (issue 23 §2): GET /v1/plan rescanned every device of the guest (seconds with
    # thousands of links); the loop keeps stale_devices up to date from udev's events.
    scans = []
    r = Reconciler(cfg, example_kernel(), scan_devices=lambda: scans.append(1) or ())
    converge(r)
    done = len(scans)
    for _ in range(5):
        r.preview()
    assert len(scans) == done
    r.stale_devices = True  # a udev event
    r.preview()
    assert len(scans) == done + 1
