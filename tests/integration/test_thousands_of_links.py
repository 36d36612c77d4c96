"""A guest with thousands of links: a pass after unrelated link events reads only those links.

Regression (issue 23 §2, "thousands of links"): every udev event made the next pass rescan
every device of the guest (libudev enumerating all of sysfs: 1.4 s with 2,000 macvlans, and
again for each of 10 unrelated link adds). ``DeviceCache`` brings the last scan up to date per
event; this counts the work (full scans, interface reads, libudev enumerations) of a real
cache over real uevents in a namespace holding 2,000 macvlans, and checks the answer equals a
full scan's. Work is bounded by counts, never by time.
"""

import json
import os
import subprocess
import sys

import pytest

from agentlab import ip

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

LINKS, ADDED = 2000, 10

PROBE = """
import json, select, subprocess, sys
import pyudev
from kvdev.guest.adapters import udev
from kvdev.guest.adapters.devicecache import DeviceCache

listed = [0]
enumerate_all = pyudev.Context.list_devices
def counting(self, **match):
    listed[0] += 1
    return enumerate_all(self, **match)
pyudev.Context.list_devices = counting

with udev.UdevMonitor(source="kernel") as monitor:
    cache = DeviceCache(monitor)
    first = cache.devices()
    before = listed[0]
    lines = "".join(f"link add x{i} link u0 type macvlan\\n" for i in range(int(sys.argv[1])))
    subprocess.run(["ip", "-batch", "-"], input=lines, text=True, check=True)
    adds = 0
    while adds < int(sys.argv[1]):  # bounded: select gives up after 60 s without an event
        if not select.select([cache], [], [], 60)[0]:
            raise SystemExit("no uevent within 60 s")
        adds += sum(e.action == "add" and e.subsystem == "net" for e in cache.drain())
    after = cache.devices()
    work = {"scans": cache.scans, "reads": cache.reads, "enumerations": listed[0] - before}
    print(json.dumps({**work, "first": len(first), "after": len(after),
                      "same_as_a_scan": after == udev.scan()}))
"""


def test_a_pass_after_ten_unrelated_link_adds_reads_ten_links_not_two_thousand(netns):
    ns = netns
    ip(ns, "link", "add", "u0", "type", "veth", "peer", "name", "up0")
    batch = "".join(f"link add m{i} link u0 type macvlan\n" for i in range(LINKS))
    subprocess.run(["ip", "-n", ns, "-batch", "-"], input=batch, text=True, check=True)
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-c", PROBE, str(ADDED)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    work = json.loads(done.stdout)
    print(f"work after {ADDED} link adds with {LINKS} links: {work}")
    assert work["first"] >= LINKS + 2  # the macvlans, u0, up0 (no lo)
    assert work["after"] == work["first"] + ADDED
    assert work["same_as_a_scan"] is True
    assert work["scans"] == 1  # the first one only
    assert work["reads"] == ADDED  # one read per link that had an event
    assert work["enumerations"] == 0  # nothing enumerated all of sysfs again


STATS_PROBE = """
import json, sys
import psutil
from kvdev.guest.adapters import procstats

opened = []
sys.addaudithook(lambda event, args: event == "open" and opened.append(args[0]))
stats = procstats.interfaces(["u0", "m7", "gone0"])
count = len(opened)
theirs = psutil.net_io_counters(pernic=True, nowrap=True)["u0"]
print(json.dumps({"opens": count, "names": sorted(stats),
                  "same": stats["u0"]["rxPackets"] == theirs.packets_recv}))
"""


def test_interface_stats_read_only_the_named_interfaces_among_two_thousand(netns):
    ns = netns
    ip(ns, "link", "add", "u0", "type", "veth", "peer", "name", "up0")
    batch = "".join(f"link add m{i} link u0 type macvlan\n" for i in range(LINKS))
    subprocess.run(["ip", "-n", ns, "-batch", "-"], input=batch, text=True, check=True)
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-c", STATS_PROBE]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    work = json.loads(done.stdout)
    print(f"interface stats of 2 named links among {LINKS}: {work}")
    assert work["names"] == ["m7", "u0"]  # a name that is gone is left out
    assert work["opens"] <= 3 * 10  # ten sysfs reads per name asked, whatever the links
    assert work["same"] is True
