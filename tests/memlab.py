"""An in-memory guest for ``Reconciler`` tests: the bundled example over a ``MemoryNetlink``.

The example tree and config drive are copied into the test's tmp dir (state and ``.link``
files go there too); the kernel holds the example's three NICs as veth links, the kind the
agent is told to match, as in the network-namespace tests.
"""

import shutil
from pathlib import Path

from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.core.observed import Address, Link, NetState, Route
from netlinkdouble import MemoryNetlink

EXAMPLES = Path(__file__).resolve().parents[1] / "packaging" / "examples"
MACS = {1: "02:00:00:3b:02:01", 2: "02:00:00:3b:02:02", 3: "0c:42:a1:5e:00:01"}
GPU = "resourceclaims/vm1-devices/gpu"  # pinned to guest PCI 0000:09:00.0: Missing here


def example_config(tmp_path: Path, *, gpu: bool = True) -> AgentConfig:
    """The example, copied into ``tmp_path``; without its GPU when ``gpu`` is False."""
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES / "dra-device-attributes", tree)
    if not gpu:
        shutil.rmtree(tree / GPU)
    drive = tmp_path / "meta_data.json"
    shutil.copy(EXAMPLES / "config-drive/openstack/latest/meta_data.json", drive)
    return AgentConfig(
        metadata_root=tree,
        config_drive=drive,
        state_dir=tmp_path / "state",
        config_root=tmp_path / "guest-root",  # no network configuration of the guest's own
        link_dir=tmp_path / "network",
        match_kinds=("veth",),
    )


def example_kernel(
    *extra: Link,
    addresses: tuple[Address, ...] = (),
    routes: tuple[Route, ...] = (),
    ifa_proto: bool = True,
    leave_out: frozenset[int] = frozenset(),
    up: bool = False,
) -> MemoryNetlink:
    """The example's NICs (``eth1``..``eth3``, but those in ``leave_out``) and ``extra``."""
    links = tuple(
        Link(ifindex=i, ifname=f"eth{i}", mac=mac, kind="veth", max_mtu=65535, up=up)
        for i, mac in MACS.items()
        if i not in leave_out
    )
    return MemoryNetlink(NetState((*links, *extra), addresses, routes), ifa_proto=ifa_proto)
