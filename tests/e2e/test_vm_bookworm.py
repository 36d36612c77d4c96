"""kvdev on Debian 12 (bookworm), the oldest supported row, in one QEMU boot.

The same .deb the trixie boots install (one Architecture: all package for both suites, built
in the trixie chroot) goes into a bookworm guest made like the trixie one (build-image.sh
--suite bookworm): Python 3.11 and bookworm's own python3-* packages (watchdog 2.2,
pyudev 0.24.0, psutil 5.9.4, h11 0.14, prometheus-client 0.16). One phase: the service runs
from the package; the e2e bundle (kvdev-host prepare + bundle, as in test_vm.py) is
configured on every NIC it describes, all present at boot; ``kvdev status`` exits 0
(converged). The trixie boots cover the rest (live change, hot-plug, neighbours, KubeVirt).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from e2e_nics import CLAIM, NIC_HOT, NIC_MAC, NIC_PCI, NIC_SPARE, device, link
from e2e_run import Run, bundle_boot

pytestmark = pytest.mark.e2e

ROWS = (
    ("bookworm: image build (or cache hit)", "image"),
    ("bookworm: run disk: overlay + dpkg -i + mkfs", "disk"),
    ("bookworm: QEMU start -> guest runner started", "booted"),
    ("bookworm: QEMU start -> converged (host clock)", "converged"),
    ("bookworm: VM lifetime (start to power-off)", "vm"),
    ("bookworm: e2e total", "total"),
)


@pytest.fixture(scope="module")
def run(e2e_summary) -> Iterator[Run]:
    """The bookworm image, a disk with the .deb, the e2e bundle; boot with all four NICs."""
    nics = [NIC_PCI, NIC_MAC, NIC_SPARE, NIC_HOT]
    with bundle_boot(e2e_summary, ROWS, nics, suite="bookworm", label="bookworm: ") as r:
        yield r


def test_bookworm_service_configures_the_bundle(run):
    run.times["booted"] = run.wait_booted()
    run.phase(
        "bookworm: service from the package; every described NIC configured; status exit 0",
        [
            {"kind": "service", "package": run.package},
            {"kind": "status", "minGeneration": {CLAIM: 1}, "converged": True, "exit": 0},
            device(NIC_PCI, "Configured", interface="dpci0"),
            link(NIC_PCI, "dpci0", 1400, ["192.0.2.10/24"]),
            device(NIC_MAC, "Configured", interface="dmac0"),
            link(NIC_MAC, "dmac0", 9000, ["198.51.100.11/24", "2001:db8:e2e::11/64"]),
            device(NIC_HOT, "Configured", interface="dhot0"),
            link(NIC_HOT, "dhot0", 1500, ["203.0.113.18/24"]),
            {
                "kind": "unmanaged",
                "mac": NIC_SPARE.mac,
                "ifname": NIC_SPARE.kernel_name,
                "mtu": 1500,
            },
        ],
        final=True,
    )
    run.times["converged"] = time.monotonic() - run.vm.started
