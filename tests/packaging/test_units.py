"""The systemd units and system files the packages ship, checked with systemd's own tools.

``systemd-analyze verify`` and ``security --offline`` on systemd/*, sysusers.d and tmpfiles.d
applied to a scratch root (and, there, what user kvdev can and cannot write), and the ties
between those files and the agent's defaults (socket path, link wishes, link-file names).
Tests that need a systemd tool skip when it is missing.
"""

import fnmatch
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kvdev.guest import udevmarks
from kvdev.guest.adapters import markfiles as mark_files
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.core.linkwish import link_file_name
from kvdev.guest.core.marking import mac_mark, pci_mark

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
    # its link wishes are in its own state; nothing outside it is writable (issue 23 §1)
    assert "ReadWritePaths" not in service
    assert defaults.link_dir.parent == defaults.state_dir
    assert str(defaults.link_dir) == udevmarks.WISH_DIR
    assert str(mark_files.directory(defaults.state_dir)) == udevmarks.MARK_DIR
    assert service["StateDirectory"] == [defaults.state_dir.name]
    assert defaults.state_dir.parent == Path("/var/lib")
    assert service["RuntimeDirectory"] == [defaults.socket.parent.name]
    assert "kvdev-agent.socket" in words(service["Requires"])


def test_udev_rule_marks_the_agents_link_files_and_mark_files_and_networkd_matches_the_mark():
    rule = (SYSTEM / "81-kvdev.rules").read_text()
    glob = re.search(r'ENV\{ID_NET_LINK_FILE\}=="([^"]+)", GOTO="kvdev_mark"', rule)
    assert glob
    link_dir = udevmarks.NETWORK_DIR  # where the helper renders them
    assert fnmatch.fnmatchcase(f"{link_dir}/{link_file_name('eth1')}", glob.group(1))
    assert not fnmatch.fnmatchcase(f"{link_dir}/10-other-eth1.link", glob.group(1))
    # only a link with hardware of its own, before any of the three (issue 23 §2)
    assert rule.index('TEST!="device", GOTO="kvdev_end"') < rule.index("ID_NET_LINK_FILE}==")
    # the mark files the agent keeps (adapters/markfiles.py), named by core/marking.py
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
    wishes = str(AgentConfig().link_dir)
    assert path["PathChanged"] == [str(marks_dir), wishes]
    assert path["Unit"] == ["kvdev-udev-marks.service"]
    helper = settings(UNITS / "kvdev-udev-marks.service")
    assert helper["ExecStart"] == ["/usr/libexec/kvdev/kvdev-udev-marks"]
    assert udevmarks.NETWORK_DIR in words(helper["ReadWritePaths"])
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


ATTEMPTS = r"""
# as user kvdev: each line printed is something it could do to a directory root reads
net=$1
for f in 99-evil.link 99-evil.network 10-kvdev-data1.link .hidden; do
    (printf '[Match]\n' >"$net/$f") 2>/dev/null && echo "created $f"
done
(printf '[Link]\nProperty=X=1\n' >>"$net/50-other.network") 2>/dev/null && echo "appended"
(printf '[Link]\n' >"$net/10-kvdev-data0.link") 2>/dev/null && echo "overwrote"
mv -f "$net/10-kvdev-data0.link" "$net/10-kvdev-data9.link" 2>/dev/null && echo "renamed"
rm -f "$net/50-other.network" 2>/dev/null
[ -e "$net/50-other.network" ] || echo "removed"
mkdir "$net/sub" 2>/dev/null && echo "made a directory"
ln -s /dev/null "$net/99-evil.link" 2>/dev/null && echo "linked"
chmod 0777 "$net" 2>/dev/null && echo "chmod"
exit 0
"""


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("systemd-tmpfiles", "systemd-sysusers", "setpriv")),
    reason="needs systemd-tmpfiles, systemd-sysusers and setpriv",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to become the service user)")
def test_the_service_user_can_change_nothing_in_the_directory_udevd_and_networkd_read():
    """Issue 23 §1: the packaged tmpfiles.d gave kvdev rwx (ACL) on /run/systemd/network, whose
    .link and .network files udevd and systemd-networkd read as root. Applied to a scratch
    root, as kvdev's uid: no file there can be created, replaced, renamed or removed."""
    scratch = Path(tempfile.mkdtemp(prefix="kvdev-boundary-"))  # 0700 pytest dirs hide it
    try:
        scratch.chmod(0o755)
        root = scratch / "root"
        root.mkdir(mode=0o755)
        sysusers(root)
        user = entries(root / "etc/passwd")["kvdev"]
        uid, gid = int(user[2]), int(user[3])
        # libacl looks names up through this host's NSS, not --root's /etc/passwd: the uid
        # stands in for the name (a no-op unless an ACL line names kvdev)
        config = scratch / "kvdev.conf"
        text = (SYSTEM / "kvdev.tmpfiles").read_text()
        config.write_text(text.replace("user:kvdev:", f"user:{uid}:"))
        done = run("systemd-tmpfiles", f"--root={root}", "--create", str(config))
        assert (done.returncode, done.stderr) == (0, "")
        net = root / "run/systemd/network"
        (net / "50-other.network").write_text("[Match]\nName=eth0\n")  # another package's
        (net / "10-kvdev-data0.link").write_text("[Match]\n")  # one the helper rendered
        attempt = scratch / "attempt.sh"
        attempt.write_text(ATTEMPTS)
        done = run(
            "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "/bin/sh", str(attempt), str(net),
        )  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        assert sorted(os.listdir(net)) == ["10-kvdev-data0.link", "50-other.network"]
        assert (net / "50-other.network").read_text() == "[Match]\nName=eth0\n"
        assert (net.stat().st_uid, net.stat().st_mode & 0o7777) == (0, 0o755)
        assert "system.posix_acl_access" not in os.listxattr(net)
    finally:
        shutil.rmtree(scratch)


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


def test_the_deb_and_the_rpm_install_the_same_boundary_files():
    """Issue 23 §1: both packages ship one tmpfiles.d, udev rule, helper and its units, from
    the same source files (the deb through debian/kvdev.* links, the rpm by its spec)."""
    spec = (REPO / "rpm" / "kvdev.spec").read_text()
    installed = dict(re.findall(r"^install -Dpm 0\d{3} (\S+) (\S+)$", spec, re.MULTILINE))
    rpm = {
        "packaging/system/kvdev.tmpfiles": "%{buildroot}%{_tmpfilesdir}/kvdev.conf",
        "packaging/system/kvdev.sysusers": "%{buildroot}%{_sysusersdir}/kvdev.conf",
        "packaging/system/81-kvdev.rules": "%{buildroot}%{_udevrulesdir}/81-kvdev.rules",
        "packaging/libexec/kvdev-udev-marks": "%{buildroot}%{_libexecdir}/kvdev/kvdev-udev-marks",
        "systemd/kvdev-udev-marks.path": "%{buildroot}%{_unitdir}/kvdev-udev-marks.path",
        "systemd/kvdev-udev-marks.service": "%{buildroot}%{_unitdir}/kvdev-udev-marks.service",
        "systemd/kvdev-agent.service": "%{buildroot}%{_unitdir}/kvdev-agent.service",
    }
    assert {k: installed.get(k) for k in rpm} == rpm
    deb = {
        "kvdev.tmpfiles": "packaging/system/kvdev.tmpfiles",
        "kvdev.sysusers": "packaging/system/kvdev.sysusers",
        "kvdev.udev": "packaging/system/81-kvdev.rules",
        "kvdev.kvdev-udev-marks.path": "systemd/kvdev-udev-marks.path",
        "kvdev.kvdev-udev-marks.service": "systemd/kvdev-udev-marks.service",
        "kvdev.kvdev-agent.service": "systemd/kvdev-agent.service",
    }
    debian = REPO / "debian"
    assert {k: (debian / k).resolve().relative_to(REPO).as_posix() for k in deb} == deb
    rules = (debian / "rules").read_text()
    helper = "packaging/libexec/kvdev-udev-marks $(PKG)/usr/libexec/kvdev/kvdev-udev-marks"
    assert f"install -Dm755 {helper}" in rules


# cloud-init's local stage as cloud-init 24/25 ship it: the ordering that matters here.
CLOUD_INIT_LOCAL = """\
[Unit]
Description=Cloud-init: Local Stage (pre-network)
DefaultDependencies=no
Wants=network-pre.target
After=systemd-remount-fs.service
Before=NetworkManager.service
Before=network-pre.target
Before=shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
ExecStart=/bin/true
RemainAfterExit=yes
"""


def test_the_agent_starts_after_cloud_inits_local_stage():
    """At first boot that stage writes the configuration that names the guest's own NIC."""
    unit = settings(SERVICE)
    assert "cloud-init-local.service" in words(unit["After"])
    assert "cloud-init-local.service" not in words(unit.get("Wants", []) + unit.get("Requires", []))
    assert "network-pre.target" in words(unit["Before"])


@needs_analyze
def test_units_verify_with_cloud_inits_local_stage_present(unit_copies):
    """No ordering cycle with cloud-init-local.service (both run Before=network-pre.target)."""
    (unit_copies / "cloud-init-local.service").write_text(CLOUD_INIT_LOCAL)
    done = verify(unit_copies)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
