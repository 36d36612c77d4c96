"""The observe stage of a pass: the kernel's links, the devices, the guest's own configuration.

The netlink dumps are redone only when netlink events (or the agent's own changes) say the
state may differ (``stale_links``), the udev scan and the guest's network configuration only
on udev events (``stale_devices``): the kernel announces every change there, and an overrun
counts as an event. A problem in the guest's configuration is logged when it first appears,
not again on every re-read while it lasts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvdev.guest.adapters import netconfig
from kvdev.guest.core import primary
from kvdev.guest.core.observed import GuestDevice, NetState

log = logging.getLogger("kvdev.agent")


@dataclass
class Observer:
    """What the last observation saw, and which part of it is stale."""

    stale_devices: bool = True  # set by udev events: the next pass rescans devices
    stale_links: bool = True  # set by netlink events and by our own changes: re-dump
    devices: tuple[GuestDevice, ...] = ()
    state: NetState = field(default_factory=NetState)
    configured: tuple[primary.Configured, ...] | None = None  # the guest's network config
    auto: primary.AutoDefault | None = None  # NetworkManager's auto-default, as last read
    # ifcfg files' NICs and where cloud-init's network hotplug is on (core.rivals judges them)
    rival_config: tuple[tuple[primary.Configured, ...], str | None] = ((), None)
    keeps_proto: bool = False  # an address showed a protocol: the kernel keeps IFA_PROTO
    _problems: tuple[str, ...] = ()  # what the configuration's last read said (logged once)

    def observe(
        self,
        read_state: Callable[[], NetState],
        scan_devices: Callable[[], tuple[GuestDevice, ...]],
        config_root: Path,
    ) -> None:
        """Observe again what is stale (and the guest's configuration the first time)."""
        if self.stale_links:
            self.state = read_state()
            self.stale_links = False
            self.keeps_proto = self.keeps_proto or any(
                a.proto is not None for a in self.state.addresses
            )
        if self.stale_devices or self.configured is None:
            self.configured = self._read_netconfig(config_root)
        if self.stale_devices:
            self.devices = scan_devices()
            self.stale_devices = False

    def dns_servers(self, config_root: Path) -> tuple[str, ...]:
        """The guest's DNS servers (``safety.Guard``): read on every pass, a few small files."""
        servers, problems = netconfig.dns_servers(config_root)
        for problem in problems:
            if problem not in self._problems:
                log.warning("the guest's resolver configuration: %s", problem)
        return servers

    def _read_netconfig(self, config_root: Path) -> tuple[primary.Configured, ...]:
        """The NICs the guest's own network configuration names."""
        configured, problems = netconfig.read(config_root)
        self.auto, nm_problems = netconfig.auto_default(config_root)
        problems += nm_problems
        named, hotplug, more = netconfig.rival_config(config_root)
        self.rival_config, problems = (named, hotplug), problems + more
        for problem in problems:
            if problem not in self._problems:
                log.warning("the guest's network configuration: %s", problem)
        self._problems = problems
        return configured
