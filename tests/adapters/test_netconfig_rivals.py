"""adapters.netconfig's ifcfg and cloud-init hotplug readers, and core.rivals on what they find.

An ifcfg-rh file naming a NIC kvdev configures, and cloud-init's network hotplug switched on,
each become a warning condition; kvdev still configures the NIC.
"""

import pytest
from test_netconfig import write

from kvdev.guest.adapters import netconfig
from kvdev.guest.core import rivals
from kvdev.guest.core.primary import Configured

MAC = "02:00:00:3b:02:01"


def test_ifcfg_files_name_their_nic_by_device_hwaddr_or_file_name(tmp_path):
    d = "etc/sysconfig/network-scripts"
    a = write(
        tmp_path, f"{d}/ifcfg-eth1", f'DEVICE=data0\nHWADDR="{MAC.upper()}"\nBOOTPROTO=none\n'
    )
    b = write(tmp_path, f"{d}/ifcfg-eth2", "BOOTPROTO=dhcp\nONBOOT=yes\n")
    write(tmp_path, f"{d}/ifcfg-lo", "DEVICE=lo\n")
    write(tmp_path, f"{d}/route-eth1", "10.0.0.0/8 via 10.1.0.1\n")
    named, problems = netconfig.ifcfg(tmp_path)
    assert set(named) == {Configured(a, "data0", MAC), Configured(b, "eth2", None)}
    assert problems == ()


def test_no_ifcfg_directory_names_nothing(tmp_path):
    assert netconfig.ifcfg(tmp_path) == ((), ())


@pytest.mark.parametrize(
    ("rel", "text"),
    [
        (
            "etc/cloud/cloud.cfg.d/10-hotplug.cfg",
            "updates:\n  network:\n    when: [boot, hotplug]\n",
        ),
        (
            "etc/cloud/cloud.cfg",
            "updates:\n  network:\n    when:\n      - boot-new-instance\n      - hotplug\n",
        ),
        (
            "var/lib/cloud/instance/cloud-config.txt",
            "#cloud-config\nupdates: {network: {when: ['hotplug']}}\n",
        ),
        ("var/lib/cloud/hotplug.enabled", ""),
    ],
)
def test_cloud_init_hotplug_is_found_where_cloud_init_reads_it(tmp_path, rel, text):
    path = write(tmp_path, rel, text)
    assert netconfig.cloud_init_hotplug(tmp_path) == (path, ())


def test_cloud_init_without_hotplug_is_no_rival(tmp_path):
    write(tmp_path, "etc/cloud/cloud.cfg.d/10-x.cfg", "updates:\n  network:\n    when: [boot]\n")
    write(tmp_path, "etc/cloud/cloud.cfg", "datasource_list: [NoCloud]\n")
    assert netconfig.cloud_init_hotplug(tmp_path) == (None, ())


def test_findings_name_the_managed_nics_only():
    named = (Configured("/etc/sysconfig/network-scripts/ifcfg-x", None, MAC),)
    found = rivals.findings([("data0", MAC), ("data1", "02:00:00:3b:02:02")], named, "/c.cfg")
    assert [kind for kind, _ in found] == ["IfcfgNamesManagedNic", "CloudInitHotplug"]
    assert "ifcfg-x names data0, which kvdev configures" in found[0][1]
    assert "NM_CONTROLLED=no" in found[0][1]
    assert "(data0, data1)" in found[1][1]
    assert rivals.findings([], named, "/c.cfg") == []  # kvdev configures nothing: no fight
