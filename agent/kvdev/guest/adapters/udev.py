"""Guest devices as the kernel's device model shows them, read through libudev (pyudev).

The only module that imports pyudev. It owns:

* ``scan()``: one pass over sysfs that turns every PCI function, and every network interface
  without a PCI ancestor, into ``GuestDevice`` values. It reads sysfs only (no udev database,
  no ``/dev``, no ``/run``), so it answers the same with or without udevd. Devices that vanish
  while it runs are left out, never reported half-read.
* ``UdevMonitor``: a non-blocking uevent monitor for the ``pci`` and ``net`` subsystems. Its
  events are hints that something changed; the caller re-scans rather than applying them.

It changes nothing, and does not combine the scan with netlink's view (``inventory`` does).
The network interfaces it sees are those of the network namespace that mounted ``/sys``.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import pyudev

from kvdev._records import compared
from kvdev.errors import RetryableError
from kvdev.guest.core.inventory import LOOPBACK, device_order
from kvdev.guest.core.observed import GuestDevice, Nic
from kvdev.schema.fields import normalize_mac, normalize_pci_address

Source = Literal["udev", "kernel"]

SUBSYSTEMS = ("pci", "net")
UDEVD_CONTROL = "/run/udev/control"  # exists while udevd runs
VFIO_PCI = "vfio-pci"
NOIOMMU_GROUP = "vfio-noiommu"  # the name vfio gives the fake IOMMU groups of no-IOMMU mode
OVERFLOW = "overflow"  # UdevEvent.action when the kernel dropped events

_ID_DIGITS = 4  # PCI vendor and device IDs
_CLASS_DIGITS = 6  # PCI class, subclass, programming interface

# --------------------------------------------------------------------------- sysfs values


def _hex_id(text: str | None, digits: int) -> str | None:
    """``0x1af4`` as ``1af4`` (``digits`` wide); None when missing or not such a number."""
    if text is None:
        return None
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return f"{value:0{digits}x}" if 0 <= value < 16**digits else None


def _numa_node(text: str | None) -> int | None:
    """The NUMA node; None when missing, unparsable or -1 (no node)."""
    try:
        node = int(text or "")
    except ValueError:
        return None
    return node if node >= 0 else None


def _mac(text: str | None) -> str | None:
    """A normalized MAC; None for no address or one of another shape (tunnels have IPv4)."""
    try:
        return normalize_mac(text) if text else None
    except ValueError:
        return None


def _owner(path: str, owners: Container[str]) -> str | None:
    """The nearest of ``owners`` that is ``path`` or a directory above it."""
    head = path
    while head:
        if head in owners:
            return head
        head = head.rpartition("/")[0]
    return None


def _vfio_nodes(driver: str | None, device_dir: Path) -> tuple[str, ...]:
    """The VFIO group node of a function bound to vfio-pci, from its ``iommu_group`` link.

    Groups that vfio made up in no-IOMMU mode are named ``vfio-noiommu`` and get
    ``/dev/vfio/noiommu-<group>``.
    """
    if driver != VFIO_PCI:
        return ()
    link = device_dir / "iommu_group"
    try:
        group = link.readlink().name
    except OSError:
        return ()  # no IOMMU group (yet), or the function is gone
    try:
        name = (link / "name").read_text(encoding="utf-8").strip()
    except OSError:
        name = ""  # groups of a real IOMMU have no name attribute
    prefix = "noiommu-" if name == NOIOMMU_GROUP else ""
    return (f"/dev/vfio/{prefix}{group}",)


# --------------------------------------------------------------------------- scan


def _attr(device: pyudev.Device, name: str) -> str | None:
    value: bytes | None = device.attributes.get(name)
    return None if value is None else value.decode("utf-8", "replace").strip()


def _nic(device: pyudev.Device) -> Nic | None:
    """The network interface, or None when it vanished while being read.

    Every net device has an ``address`` file (empty, or an IPv4 address for some tunnels), so
    one that cannot be read means the link is gone, also when a link of the same name (a new
    one, the same sysfs path) answers the ``ifindex`` read after it. The udev event of the
    change wakes the next pass, which sees what is there then.
    """
    name: str = device.sys_name
    address = _attr(device, "address")
    if address is None:
        return None
    try:
        ifindex = int(_attr(device, "ifindex") or "")
    except ValueError:
        return None
    return Nic(ifname=name, ifindex=ifindex, mac=_mac(address))


@dataclass
class _Found:
    """What the subtree of one PCI function holds."""

    dev_nodes: set[str] = field(default_factory=set)
    nics: list[Nic] = field(default_factory=list)


def _function(device: pyudev.Device, found: _Found, sys_root: Path) -> GuestDevice | None:
    """The PCI function, or None when it vanished (its IDs, read last, are gone)."""
    try:
        address = normalize_pci_address(device.sys_name)
    except ValueError:
        return None
    driver: str | None = device.driver
    device_path: str = device.device_path
    vfio = _vfio_nodes(driver, sys_root / device_path.lstrip("/"))
    numa_node = _numa_node(_attr(device, "numa_node"))
    class_id = _hex_id(_attr(device, "class"), _CLASS_DIGITS)
    product = _hex_id(_attr(device, "device"), _ID_DIGITS)
    vendor = _hex_id(_attr(device, "vendor"), _ID_DIGITS)
    if vendor is None or product is None or class_id is None:
        return None
    return GuestDevice(
        pci_address=address,
        vendor_id=vendor,
        device_id=product,
        class_id=class_id,
        driver=driver,
        numa_node=numa_node,
        dev_nodes=tuple(sorted(found.dev_nodes.union(vfio))),
        nics=tuple(sorted(found.nics, key=lambda nic: nic.ifindex)),
    )


@functools.cache
def _context() -> pyudev.Context:
    """One libudev context for the process (creating one runs ``ldconfig -p``)."""
    return pyudev.Context()


def scan(
    context: pyudev.Context | None = None, sys_root: str | None = None
) -> tuple[GuestDevice, ...]:
    """Every PCI function with its NICs and device nodes, then every other NIC but ``lo``.

    Args:
        context: the libudev context to enumerate with (a new one by default).
        sys_root: where sysfs is mounted, for the few reads libudev does not offer (the
            ``iommu_group`` link); the context's sysfs path by default. libudev itself always
            enumerates the sysfs at its compiled-in path.

    Returns:
        PCI functions by address, then the interfaces without a PCI ancestor by ifindex
        (each as ``GuestDevice(pci_address=None, nics=(nic,))``).

    Raises:
        RetryableError: sysfs is not there, or libudev could not enumerate it.
    """
    ctx = context if context is not None else _context()
    root = Path(sys_root if sys_root is not None else ctx.sys_path)
    if not (root / "devices").is_dir():
        raise RetryableError(f"no sysfs at {root}: cannot list devices")
    try:
        functions = {d.device_path: d for d in ctx.list_devices(subsystem="pci")}
        found = {path: _Found() for path in functions}
        for path, device in functions.items():
            parent = path.rpartition("/")[0]
            if _owner(parent, functions) is not None:
                continue  # below a bridge: enumerated with the bridge's subtree
            for member in ctx.list_devices().match_parent(device):
                _collect(member, found, functions)
        bare = [
            GuestDevice(pci_address=None, nics=(nic,))
            for d in ctx.list_devices(subsystem="net")
            if d.sys_name != LOOPBACK and _owner(d.device_path, functions) is None
            if (nic := _nic(d)) is not None
        ]
        pci = [
            g
            for path, device in functions.items()
            if (g := _function(device, found[path], root)) is not None
        ]
    except OSError as e:
        raise RetryableError(f"cannot enumerate devices in {root}: {e.strerror or e}") from e
    pci.sort(key=device_order)
    bare.sort(key=device_order)
    return (*pci, *bare)


def read_bare_nic(name: str, context: pyudev.Context | None = None) -> Nic | bool:
    """The network interface ``name`` when it has no PCI ancestor (one sysfs device read).

    False when there is no such interface (it went), True when it belongs to a PCI function
    (whose ``GuestDevice`` only a ``scan`` builds).
    """
    ctx = context if context is not None else _context()
    try:
        device = pyudev.Devices.from_name(ctx, "net", name)
    except (pyudev.DeviceNotFoundError, OSError):
        return False
    if device.find_parent("pci") is not None:
        return True
    nic = _nic(device)
    return nic if nic is not None else False


def _collect(member: pyudev.Device, found: dict[str, _Found], functions: Container[str]) -> None:
    """File a device of a PCI subtree under its nearest PCI function."""
    owner = _owner(member.device_path, functions)
    if owner is None:
        return
    node: str | None = member.device_node
    if node:
        found[owner].dev_nodes.add(node)
    if member.subsystem == "net" and (nic := _nic(member)) is not None:
        found[owner].nics.append(nic)


# --------------------------------------------------------------------------- monitor


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class UdevEvent:
    """One uevent, as a hint that a device changed (re-scan to learn how).

    Attributes:
        action: the kernel's action (``add``, ``remove``, ``change``, ``move``, ``bind``,
            ``unbind`` ...), or ``OVERFLOW`` when the kernel dropped events because the socket
            buffer was full: then anything may have changed.
        subsystem: ``pci`` or ``net`` (empty for ``OVERFLOW``).
        sys_name: the device's name in sysfs (``0000:00:03.0``, ``eth0``).
        initialized: udevd has finished with the device (renamed it, ran its rules). Always
            False for the kernel source.
    """

    action: str
    subsystem: str
    sys_name: str
    initialized: bool


def default_source() -> Source:
    """``udev`` while udevd runs (events after its rules, e.g. renames), else ``kernel``."""
    return "udev" if Path(UDEVD_CONTROL).exists() else "kernel"


def _take_socket_error(monitor: pyudev.Monitor) -> int:
    """The socket's pending error number (reading it clears it); 0 for none or unreadable."""
    try:
        with socket.socket(fileno=os.dup(monitor.fileno())) as sock:
            return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    except OSError:
        return 0


class UdevMonitor:
    """A non-blocking uevent monitor for PCI and network devices; receiving from creation on.

    Open it before the first scan so that no change falls between the two. Use as a context
    manager, or call ``close()``.

    Args:
        context: the libudev context (a new one by default).
        source: ``udev`` or ``kernel``; ``default_source()`` when None.
        receive_buffer: bytes the kernel may queue for this socket before it drops events
            (needs CAP_NET_ADMIN); the system default when None.

    Raises:
        RetryableError: the netlink socket could not be opened.
    """

    def __init__(
        self,
        context: pyudev.Context | None = None,
        source: Source | None = None,
        receive_buffer: int | None = None,
    ) -> None:
        ctx = context if context is not None else pyudev.Context()
        self.source: Source = source if source is not None else default_source()
        try:
            monitor = pyudev.Monitor.from_netlink(ctx, source=self.source)
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)
            if receive_buffer is not None:
                monitor.set_receive_buffer_size(receive_buffer)
            monitor.start()
        except OSError as e:
            raise RetryableError(
                f"cannot open a {self.source} uevent monitor: {e.strerror or e}"
            ) from e
        self._monitor: pyudev.Monitor | None = monitor

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _open(self) -> pyudev.Monitor:
        if self._monitor is None:
            raise ValueError("the udev monitor is closed")
        return self._monitor

    def fileno(self) -> int:
        """The socket to wait on (readable when ``drain()`` has something)."""
        fd: int = self._open().fileno()
        return fd

    def drain(self) -> list[UdevEvent]:
        """Every event received so far, oldest first; never blocks.

        Raises:
            RetryableError: receiving failed other than by overflow (reopen the monitor).
        """
        monitor = self._open()
        events: list[UdevEvent] = []
        while True:
            try:
                device = monitor.poll(timeout=0)
            except OSError as e:
                # pyudev reports POLLERR without the error: fetch (and so clear) it.
                if _take_socket_error(monitor) != errno.ENOBUFS:
                    raise RetryableError(f"uevent monitor: {e.strerror or e}") from e
                events.append(UdevEvent(OVERFLOW, "", "", initialized=False))
                continue
            if device is None:
                return events
            events.append(
                UdevEvent(
                    action=device.action or "",
                    subsystem=device.subsystem or "",
                    sys_name=device.sys_name,
                    initialized=bool(device.is_initialized),
                )
            )

    def close(self) -> None:
        """Close the socket (libudev closes it with its last reference); idempotent."""
        self._monitor = None
