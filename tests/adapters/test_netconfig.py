"""adapters.netconfig over a scratch config root: which NICs the guest's own configuration names.

Each format the guest's network managers read, as they lay it out; bounded reading (files per
directory, bytes per file) and unreadable files are problems, never exceptions.
"""

import pytest

from kvdev.guest.adapters import netconfig
from kvdev.guest.core.primary import AutoDefault, Configured

MAC = "52:54:00:12:34:56"


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def named(root):
    configured, problems = netconfig.read(root)
    return {(c.name, c.mac) for c in configured}, problems


def test_nothing_configured_names_nothing(tmp_path):
    assert netconfig.read(tmp_path) == ((), ())


def test_a_networkmanager_keyfile_names_by_interface_and_mac(tmp_path):
    write(
        tmp_path,
        "etc/NetworkManager/system-connections/cloud-init-eth0.nmconnection",
        f"[connection]\nid=cloud-init eth0\ntype=ethernet\ninterface-name=eth0\n\n"
        f"[ethernet]\nmac-address={MAC.upper()}\n\n[ipv4]\nmethod=auto\n",
    )
    write(tmp_path, "etc/NetworkManager/system-connections/any.nmconnection", "[connection]\n")
    assert named(tmp_path) == ({("eth0", MAC)}, ())


def test_netplan_matches_and_ids(tmp_path):
    pytest.importorskip("yaml")
    write(
        tmp_path,
        "etc/netplan/50-cloud-init.yaml",
        "network:\n  version: 2\n  ethernets:\n    id0:\n      match:\n"
        f"        macaddress: '{MAC}'\n      set-name: ens3\n      dhcp4: true\n"
        "    enp1s0:\n      dhcp4: true\n    all-en:\n      match:\n        name: 'en*'\n",
    )
    assert named(tmp_path) == ({(None, MAC), ("enp1s0", None)}, ())


def test_cloud_init_network_config_version_1_and_the_seed(tmp_path):
    pytest.importorskip("yaml")
    write(
        tmp_path,
        "var/lib/cloud/seed/nocloud/network-config",
        f"version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: '{MAC}'\n",
    )
    write(tmp_path, "etc/cloud/cloud.cfg.d/99-net.cfg", "network: {config: disabled}\n")
    assert named(tmp_path) == ({("eth0", MAC)}, ())


def test_ifupdown_interfaces_and_interfaces_d(tmp_path):
    write(tmp_path, "etc/network/interfaces", "auto lo\niface lo inet loopback\nauto eth0\n")
    write(tmp_path, "etc/network/interfaces.d/50-x", "allow-hotplug ens4\niface ens4 inet dhcp\n")
    assert named(tmp_path) == ({("eth0", None), ("ens4", None)}, ())


def test_networkd_match_lists_and_globs(tmp_path):
    write(
        tmp_path,
        "etc/systemd/network/10-uplink.network",
        f"[Match]\nMACAddress={MAC} 52:54:00:00:00:02\nName=ens3 en*\n\n[Network]\nDHCP=yes\n",
    )
    write(tmp_path, "etc/systemd/network/99-all.network", "[Match]\nName=*\n")
    found, problems = named(tmp_path)
    assert found == {(None, MAC), (None, "52:54:00:00:00:02"), ("ens3", None)}
    assert problems == ()


def test_a_networkd_file_or_profile_of_static_addresses_only_names_no_way_out(tmp_path):
    # cloud-init renders one such file per NIC of its network data (the VM e2e's neighbours
    # run): those NICs are not the guest's own way out, kvdev may take them
    write(
        tmp_path,
        "etc/systemd/network/10-cloud-init-ens16.network",
        "[Match]\nMACAddress=52:54:00:e2:00:10\nName=ens16\n\n[Network]\nAddress=10.251.0.10/24\n",
    )
    write(
        tmp_path,
        "etc/systemd/network/10-cloud-init-ens17.network",
        f"[Match]\nMACAddress={MAC}\n\n[Network]\nAddress=10.0.0.2/24\nGateway=10.0.0.1\n",
    )
    static = "[connection]\ninterface-name=ens18\n\n[ipv4]\nmethod=manual\naddress1=10.9.0.2/24\n"
    static += "\n[ipv6]\nmethod=disabled\n"
    write(tmp_path, "etc/NetworkManager/system-connections/s.nmconnection", static)
    routed = static.replace("address1=10.9.0.2/24", "address1=10.9.0.2/24,10.9.0.1")
    write(
        tmp_path,
        "etc/NetworkManager/system-connections/r.nmconnection",
        routed.replace("ens18", "ens19"),
    )
    found, problems = named(tmp_path)
    assert found == {(None, MAC), ("ens19", None)}  # the gateway's; never the static ones
    assert problems == ()


def test_bad_files_are_problems_and_the_others_still_count(tmp_path):
    pytest.importorskip("yaml")
    bad = write(tmp_path, "etc/netplan/bad.yaml", "network: [unclosed\n")
    broken = write(tmp_path, "etc/systemd/network/x.network", "no section header\n")
    write(tmp_path, "etc/network/interfaces", "auto eth0\n")
    found, problems = named(tmp_path)
    assert found == {("eth0", None)}
    assert [p.split(":", 1)[0] for p in problems] == [bad, broken]


def test_reading_is_bounded_in_files_and_bytes(tmp_path):
    for i in range(netconfig.MAX_FILES_PER_DIR + 36):
        text = f"[Match]\nName=n{i}\n\n[Network]\nDHCP=yes\n"
        write(tmp_path, f"etc/systemd/network/{i:03}.network", text)
    big = write(tmp_path, "etc/network/interfaces", "auto eth0\n" * 10_000)
    configured, problems = netconfig.read(tmp_path)
    assert len(configured) == netconfig.MAX_FILES_PER_DIR  # the first 64 files by name
    assert f"only the first {netconfig.MAX_FILES_PER_DIR} read" in problems[0]
    assert any(p.startswith(f"{big}: larger than") for p in problems)
    assert (
        Configured(str(tmp_path / "etc/systemd/network/000.network") + " [Match]", "n0")
        in configured
    )


# ------------------------------------------------------------ DNS servers, for the safety policy


def test_dns_servers_from_resolv_conf_resolved_and_networkmanager(tmp_path):
    write(tmp_path, "etc/resolv.conf", "# stub\nnameserver 127.0.0.53\noptions edns0\n")
    write(
        tmp_path,
        "run/systemd/resolve/resolv.conf",
        "nameserver 10.0.2.3\nnameserver fe80::1%eth0\nnameserver bogus\nnameserver\n",
    )
    write(tmp_path, "run/NetworkManager/resolv.conf", "nameserver 8.8.8.8\nnameserver 10.0.2.3\n")
    assert netconfig.dns_servers(tmp_path) == (("10.0.2.3", "fe80::1", "8.8.8.8"), ())


def test_dns_servers_are_bounded(tmp_path):
    write(tmp_path, "etc/resolv.conf", "".join(f"nameserver 10.9.0.{i}\n" for i in range(50)))
    write(tmp_path, "run/NetworkManager/resolv.conf", "x" * (netconfig.MAX_FILE_BYTES + 1))
    servers, problems = netconfig.dns_servers(tmp_path)
    assert len(servers) == netconfig.MAX_NAMESERVERS
    assert [p.split(":")[0] for p in problems] == [str(tmp_path / "run/NetworkManager/resolv.conf")]


# ------------------------------------------------------------ NetworkManager's auto-default


def test_without_networkmanager_there_is_no_auto_default(tmp_path):
    assert netconfig.auto_default(tmp_path) == (None, ())


def test_networkmanager_without_no_auto_default_connects_every_nic(tmp_path):
    write(tmp_path, "etc/NetworkManager/NetworkManager.conf", "[main]\nplugins=keyfile\n")
    auto, problems = netconfig.auto_default(tmp_path)
    assert auto == AutoDefault(on=True)
    assert problems == ()


def test_no_auto_default_in_conf_d_lists_nics_or_turns_it_off(tmp_path):
    write(tmp_path, "etc/NetworkManager/NetworkManager.conf", "[main]\nno-auto-default=*\n")
    write(
        tmp_path,
        "usr/lib/NetworkManager/conf.d/10-distro.conf",
        f"[main]\nno-auto-default={MAC.upper()},interface-name:eth9;mac:52:54:00:00:00:01\n",
    )
    auto, _ = netconfig.auto_default(tmp_path)  # conf.d comes after NetworkManager.conf
    assert auto == AutoDefault(
        on=True,
        macs=frozenset({MAC, "52:54:00:00:00:01"}),
        names=frozenset({"eth9"}),
    )
    write(tmp_path, "etc/NetworkManager/conf.d/90-cloud.conf", "[main]\nno-auto-default=*\n")
    assert netconfig.auto_default(tmp_path)[0] == AutoDefault(on=False)


def test_networkmanagers_runtime_state_says_which_links_it_manages(tmp_path):
    write(tmp_path, "run/NetworkManager/devices/2", "[device]\nmanaged=true\nnm-owned=false\n")
    write(tmp_path, "run/NetworkManager/devices/3", "[device]\nmanaged=false\n")
    write(tmp_path, "run/NetworkManager/devices/4", "[device]\nmanaged=true\n" + "#" * 5000)
    write(tmp_path, "run/NetworkManager/devices/5", "not ini at all\n")
    write(tmp_path, "run/NetworkManager/devices/6", "[device]\nmanaged=true\n")  # not asked
    assert netconfig.nm_managed(tmp_path, [2, 3, 4, 5, 7]) == {2}  # 4: larger than 4 KiB
    assert netconfig.nm_managed(tmp_path / "nothing", [2]) == frozenset()
