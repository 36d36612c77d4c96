"""What holds about the agent itself shows in its status: ``conditions``, ``converged``, events.

A pass over the in-memory kernel (``MemoryNetlink``) and a copy of the bundled example in
``tmp_path``: a metadata tree cut short by the walk's bounds is a condition (the agent cannot
vouch for what it did not read), and it clears once the tree fits again; state that cannot be
saved (the status, the rename journal) is one too, and no link trades names without its
journal on disk.
"""

import errno
import json
import logging
import shutil

import pytest

from kvdev.errors import Severity
from kvdev.guest.adapters import state, walk
from kvdev.guest.adapters.state import RENAMES, Store
from kvdev.guest.api.bridge import Bridge
from kvdev.guest.core import steps as s
from kvdev.guest.core.status import changes
from kvdev.guest.reconciler import STATUS_FILE, Reconciler, converge
from kvdev.guest.views import encode, tables
from memlab import example_config, example_kernel


@pytest.fixture
def cfg(tmp_path):
    return example_config(tmp_path, gpu=False)


def test_a_tree_cut_short_is_a_condition_until_it_fits_again(cfg):
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple, bounds=walk.Bounds(entries=60))
    first = converge(r)
    assert first.status.conditions == ()
    assert first.status.converged
    junk = cfg.metadata_root / "junk"
    junk.mkdir()
    for i in range(100):
        (junk / f"f{i}").touch()
    cut = r.reconcile().status
    [condition] = cut.conditions
    assert condition.type == "MetadataTruncated"
    assert "stopped after 60 entries" in condition.message
    assert not cut.converged  # it cannot vouch for files it did not read
    assert cut.counts == first.status.counts  # the devices read first are all still there
    body = encode.status_json(cut)
    assert body["conditions"] == [
        {"type": "MetadataTruncated", "severity": "Error", "message": condition.message}
    ]
    assert "MetadataTruncated (Error): metadata tree" in tables.status_text(body)
    assert "MetadataTruncated" in cut.summary()
    raised = [c for c in changes(first.status, cut) if c.type == "ConditionRaised"]
    assert [(c.subject, c.message) for c in raised] == [("MetadataTruncated", condition.message)]
    shutil.rmtree(junk)
    again = r.reconcile().status
    assert (again.conditions, again.converged) == ((), True)
    assert [c.type for c in changes(cut, again)] == ["ConditionCleared"]


def test_a_too_deep_tree_is_reported_but_the_agent_still_converges(cfg):
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple, bounds=walk.Bounds(depth=5))
    deep = cfg.metadata_root / "junk" / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    status = converge(r).status
    [condition] = status.conditions
    assert (condition.type, condition.severity) == ("MetadataTruncated", Severity.WARNING)
    assert "deeper than 5 levels" in condition.message
    assert status.converged  # no file kvdev reads lies deeper than the upstream layout


# ---------------------------------------------- state that cannot be saved is never silent

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class Disk:
    """``write_atomic`` of the state files, failing for ``names`` while ``full``."""

    def __init__(self, monkeypatch, names=(STATUS_FILE, RENAMES.name)):
        self.full, self.names = True, names
        monkeypatch.setattr(state, "write_atomic", self._wrap(state.write_atomic))

    def _wrap(self, real):
        def write_atomic(path, data, *, mode=0o644):
            if self.full and path.name in self.names:
                raise ENOSPC
            return real(path, data, mode=mode)

        return write_atomic


def test_a_status_that_cannot_be_saved_is_a_condition_and_a_retry(cfg, monkeypatch):
    # Regression (finding 5): a full or read-only state dir was only logged: /v1/status
    # showed lastError null and kvdev status looked healthy.
    disk = Disk(monkeypatch)
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    outcome = converge(r)
    [condition] = outcome.status.conditions
    path = cfg.state_dir / STATUS_FILE
    assert (condition.type, condition.severity) == ("StateNotSaved", Severity.ERROR)
    assert condition.message == f"cannot save the status in {path}: No space left on device"
    assert not outcome.status.converged  # so `kvdev status` exits 1
    assert outcome.retry  # the loop tries again (ENOSPC passes when space is freed)
    bridge = Bridge(clock=lambda: 0.0)
    try:
        bridge.publish(outcome.status)
        assert bridge.snapshot().last_error == f"StateNotSaved: {condition.message}"
    finally:
        bridge.close()
    assert not path.exists()
    disk.full = False
    again = r.reconcile()
    assert (again.status.conditions, again.status.converged, again.retry) == ((), True, False)
    assert json.loads(path.read_text())["converged"] is True


def swap_names(cfg):
    """Hints that ask vf-1 (now eth1) to be eth2 and vf-2 (now eth2) to be eth1: a trade."""
    path = cfg.hints_path
    hints = json.loads(path.read_text())
    for device, name in (("vf-1", "eth2"), ("vf-2", "eth1")):
        entry = next(d for d in hints["devices"] if d.get("device") == device)
        entry["network"]["interfaceName"] = name
    path.write_text(json.dumps(hints))


def test_no_link_trades_names_without_its_journal_on_disk(cfg, monkeypatch):
    # Regression (finding 5): a name swap went ahead without its renames.json journal.
    swap_names(cfg)
    disk = Disk(monkeypatch)
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    outcome = converge(r)
    assert not [x for x in kernel.applied if isinstance(x, s.Rename | s.SetDown)]
    # every rename of the pass waits (a trade renames them all through temporary names)
    assert {lk.ifindex: lk.ifname for lk in kernel.state.links} == {
        1: "eth1",
        2: "eth2",
        3: "eth3",
    }
    assert {lk.ifindex: lk.mtu for lk in kernel.state.links}[1] == 9000  # the rest went ahead
    journal = cfg.state_dir / RENAMES.name
    devices = {d.name: d for d in outcome.status.devices}
    for name in ("vf-1", "vf-2", "pci-0000-5e-00-1"):
        assert devices[name].phase.value == "Pending"  # ENOSPC: retried
        assert devices[name].reason.startswith(
            f"not done: cannot save the rename journal {journal}: No space left on device; "
            "no link is renamed without its journal"
        )
    assert "StateNotSaved" in {c.type for c in outcome.status.conditions}
    assert outcome.retry
    disk.full = False
    done = converge(r)
    assert done.status.converged
    assert {lk.ifindex: lk.ifname for lk in kernel.state.links} == {
        1: "eth2",
        2: "eth1",
        3: "fast0",
    }
    assert not journal.exists()  # the trade is over: no journal left


def test_a_journal_on_a_read_only_state_dir_is_a_permanent_failure(cfg, monkeypatch):
    swap_names(cfg)
    erofs = OSError(errno.EROFS, "Read-only file system")

    def read_only(path, data, *, mode=0o644):
        raise erofs

    monkeypatch.setattr(state, "write_atomic", read_only)
    outcome = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    devices = {d.name: d for d in outcome.status.devices}
    assert devices["vf-1"].phase.value == "Error"  # needs the operator: not retried blindly
    assert "Read-only file system" in devices["vf-1"].reason


def test_a_corrupt_journal_is_set_aside_once_and_never_warned_about_again(tmp_path, caplog):
    # Regression (finding 6): a corrupt renames.json warned at every start forever.
    journal = tmp_path / RENAMES.name
    journal.write_bytes(b'{"3": "eth1"')
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert Store(tmp_path).get(RENAMES) == {}
    [record] = caplog.records
    aside = tmp_path / f"{RENAMES.name}.corrupt"
    assert str(journal) in record.getMessage()
    assert f"kept as {aside}" in record.getMessage()
    assert aside.read_bytes() == b'{"3": "eth1"'  # nothing lost
    assert not journal.exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert Store(tmp_path).get(RENAMES) == {}  # the next start
    assert caplog.records == []
    journal.write_text("[1, 2]")
    assert Store(tmp_path).get(RENAMES) == {}
    assert aside.read_text() == "[1, 2]"  # the newest bad one is kept


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "not JSON: maximum recursion depth exceeded"),
        (b" " * (RENAMES.bound + 1), "larger than 65536 bytes"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_a_journal_too_deep_or_too_large_to_read_is_set_aside_too(tmp_path, caplog, content, why):
    (tmp_path / RENAMES.name).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert Store(tmp_path).get(RENAMES) == {}  # a RecursionError crashed the start before
    assert why in caplog.records[0].getMessage()
    assert (tmp_path / f"{RENAMES.name}.corrupt").read_bytes() == content


# --------------------------------------- NetworkManager managing a link kvdev configures anyway


def nm_device_state(cfg, ifindex, managed):
    """NetworkManager's runtime state of a device, as it keeps it under /run."""
    path = cfg.config_root / f"run/NetworkManager/devices/{ifindex}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[device]\nmanaged={managed}\nperm-hw-addr-fake=\n")


def test_a_link_networkmanager_manages_anyway_is_a_condition_naming_the_undo(cfg):
    """NetworkManager 1.58's ``managed --permanent yes`` beats kvdev's NM_UNMANAGED mark."""
    nm_device_state(cfg, 2, "true")  # eth2, vf-2's NIC: data1 once renamed
    nm_device_state(cfg, 1, "false")  # eth1 left alone, as the mark asks
    r = Reconciler(cfg, example_kernel(), scan_devices=tuple)
    outcome = converge(r)
    conditions = [c for c in outcome.status.conditions if c.type == "NetworkManagerManages"]
    undo = "'nmcli device set data1 managed --permanent reset'"
    assert len(conditions) == 1
    assert conditions[0].severity is Severity.WARNING
    assert conditions[0].message.startswith("NetworkManager manages data1, which kvdev configures")
    assert conditions[0].message.endswith(f"undo it with {undo}")
    vf2 = next(d for d in outcome.status.devices if d.ifname == "data1")
    assert undo in tables.explain_text(encode.device_json(vf2))
    nm_device_state(cfg, 2, "false")  # undone: the condition goes
    r.stale_links = True
    assert not [c for c in converge(r).status.conditions if c.type == "NetworkManagerManages"]


def test_without_networkmanager_nothing_is_read_or_said(cfg):
    outcome = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    assert outcome.status.conditions == ()
