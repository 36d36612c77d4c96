"""The systemd units and system files the packages ship, checked with systemd's own tools.

``systemd-analyze verify`` and ``security --offline`` on systemd/*, sysusers.d and tmpfiles.d
applied to a scratch root, and the ties between those files and the agent's defaults (socket
path, link directory, link-file names). Tests that need a systemd tool skip when it is missing.
"""

import fnmatch
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kvdev.guest.adapters import marks as mark_files
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.core.marks import mac_mark, pci_mark
from kvdev.guest.core.planning import LINK_FILE_PREFIX

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
SERVICE = UNITS / "kvdev-agent.service"
SOCKET = UNITS / "kvdev-agent.socket"
SHARE = UNITS / "kvdev-metadata-share.service"
SYSTEM = REPO / "packaging" / "system"
MAX_EXPOSURE = 1.6  # systemd-analyze security's score; systemd-networkd's own unit scores 2.8

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=False)


def settings(path):
    """Key -> every value it is given (systemd allows a key more than once)."""
    found = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def words(values):
    return [w for value in values for w in value.split()]


def exposure(unit):
    assert ANALYZE is not None
    done = run(ANALYZE, "security", "--offline=yes", str(unit))
    found = re.search(
        rf"Overall exposure level for {re.escape(unit.name)}: (\d+\.\d+)", done.stdout
    )
    assert found, done.stdout + done.stderr
    return float(found.group(1))


@pytest.fixture
def unit_copies(tmp_path):
    """The units with ExecStart=/bin/true: verify fails when the binary is not installed."""
    for unit in sorted(UNITS.iterdir()):
        text = unit.read_text()
        text = re.sub(r"(?m)^ExecStart(Post)?=(\+?)\S+", r"ExecStart\1=\2/bin/true", text)
        (tmp_path / unit.name).write_text(text)
    return tmp_path


def verify(directory):
    assert ANALYZE is not None
    units = sorted(str(p) for p in directory.iterdir())
    return run(ANALYZE, "verify", "--man=no", *units)


@needs_analyze
def test_units_verify_cleanly(unit_copies):
    done = verify(unit_copies)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@needs_analyze
def test_verify_reports_a_misspelt_key(unit_copies):
    service = unit_copies / SERVICE.name
    service.write_text(service.read_text().replace("ProtectSystem=", "ProtectSytem="))
    assert "Unknown key 'ProtectSytem'" in verify(unit_copies).stderr


@needs_analyze
def test_agent_exposure_is_at_most_1_6():
    found = exposure(SERVICE)
    print(f"systemd-analyze security --offline: {found}")
    assert found <= MAX_EXPOSURE


@needs_analyze
def test_exposure_check_fails_for_an_unhardened_unit(tmp_path):
    bare = tmp_path / SERVICE.name
    bare.write_text("[Service]\nType=notify\nExecStart=/usr/bin/kvdev-agent\n")
    assert exposure(bare) > MAX_EXPOSURE


def test_service_is_ordered_before_the_network_managers_and_never_waits_for_the_network():
    unit = settings(SERVICE)
    assert {"network-pre.target", "NetworkManager.service", "systemd-networkd.service"} <= set(
        words(unit["Before"])
    )
    assert "network-pre.target" in words(unit["Wants"])
    assert {"systemd-udevd.service", "kvdev-agent.socket"} <= set(words(unit["After"]))
    dependencies = set(words(unit["After"] + unit["Wants"] + unit["Requires"]))
    assert "systemd-udev-settle.service" not in dependencies
    assert "network-online.target" not in SERVICE.read_text()


def test_service_is_a_watched_notify_service_with_a_minimal_privilege_set():
    unit = settings(SERVICE)
    assert unit["Type"] == ["notify"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["RestartPreventExitStatus"] == ["2"]  # a bad configuration: kvdev-agent exits 2
    assert unit["WatchdogSec"]
    assert words(unit["CapabilityBoundingSet"]) == ["CAP_NET_ADMIN"]
    assert words(unit["AmbientCapabilities"]) == ["CAP_NET_ADMIN"]
    assert (unit["User"], unit["Group"]) == (["kvdev"], ["kvdev"])  # not root
    assert words(unit["RestrictAddressFamilies"]) == ["AF_UNIX", "AF_NETLINK", "AF_INET"]
    assert unit["ProtectSystem"] == ["strict"]
    assert unit["NoNewPrivileges"] == ["yes"]
    assert "@system-service" in unit["SystemCallFilter"]


def test_units_match_the_agent_defaults():
    defaults = AgentConfig()
    socket = settings(SOCKET)
    assert socket["ListenStream"] == [str(defaults.socket)]
    assert (socket["SocketMode"], socket["SocketGroup"]) == (["0660"], ["kvdev"])
    service = settings(SERVICE)
    assert str(defaults.link_dir) in words(service["ReadWritePaths"])
    assert service["StateDirectory"] == [defaults.state_dir.name]
    assert defaults.state_dir.parent == Path("/var/lib")
    assert service["RuntimeDirectory"] == [defaults.socket.parent.name]
    assert "kvdev-agent.socket" in words(service["Requires"])


def test_udev_rule_marks_the_agents_link_files_and_mark_files_and_networkd_matches_the_mark():
    rule = (SYSTEM / "81-kvdev.rules").read_text()
    glob = re.search(r'ENV\{ID_NET_LINK_FILE\}=="([^"]+)", GOTO="kvdev_mark"', rule)
    assert glob
    link_dir = AgentConfig().link_dir
    assert fnmatch.fnmatchcase(f"{link_dir}/{LINK_FILE_PREFIX}eth1.link", glob.group(1))
    assert not fnmatch.fnmatchcase(f"{link_dir}/10-other-eth1.link", glob.group(1))
    # the mark files the agent keeps (adapters/marks.py), by the names core/marks.py gives them
    marks_dir = mark_files.directory(AgentConfig().state_dir)
    tests = re.findall(r'TEST=="([^"]+)", GOTO="kvdev_mark"', rule)
    assert tests == [f"{marks_dir}/{mac_mark('')}$attr{{address}}", f"{marks_dir}/$env{{ID_PATH}}"]
    assert pci_mark("0000:00:10.0") == "pci-0000:00:10.0"  # udev's ID_PATH of that PCI NIC
    # an empty address or ID_PATH never turns the test into "does the directory exist"
    assert 'ATTR{address}=="?*", TEST' in rule
    assert 'ENV{ID_PATH}=="pci-?*", TEST' in rule
    assert 'ENV{KVDEV_MANAGED}="1"' in rule
    assert 'ENV{NM_UNMANAGED}="1"' in rule
    assert 'ENV{ID_NET_MANAGED_BY}="io.kvdev.agent"' in rule
    network = settings(SYSTEM / "05-kvdev-unmanaged.network")
    assert (network["Property"], network["Unmanaged"]) == (["KVDEV_MANAGED=1"], ["yes"])


def test_the_marks_are_applied_as_root_before_the_unit_counts_as_started():
    service = settings(SERVICE)
    assert service["ExecStartPost"] == ["+/usr/libexec/kvdev/kvdev-udev-marks"]
    assert "kvdev-udev-marks.path" in words(service["Wants"])
    path = settings(UNITS / "kvdev-udev-marks.path")
    marks_dir = mark_files.directory(AgentConfig().state_dir)
    assert (path["PathChanged"], path["Unit"]) == ([str(marks_dir)], ["kvdev-udev-marks.service"])
    helper = settings(UNITS / "kvdev-udev-marks.service")
    assert helper["ExecStart"] == ["/usr/libexec/kvdev/kvdev-udev-marks"]
    assert helper["Type"] == ["oneshot"]


def sysusers(root):
    (root / "etc").mkdir(exist_ok=True)
    done = run("systemd-sysusers", f"--root={root}", str(SYSTEM / "kvdev.sysusers"))
    assert done.returncode == 0, done.stderr


def entries(path):
    return {line.split(":")[0]: line.split(":") for line in path.read_text().splitlines()}


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="no systemd-sysusers")
def test_sysusers_creates_the_service_user_and_the_socket_group(tmp_path):
    sysusers(tmp_path)
    users, groups = entries(tmp_path / "etc/passwd"), entries(tmp_path / "etc/group")
    assert list(groups) == settings(SOCKET)["SocketGroup"]
    assert list(users) == settings(SERVICE)["User"]
    user = users["kvdev"]
    assert user[3] == groups["kvdev"][2]  # its primary group is the socket's group
    assert (user[5], user[6]) == ("/var/lib/kvdev", "/usr/sbin/nologin")
    assert 0 < int(user[2]) < 1000  # a system user


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="no systemd-sysusers")
def test_sysusers_keeps_the_group_an_earlier_version_created(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/group").write_text("root:x:0:\nkvdev:x:777:\n")
    (tmp_path / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    sysusers(tmp_path)
    assert entries(tmp_path / "etc/passwd")["kvdev"][3] == "777"
    assert entries(tmp_path / "etc/group")["kvdev"][2] == "777"


ACL_TAGS = {1: "user::", 2: "user:", 4: "group::", 8: "group:", 0x10: "mask::", 0x20: "other::"}


def acl(path):
    """A POSIX ACL (its xattr, decoded): ``user::7``, ``user:65534:7``, ``group::5`` ..."""
    data = os.getxattr(path, "system.posix_acl_access")
    assert struct.unpack_from("<I", data)[0] == 2  # the xattr's version
    return sorted(
        f"{ACL_TAGS[tag]}{ident}:{perm}" if tag in {2, 8} else f"{ACL_TAGS[tag]}{perm}"
        for tag, perm, ident in struct.iter_unpack("<HHI", data[4:])
    )


@pytest.mark.skipif(shutil.which("systemd-tmpfiles") is None, reason="no systemd-tmpfiles")
def test_tmpfiles_creates_the_link_directory_writable_for_the_service_user(tmp_path):
    lines = (SYSTEM / "kvdev.tmpfiles").read_text()
    assert "a+ /run/systemd/network - - - - user:kvdev:rwx" in lines.splitlines()
    # libacl looks the name up through this host's NSS, not --root's /etc/passwd: the check
    # here uses a uid (nobody's) in its place; the QEMU e2e checks the name on Debian 13.
    config = tmp_path / "kvdev.conf"
    config.write_text(lines.replace("user:kvdev:", "user:65534:"))
    root = tmp_path / "root"
    root.mkdir()
    done = run("systemd-tmpfiles", f"--root={root}", "--create", str(config))
    assert (done.returncode, done.stderr) == (0, "")
    made = root / str(AgentConfig().link_dir).lstrip("/")
    assert made.is_dir()
    assert (made.stat().st_uid, made.stat().st_gid) == (0, 0)  # still root's: shared with others
    # 0755 as before (the group bits of st_mode now show the mask), plus rwx for the agent
    assert acl(made) == ["group::5", "mask::7", "other::5", "user:65534:7", "user::7"]


# Settings that run a unit in a mount namespace of its own (systemd.exec(5), "sandboxing"):
# a mount made there never reaches the agent.
MOUNT_NAMESPACE_SETTINGS = frozenset(
    {
        "PrivateTmp",
        "PrivateDevices",
        "PrivateMounts",
        "ProtectHome",
        "ProtectSystem",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectProc",
        "ProcSubset",
        "ReadOnlyPaths",
        "ReadWritePaths",
        "InaccessiblePaths",
        "TemporaryFileSystem",
        "BindPaths",
        "BindReadOnlyPaths",
        "RootDirectory",
        "RootImage",
        "MountFlags",
        "PrivateNetwork",
        "NetworkNamespacePath",
        "RuntimeDirectory",
        "StateDirectory",
        "MountAPIVFS",
    }
)


def test_the_share_unit_mounts_in_the_system_namespace_before_the_agent():
    share = settings(SHARE)
    assert not MOUNT_NAMESPACE_SETTINGS & share.keys(), (
        "the mount would stay in a private namespace"
    )
    assert "kvdev-agent.service" in words(share["Before"])
    agent = settings(SERVICE)
    assert "kvdev-metadata-share.service" in words(agent["Wants"])
    assert "kvdev-metadata-share.service" in words(agent["After"])
    assert "[Install]" not in SHARE.read_text().splitlines()  # static: the agent wants it
