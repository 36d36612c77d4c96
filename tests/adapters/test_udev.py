"""guest.udev against the real sysfs and the kernel's uevents (no udevd needed).

Network tests run in a throwaway network namespace through ``ip netns exec``, which also
remounts /sys so that sysfs shows that namespace's links; the code under test therefore runs
in a child Python process and reports back as JSON.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from kvdev.errors import RetryableError
from kvdev.guest.adapters import udev

SYS = Path("/sys")
PCI_DEVICES = SYS / "bus" / "pci" / "devices"
CLASS_NET = SYS / "class" / "net"
VA, VB = "02:6b:76:00:00:0a", "02:6b:76:00:00:0b"

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for ip netns")


def read(path: Path) -> str:
    return path.read_text().strip()


# --------------------------------------------------------------------------- host sysfs


def test_every_pci_function_as_sysfs_says():
    by_address = {d.pci_address: d for d in udev.scan() if d.pci_address}
    assert sorted(by_address) == sorted(os.listdir(PCI_DEVICES))
    for name in os.listdir(PCI_DEVICES):
        here = PCI_DEVICES / name
        got = by_address[name]
        assert got.vendor_id == read(here / "vendor").removeprefix("0x")
        assert got.device_id == read(here / "device").removeprefix("0x")
        assert got.class_id == read(here / "class").removeprefix("0x")
        driver = here / "driver"
        assert got.driver == (driver.readlink().name if driver.is_symlink() else None)
        numa = int(read(here / "numa_node")) if (here / "numa_node").exists() else -1
        assert got.numa_node == (numa if numa >= 0 else None)


def test_pci_functions_come_first_sorted_then_bare_by_ifindex():
    devices = udev.scan()
    pci = [d.pci_address for d in devices if d.pci_address]
    assert pci == sorted(pci)
    assert [d.pci_address for d in devices[: len(pci)]] == pci
    ifindexes = [d.nics[0].ifindex for d in devices[len(pci) :]]
    assert ifindexes == sorted(ifindexes)


def test_every_net_device_but_lo_once():
    devices = udev.scan()
    nics = {nic.ifname: (d, nic) for d in devices for nic in d.nics}
    assert sorted(nics) == sorted(set(os.listdir(CLASS_NET)) - {"lo"})
    for name, (device, nic) in nics.items():
        here = CLASS_NET / name
        assert nic.ifindex == int(read(here / "ifindex"))
        assert nic.mac == read(here / "address")
        real = str(here.resolve())
        if device.pci_address is None:
            assert not re.search(r"/[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]/", real)
            assert device.nics == (nic,)
        else:
            assert f"/{device.pci_address}/" in real


def sysfs_dev_nodes(function_dir: Path, functions: set[Path]) -> set[str]:
    """DEVNAME of every uevent below a function, not entering other functions."""
    nodes = set()
    for directory, dirnames, filenames in os.walk(function_dir):
        here = Path(directory)
        dirnames[:] = [n for n in dirnames if (here / n).resolve() not in functions]
        if "uevent" in filenames:
            for line in (here / "uevent").read_text().splitlines():
                if line.startswith("DEVNAME="):
                    nodes.add("/dev/" + line.removeprefix("DEVNAME="))
    return nodes


def test_dev_nodes_are_those_of_the_function_subtree():
    functions = {(PCI_DEVICES / n).resolve() for n in os.listdir(PCI_DEVICES)}
    for device in udev.scan():
        if device.pci_address:
            here = (PCI_DEVICES / device.pci_address).resolve()
            assert set(device.dev_nodes) == sysfs_dev_nodes(here, functions)
            assert list(device.dev_nodes) == sorted(device.dev_nodes)


def test_scan_without_sysfs_is_retryable(tmp_path):
    with pytest.raises(RetryableError, match="no sysfs"):
        udev.scan(sys_root=str(tmp_path))


# --------------------------------------------------------------------------- sysfs values


@pytest.mark.parametrize(
    ("text", "digits", "expected"),
    [
        ("0x1af4", 4, "1af4"),
        ("0x15B3", 4, "15b3"),
        ("0x020000", 6, "020000"),
        ("0x20000", 6, "020000"),
        ("0x10000", 4, None),
        ("-1", 4, None),
        ("", 4, None),
        (None, 4, None),
    ],
)
def test_hex_id(text, digits, expected):
    assert udev._hex_id(text, digits) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("0", 0), ("3", 3), ("-1", None), ("", None), (None, None)]
)
def test_numa_node(text, expected):
    assert udev._numa_node(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("02:AB:00:00:00:01", "02:ab:00:00:00:01"), ("10.0.0.1", None), ("", None), (None, None)],
)
def test_mac(text, expected):
    assert udev._mac(text) == expected


def test_owner_is_the_nearest_function():
    functions = {
        "/devices/pci0000:00/0000:00:1c.0",
        "/devices/pci0000:00/0000:00:1c.0/0000:01:00.0",
    }
    vf_net = "/devices/pci0000:00/0000:00:1c.0/0000:01:00.0/net/eth0"
    assert udev._owner(vf_net, functions) == "/devices/pci0000:00/0000:00:1c.0/0000:01:00.0"
    assert udev._owner("/devices/pci0000:00/0000:00:1c.0", functions) in functions
    assert udev._owner("/devices/virtual/net/veth0", functions) is None


def iommu_group(tmp_path, number, name=None):
    group = tmp_path / "kernel" / "iommu_groups" / str(number)
    group.mkdir(parents=True)
    if name is not None:
        (group / "name").write_text(name + "\n")
    function = tmp_path / "devices" / "pci0000:00" / "0000:00:05.0"
    function.mkdir(parents=True)
    (function / "iommu_group").symlink_to(os.path.relpath(group, function))
    return function


def test_vfio_group_node(tmp_path):
    function = iommu_group(tmp_path, 12)
    assert udev._vfio_nodes("vfio-pci", function) == ("/dev/vfio/12",)
    assert udev._vfio_nodes("virtio-pci", function) == ()
    assert udev._vfio_nodes("vfio-pci", tmp_path) == ()


def test_vfio_noiommu_group_node(tmp_path):
    function = iommu_group(tmp_path, 0, name="vfio-noiommu")
    assert udev._vfio_nodes("vfio-pci", function) == ("/dev/vfio/noiommu-0",)


# --------------------------------------------------------------------------- monitor


def test_default_source_follows_udevd():
    expected = "udev" if Path("/run/udev/control").exists() else "kernel"
    assert udev.default_source() == expected


def test_monitor_close():
    monitor = udev.UdevMonitor(source="kernel")
    with monitor:
        fd = monitor.fileno()
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        monitor.fileno()
    with pytest.raises(ValueError, match="closed"):
        monitor.drain()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
    monitor.close()


# --------------------------------------------------------------------------- in a namespace


@pytest.fixture
def netns():
    name = f"kvdev-u-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def run_in(netns, code):
    """Run a Python snippet inside the namespace (fresh /sys) and return its JSON output."""
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


SCAN = """
    import dataclasses, json
    from kvdev.guest.adapters import udev
    print(json.dumps([dataclasses.asdict(d) for d in udev.scan()]))
"""


@pytest.mark.netns
@root_only
def test_veth_pair_is_two_bare_devices(netns):
    add = f"link add va address {VA} type veth peer name vb address {VB}"
    subprocess.run(["ip", "-n", netns, *add.split()], check=True)
    devices = run_in(netns, SCAN)
    bare = [d for d in devices if d["pci_address"] is None]
    assert [(n["ifname"], n["mac"]) for d in bare for n in d["nics"]] in (
        [("va", VA), ("vb", VB)],
        [("vb", VB), ("va", VA)],
    )
    assert all(d["vendor_id"] is None and d["dev_nodes"] == [] for d in bare)
    ifindexes = [d["nics"][0]["ifindex"] for d in bare]
    assert ifindexes == sorted(ifindexes)
    # the namespace's sysfs shows the same PCI functions, but none of the host's links
    pci = [d for d in devices if d["pci_address"]]
    assert [d["pci_address"] for d in pci] == sorted(os.listdir(PCI_DEVICES))
    assert all(d["nics"] == [] for d in pci)


MONITOR = """
    import json, select, subprocess
    from kvdev.guest.adapters import udev

    def ip(*args):
        subprocess.run(["ip", *args], check=True)

    with udev.UdevMonitor() as monitor:
        idle = monitor.drain()
        ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
        events = []
        for _ in range(50):
            if select.select([monitor], [], [], 0.1)[0]:
                events += monitor.drain()
            if any(e.action == "add" and e.sys_name == "vb" for e in events):
                break
        after = monitor.drain()
    print(json.dumps({
        "source": monitor.source,
        "idle": [e.action for e in idle],
        "events": [[e.action, e.subsystem, e.sys_name, e.initialized] for e in events],
        "after": [e.action for e in after],
    }))
"""


@pytest.mark.netns
@root_only
@pytest.mark.skipif(Path("/run/udev/control").exists(), reason="udevd runs: source is udev")
def test_kernel_monitor_sees_a_veth_added(netns):
    seen = run_in(netns, MONITOR)
    assert seen["source"] == "kernel"
    assert seen["idle"] == []
    assert ["add", "net", "va", False] in seen["events"]
    assert ["add", "net", "vb", False] in seen["events"]
    assert seen["after"] == []


OVERFLOW = """
    import json, subprocess
    from kvdev.guest.adapters import udev

    batch = "".join(f"link add a{i} type veth peer name b{i}\\n" for i in range(30))
    with udev.UdevMonitor(source="kernel", receive_buffer=1) as monitor:
        subprocess.run(["ip", "-batch", "-"], input=batch, text=True, check=True)
        first = monitor.drain()
        second = monitor.drain()
    print(json.dumps({"first": [e.action for e in first], "second": [e.action for e in second]}))
"""


@pytest.mark.netns
@root_only
def test_monitor_reports_dropped_events_as_overflow(netns):
    seen = run_in(netns, OVERFLOW)
    assert udev.OVERFLOW in seen["first"]
    assert seen["first"].count("add") < 60
    assert seen["second"] == []


CHURN = """
    import json, subprocess
    from kvdev.guest.adapters import udev

    churn = subprocess.Popen(["sh", "-c",
        "while :; do ip link add ca type veth peer name cb; ip link del ca; done"])
    names = set()
    try:
        for _ in range(60):
            for device in udev.scan():
                names.update(nic.ifname for nic in device.nics)
                assert all(nic.mac and nic.ifindex > 0 for nic in device.nics)
    finally:
        churn.kill()
        churn.wait()
    print(json.dumps(sorted(names)))
"""


@pytest.mark.netns
@root_only
def test_scan_tolerates_links_coming_and_going(netns):
    names = run_in(netns, CHURN)
    assert set(names) <= {"ca", "cb"}
