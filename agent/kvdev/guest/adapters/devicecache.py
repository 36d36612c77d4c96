"""The guest's devices between udev events: a full ``udev.scan`` only when one is needed.

``DeviceCache`` sits between the uevent monitor and the reconciler: ``drain`` passes the
monitor's events on (the loop sees a ``Waitable``) and notes them; ``devices`` (the
reconciler's ``scan_devices``) answers from the last scan, brought up to date per event. An
event of a network interface without a PCI ancestor (a veth, a macvlan, a bridge: the
thousands of links a guest may hold) costs one read of that interface; anything else -- a
PCI event, an interface of a PCI function, an overflow, an interface the cache cannot place --
makes the next ``devices`` a full scan, as before, and so does a ``devices`` with no event
noted since the last (the reconciler asks again for a SIGHUP or a retry), or with more names
noted than a quarter of the interfaces known (a mass churn: one scan is then cheaper). So a
pass after N unrelated link events reads N interfaces, not every device of the guest.

It decides nothing; what a device is, is ``udev``'s reading.
"""

from __future__ import annotations

from collections.abc import Callable

from kvdev.guest.adapters import udev
from kvdev.guest.core.observed import GuestDevice, Nic


class DeviceCache:
    """The last scan and the events since; see the module docstring."""

    def __init__(
        self,
        monitor: udev.UdevMonitor | None = None,
        scan: Callable[[], tuple[GuestDevice, ...]] = udev.scan,
        read_nic: Callable[[str], Nic | bool] = udev.read_bare_nic,
    ) -> None:
        self.monitor = monitor
        self._scan, self._read_nic = scan, read_nic
        self._pci: tuple[GuestDevice, ...] = ()
        self._bare: dict[int, GuestDevice] = {}  # by ifindex
        self._names: dict[str, int] = {}  # bare interface name -> ifindex
        self._pending: set[str] = set()  # bare interface names with events since
        self._full = True  # the next ``devices`` scans everything
        self._answer: tuple[GuestDevice, ...] | None = None
        self.scans = self.reads = 0  # work done, for tests and benchmarks

    def fileno(self) -> int:
        """The monitor's descriptor (the loop selects on it)."""
        assert self.monitor is not None
        return self.monitor.fileno()

    def drain(self) -> list[udev.UdevEvent]:
        """The monitor's events, noted for the next ``devices``."""
        assert self.monitor is not None
        events = self.monitor.drain()
        self.note(events)
        return events

    def note(self, events: list[udev.UdevEvent]) -> None:
        """Take ``events`` into account at the next ``devices``."""
        for e in events:
            if e.action == udev.OVERFLOW or e.subsystem != "net" or self._full:
                self._full = True
                continue
            self._pending.add(e.sys_name)

    def devices(self) -> tuple[GuestDevice, ...]:
        """Every guest device, as ``udev.scan`` would answer now.

        Asked with no event noted since the last answer (SIGHUP, a retry, ``POST
        /v1/reconcile``: the reconciler re-observes everything then), it scans everything.
        """
        if not self._pending or len(self._pending) > max(64, len(self._bare) // 4):
            self._full = True  # no event (redo all), or so many that one scan is cheaper
        if not self._full:
            for name in sorted(self._pending):
                if not self._update(name):
                    self._full = True
                    break
        self._pending.clear()
        if self._full:
            self._rescan()
        if self._answer is None:
            bare = (g for _, g in sorted(self._bare.items()))  # device_order: by ifindex
            self._answer = (*self._pci, *bare)
        return self._answer

    def _update(self, name: str) -> bool:
        """Bring one bare interface up to date; False when only a full scan can."""
        self.reads += 1
        self._answer = None
        found = self._read_nic(name)
        if found is True:  # a PCI function's interface
            return False
        old = self._names.pop(name, None)
        if old is not None:
            self._bare.pop(old, None)
        if found is False:
            return old is not None or name not in self._pci_names()
        stale = self._bare.pop(found.ifindex, None)  # renamed: its old name goes
        if stale is not None:
            self._names.pop(stale.nics[0].ifname, None)
        self._bare[found.ifindex] = GuestDevice(pci_address=None, nics=(found,))
        self._names[name] = found.ifindex
        return True

    def _pci_names(self) -> set[str]:
        return {n.ifname for g in self._pci for n in g.nics}

    def _rescan(self) -> None:
        self.scans += 1
        every = self._scan()
        self._pci = tuple(g for g in every if g.pci_address)
        self._bare = {g.nics[0].ifindex: g for g in every if not g.pci_address and g.nics}
        self._names = {g.nics[0].ifname: i for i, g in self._bare.items()}
        self._full, self._answer = False, None
