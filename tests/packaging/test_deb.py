"""The native .deb as built (make deb: packaging/pkg/deb.sh, in a Debian 13 chroot).

These read a finished build directory, named by ``KVDEV_DEB_BUILD`` (make deb sets it to
build/pkg/deb): the .deb, its .buildinfo, the build log and lintian's report. Without it every
test here skips, so a plain ``pytest`` never judges a stale artifact left by an earlier build.
They need only ``dpkg-deb``, no root and no network.

What they pin: files where trixie's systemd, udev and dpkg look for them (``/usr/lib/...``, never
the aliased ``/lib``, so ``dpkg -S`` finds the path systemd reports), nothing of kvdev.host, the
maintainer scripts debhelper wrote, a build on Debian 13 with its tests run and passed, and a
lintian report without findings whose every override carries a reason.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytestlog import summaries

BUILD = os.environ.get("KVDEV_DEB_BUILD")
pytestmark = [
    pytest.mark.skipif(not BUILD, reason="KVDEV_DEB_BUILD is not set (make deb sets it)"),
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed"),
]

UNITS = (
    "kvdev-agent.service",
    "kvdev-agent.socket",
    "kvdev-metadata-share.service",
    "kvdev-udev-marks.service",
    "kvdev-udev-marks.path",
)
SHIPPED = {
    "/usr/bin/kvdev-agent": "-rwxr-xr-x",
    "/usr/bin/kvdev": "-rwxr-xr-x",
    "/usr/libexec/kvdev/kvdev-metadata-share": "-rwxr-xr-x",
    "/usr/libexec/kvdev/kvdev-udev-marks": "-rwxr-xr-x",
    **{f"/usr/lib/systemd/system/{unit}": "-rw-r--r--" for unit in UNITS},
    "/usr/lib/systemd/network/05-kvdev-unmanaged.network": "-rw-r--r--",
    "/usr/lib/udev/rules.d/81-kvdev.rules": "-rw-r--r--",
    "/usr/lib/sysusers.d/kvdev.conf": "-rw-r--r--",
    "/usr/lib/tmpfiles.d/kvdev.conf": "-rw-r--r--",
    "/usr/share/man/man1/kvdev.1.gz": "-rw-r--r--",
    "/usr/share/man/man8/kvdev-agent.8.gz": "-rw-r--r--",
    "/usr/share/man/man5/kvdev-agent.toml.5.gz": "-rw-r--r--",
    "/usr/share/bash-completion/completions/kvdev": "-rw-r--r--",
    "/usr/share/zsh/vendor-completions/_kvdev": "-rw-r--r--",
    "/usr/share/bash-completion/completions/kvdev-agent": "-rw-r--r--",
    "/usr/share/zsh/vendor-completions/_kvdev-agent": "-rw-r--r--",
    "/usr/share/fish/vendor_completions.d/kvdev.fish": "-rw-r--r--",
    "/usr/share/fish/vendor_completions.d/kvdev-agent.fish": "-rw-r--r--",
    "/usr/share/doc/kvdev/copyright": "-rw-r--r--",
    "/etc/kvdev/agent.toml": "-rw-r--r--",
    "/usr/share/doc/kvdev/examples/dra-device-attributes/kvdev/guest-hints.json": "-rw-r--r--",
    "/usr/share/doc/kvdev/examples/config-drive/openstack/latest/meta_data.json": "-rw-r--r--",
    "/usr/lib/python3/dist-packages/kvdev/__init__.py": "-rw-r--r--",
    "/usr/lib/python3/dist-packages/kvdev/guest/__init__.py": "-rw-r--r--",
    "/usr/lib/python3/dist-packages/kvdev/schema/__init__.py": "-rw-r--r--",
}


def build_dir() -> Path:
    assert BUILD is not None
    return Path(BUILD)


def one(pattern: str) -> Path:
    found = sorted(build_dir().glob(pattern))
    assert len(found) == 1, f"{build_dir()}/{pattern}: {found}"
    return found[0]


def dpkg_deb(*args: str) -> str:
    done = subprocess.run(["dpkg-deb", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def deb() -> Path:
    return one("kvdev_*_all.deb")


@pytest.fixture(scope="module")
def contents(deb):
    """Path (as dpkg records it, "/usr/bin/kvdev") -> (mode string, owner/group)."""
    entries = {}
    for line in dpkg_deb("--contents", str(deb)).splitlines():
        fields = line.split(None, 5)
        path = fields[5].split(" -> ")[0].removeprefix(".").rstrip("/") or "/"
        entries[path] = (fields[0], fields[1])
    return entries


@pytest.fixture(scope="module")
def scripts(deb, tmp_path_factory):
    where = tmp_path_factory.mktemp("control")
    dpkg_deb("--control", str(deb), str(where))
    return where


def test_every_file_is_where_trixie_looks_for_it(contents):
    for path, mode in SHIPPED.items():
        assert path in contents, f"{path} is not in the package"
        assert contents[path] == (mode, "root/root"), path


def test_the_documentation_is_the_man_pages_a_short_readme_and_the_changelogs(contents):
    # what a guest image needs to read, and not the docs site's sources
    docs = {p for p in contents if p.startswith("/usr/share/doc/kvdev/")}
    examples = {p for p in docs if p.startswith("/usr/share/doc/kvdev/examples")}
    assert docs - examples == {
        f"/usr/share/doc/kvdev/{name}"
        for name in ("copyright", "changelog.gz", "changelog.Debian.gz", "README.md.gz")
    }
    shipped_man = {p for p in contents if p.startswith("/usr/share/man/") and p.endswith(".gz")}
    repo = Path(__file__).resolve().parents[2]
    committed = {p.name for p in (repo / "packaging" / "man").iterdir()}
    assert {p.rsplit("/", 1)[1].removesuffix(".gz") for p in shipped_man} == committed - {
        "kvdev-host.1"  # the host half is not in the package
    }


def test_nothing_is_under_an_aliased_directory(contents):
    # /lib, /bin and /sbin are symlinks into /usr on trixie: dpkg would record /lib/... while
    # systemd reports /usr/lib/..., and `dpkg -S /usr/lib/systemd/system/kvdev-agent.service`
    # would find no package.
    aliased = [p for p in contents if re.match(r"^/(lib|lib32|lib64|libx32|bin|sbin)(/|$)", p)]
    assert aliased == []
    # and nothing anywhere else but the agent's configuration (a conffile)
    etc = {"/etc", "/etc/kvdev", "/etc/kvdev/agent.toml"}
    assert [p for p in contents if p not in {"/", "/usr", *etc} and not p.startswith("/usr/")] == []


def test_the_agent_configuration_is_a_conffile(scripts, contents):
    conffiles = (scripts / "conffiles").read_text().split()
    assert conffiles == ["/etc/kvdev/agent.toml"]


def test_the_units_are_the_ones_in_the_tree(deb, tmp_path):
    dpkg_deb("--extract", str(deb), str(tmp_path))
    repo = Path(__file__).resolve().parents[2]
    for unit in UNITS:
        shipped = tmp_path / "usr/lib/systemd/system" / unit
        assert shipped.read_text() == (repo / "systemd" / unit).read_text(), unit


def test_each_command_s_module_is_shipped(deb, tmp_path, contents):
    dpkg_deb("--extract", str(deb), str(tmp_path))
    (info,) = (tmp_path / "usr/lib/python3/dist-packages").glob("kvdev-*.dist-info")
    commands = re.findall(
        r"^(\S+) = ([\w.]+):\w+$", (info / "entry_points.txt").read_text(), re.MULTILINE
    )
    assert {name for name, _ in commands} == {"kvdev", "kvdev-agent"}
    for name, module in commands:
        base = "/usr/lib/python3/dist-packages/" + module.replace(".", "/")
        assert f"{base}.py" in contents or f"{base}/__init__.py" in contents, (name, module)
        assert f"/usr/bin/{name}" in contents


def test_the_host_half_is_not_shipped(contents):
    assert "/usr/bin/kvdev-host" not in contents
    assert not [p for p in contents if "/dist-packages/kvdev/host" in p]


def test_the_control_fields(deb):
    fields = dpkg_deb(
        "--field", str(deb), "Package", "Architecture", "Depends", "Recommends", "Suggests"
    )
    control = dict(re.findall(r"^(\S+): (.*)$", fields, re.MULTILINE))
    assert (control["Package"], control["Architecture"]) == ("kvdev", "all")
    depends = {d.strip() for d in control["Depends"].split(",")}
    # pyproject.toml's floors, Debian 12's versions: the one .deb installs on 12 and 13
    for wanted in (
        "python3-pyudev (>= 0.24.0)",
        "python3-watchdog (>= 2.2.1)",
        "python3-psutil (>= 5.9.4)",
        "python3-h11 (>= 0.14.0)",
        "python3-prometheus-client (>= 0.16.0)",  # GET /v1/metrics
        "systemd | systemd-standalone-sysusers | systemd-sysusers",
    ):
        assert wanted in depends, control["Depends"]
    # the guest reads its metadata with its own plain decoder: pydantic is the host's
    assert "python3-pydantic" not in {d.split()[0] for d in depends}
    assert control["Suggests"] == "python3-yaml"  # kvdev -o yaml
    # the agent's rtnetlink codec is its own (guest/adapters/netlink): no netlink library
    assert "python3-pyroute2" not in {d.split()[0] for d in depends}
    assert control["Recommends"] == "python3-systemd"


def test_the_maintainer_scripts(scripts):
    data = {"control", "md5sums", "conffiles"}  # conffiles: a list of files, checked above
    names = sorted(p.name for p in scripts.iterdir() if p.name not in data)
    assert names == ["postinst", "postrm", "prerm"]
    for name in names:
        path = scripts / name
        text = path.read_text()
        assert os.access(path, os.X_OK), name
        assert text.startswith("#!/bin/sh\nset -e\n"), name
        assert subprocess.run(["sh", "-n", str(path)], check=False).returncode == 0, name
    postinst = (scripts / "postinst").read_text()
    # the user before anything runs as it, then the runtime directory, then the units
    assert postinst.index("systemd-sysusers") < postinst.index("systemd-tmpfiles")
    assert "kvdev.conf" in postinst
    assert postinst.index("systemd-tmpfiles") < postinst.index("deb-systemd-invoke")
    for unit in ("kvdev-agent.service", "kvdev-agent.socket"):
        assert f"deb-systemd-helper enable '{unit}'" in postinst
    started = re.findall(r"deb-systemd-invoke \$_dh_action (.*) >", postinst)
    assert started == ["'kvdev-agent.service' 'kvdev-agent.socket'"]
    # kvdev-metadata-share is started by the agent's dependency only: a remount under a running
    # agent would show it an empty root (debian/rules, --no-start --no-stop-on-upgrade)
    # kvdev-udev-marks runs from the agent's ExecStartPost= and its path unit, never from them
    for name in names:
        for unit in ("kvdev-metadata-share", "kvdev-udev-marks"):
            assert unit not in (scripts / name).read_text(), (name, unit)
    prerm = (scripts / "prerm").read_text()
    assert "deb-systemd-invoke stop 'kvdev-agent.service' 'kvdev-agent.socket'" in prerm
    assert (
        "deb-systemd-helper purge 'kvdev-agent.service' 'kvdev-agent.socket'"
        in (scripts / "postrm").read_text()
    )


def buildinfo() -> dict[str, str]:
    text = one("kvdev_*.buildinfo").read_text()
    return {
        m[0]: m[1] for m in re.findall(r"^(\S+):[ \n]((?:.*\n?)(?:^ .*\n?)*)", text, re.MULTILINE)
    }


def test_built_on_debian_13_with_the_tests_on():
    info = buildinfo()
    assert info["Build-Origin"].strip() == "Debian"
    assert re.search(r"^ base-files \(= 13\.", info["Installed-Build-Depends"], re.MULTILINE), (
        "not built on Debian 13"
    )
    assert "nocheck" not in info.get("Environment", "")
    assert "--build=" not in info.get("Environment", "")


def build_log() -> str:
    return (build_dir() / "build.log").read_text()


def test_the_build_ran_the_tests_and_they_passed():
    log = build_log()
    assert "debian/rules override_dh_auto_test" in log
    assert "python3 -m pytest" in log
    summary = summaries(log)  # any shape: a run over a minute ends "(0:02:02)"
    assert len(summary) == 1, "no (or more than one) pytest summary in the build log"
    [counts] = summary
    assert not {"failed", "error", "errors"} & set(counts), counts
    passed = counts.get("passed", 0)
    assert passed >= 500, f"only {passed} build-time tests passed"
    timings = dict(line.split("=", 1) for line in (build_dir() / "timings.txt").read_text().split())
    assert int(timings["build-tests-passed"]) == passed


def test_lintian_found_nothing_and_every_override_says_why():
    report = (build_dir() / "lintian.txt").read_text().splitlines()
    findings = [line for line in report if re.match(r"^[EWIPX]: ", line)]
    assert findings == []
    for number, line in enumerate(report):
        if line.startswith("O: "):
            assert number > 0, f"no reason for {line}"
            assert report[number - 1].startswith("N: "), f"no reason for {line}"
    versions = (build_dir() / "versions.txt").read_text()
    assert re.search(r"^lintian 2\.\d+", versions, re.MULTILINE), versions
