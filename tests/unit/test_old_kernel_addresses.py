"""Kernels without IFA_PROTO (before 5.18): kvdev still removes its own stale addresses, only those.

The kernel here is a ``MemoryNetlink`` that forgets an address's protocol, as such a kernel
does (``ifa_proto=False``); no kernel of that age can be booted here (the QEMU guest runs
Debian 13's 6.12), so this is the pure test the logic gets. The example tree gives data0 (eth1)
10.1.0.5/24; the tests move it to 10.1.0.9/24 while an admin's 10.9.9.9/24 sits on the link.
"""

import pytest

from kvdev.guest.adapters.state import ADDRESSES, Store
from kvdev.guest.core import steps as s
from kvdev.guest.core.observed import Address, NetState
from kvdev.guest.reconciler import Reconciler, converge
from memlab import example_config, example_kernel

NIC1 = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"
ADMIN = Address(1, "10.9.9.9/24", None)  # an admin's, from a kernel that keeps no protocol


def old_kernel(*, ifa_proto: bool = False):
    return example_kernel(addresses=(ADMIN,), ifa_proto=ifa_proto)


@pytest.fixture
def cfg(tmp_path):
    return example_config(tmp_path, gpu=False)


def move_address(cfg):
    path = cfg.metadata_root / NIC1
    path.write_text(path.read_text().replace("10.1.0.5/24", "10.1.0.9/24"))


def on(kernel, ifindex):
    return sorted(a.address for a in kernel.state.addresses if a.ifindex == ifindex)


def test_a_stale_address_of_kvdevs_is_removed_and_the_admins_kept(cfg):
    k = old_kernel()
    r = Reconciler(cfg, k, scan_devices=tuple)
    converge(r)
    assert on(k, 1) == ["10.1.0.5/24", "10.9.9.9/24"]
    assert all(a.proto is None for a in k.state.addresses)  # the kernel kept no mark
    assert Store(cfg.state_dir).get(ADDRESSES)[1] == {"10.1.0.5/24"}
    move_address(cfg)
    converge(r)
    assert on(k, 1) == ["10.1.0.9/24", "10.9.9.9/24"]
    assert Store(cfg.state_dir).get(ADDRESSES)[1] == {"10.1.0.9/24"}


def test_the_journal_outlives_the_agent(cfg):
    k = old_kernel()
    converge(Reconciler(cfg, k, scan_devices=tuple))
    move_address(cfg)
    converge(Reconciler(cfg, k, scan_devices=tuple))  # a restarted agent: read from disk
    assert on(k, 1) == ["10.1.0.9/24", "10.9.9.9/24"]


def test_without_the_journal_nothing_without_a_mark_is_ever_removed(cfg):
    k = old_kernel()
    converge(Reconciler(cfg, k, scan_devices=tuple))
    (cfg.state_dir / ADDRESSES.name).unlink()
    move_address(cfg)
    converge(Reconciler(cfg, k, scan_devices=tuple))
    assert on(k, 1) == ["10.1.0.5/24", "10.1.0.9/24", "10.9.9.9/24"]  # the safe side: kept
    assert not any(isinstance(x, s.RemoveAddress) for x in k.applied)


def test_an_address_someone_else_removed_leaves_the_journal(cfg):
    k = old_kernel()
    r = Reconciler(cfg, k, scan_devices=tuple)
    converge(r)
    k.state = NetState(
        k.state.links, tuple(a for a in k.state.addresses if a.address != "10.1.0.6/24")
    )
    r.stale_links = True
    converge(r)  # kvdev puts it back: journaled again, once
    assert Store(cfg.state_dir).get(ADDRESSES)[2] == {"10.1.0.6/24"}


def test_a_kernel_that_keeps_the_mark_needs_no_journal(cfg):
    k = old_kernel(ifa_proto=True)
    r = Reconciler(cfg, k, scan_devices=tuple)
    converge(r)
    move_address(cfg)
    converge(r)
    assert on(k, 1) == ["10.1.0.9/24", "10.9.9.9/24"]
    assert not (cfg.state_dir / ADDRESSES.name).exists()


def test_a_damaged_journal_is_set_aside_and_nothing_unmarked_is_removed(cfg):
    cfg.state_dir.mkdir()
    (cfg.state_dir / ADDRESSES.name).write_text('{"1": ["10.9.9.9/24"')
    k = old_kernel()
    converge(Reconciler(cfg, k, scan_devices=tuple))
    assert "10.9.9.9/24" in on(k, 1)
    assert (cfg.state_dir / f"{ADDRESSES.name}.corrupt").exists()
