"""packaging/libexec/kvdev-udev-marks: the .link files it renders from the agent's wishes, and
which links it asks udev to look at again, and only those.

The helper reads sysfs (``KVDEV_SYSFS``), the agent's mark files (``KVDEV_MARK_DIR``) and link
wishes (``KVDEV_LINK_WISHES``), writes ``.link`` files (``KVDEV_NETWORK_DIR``), reads udev's
database (``udevadm info --export-db``) and asks for "change" events (``udevadm trigger``).
Here ``udevadm`` is a script on PATH that keeps each link's properties in a file, logs every
call (so the tests count the processes the helper starts) and, on a trigger, re-evaluates the
mark the way 81-kvdev.rules does (so a second round finds nothing stale). The real udev, with
the real rule and the real managers, is in the VM e2e (tests/e2e/test_vm_neighbours.py).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "libexec" / "kvdev-udev-marks"

FAKE_UDEVADM = r"""#!/bin/sh
# udevadm info --export-db | trigger --action=change -- DEV... | settle ...
db=$FAKE_UDEV_DB
echo "$1" >>"$db/calls"
case $1 in
info)
    [ "$2" = --export-db ] || exit 64
    for f in "$db"/props/*; do
        [ -e "$f" ] || continue
        name=${f##*/}
        printf 'P: /devices/virtual/net/%s\nE: SUBSYSTEM=net\nE: INTERFACE=%s\n' "$name" "$name"
        sed 's/^/E: /' "$f"
        echo
    done ;;
trigger)
    shift
    [ "$1" = --action=change ] || exit 64
    shift
    [ "$1" = -- ] || exit 64
    shift
    for dev; do
        name=${dev##*/}
        echo "$name" >>"$db/triggered"
        p=$db/props/$name
        grep -v '^KVDEV_MANAGED=' "$p" >"$p.new" || true
        mac=$(cat "$dev/address")
        id_path=$(sed -n 's/^ID_PATH=//p' "$p")
        link=$(sed -n 's/^ID_NET_LINK_FILE=//p' "$p")
        if [ -e "$dev/device" ] && { [ -e "$FAKE_MARKS/mac-$mac" ] \
            || { [ -n "$id_path" ] && [ -e "$FAKE_MARKS/$id_path" ]; } \
            || { [ -n "$link" ] && [ -e "$link" ]; }; }; then
            echo KVDEV_MANAGED=1 >>"$p.new"
        fi
        mv "$p.new" "$p"
    done ;;
settle) ;;
*) exit 64 ;;
esac
"""


FAKE_NMCLI = r"""#!/bin/sh
# nmcli -t -f RUNNING general | nmcli device set ifname NAME managed yes|no|reset
# (an NetworkManager without "reset" when FAKE_NM_OLD is set)
case $1 in
-t) echo "$FAKE_NM_RUNNING" ;;
device) printf '%s\n' "$*" >>"$FAKE_UDEV_DB/nmcli"
    if [ -n "$FAKE_NM_OLD" ] && [ "$6" = reset ]; then exit 2; fi ;;
*) exit 64 ;;
esac
"""


class Box:
    def __init__(self, tmp: Path) -> None:
        self.sys, self.db, self.marks, self.bin = (tmp / d for d in ("sys", "db", "marks", "bin"))
        for d in (self.db, self.db / "props", self.marks, self.bin):
            d.mkdir()
        (self.bin / "udevadm").write_text(FAKE_UDEVADM)
        (self.bin / "udevadm").chmod(0o755)
        self.link_dir = tmp / "network"
        self.link_dir.mkdir()
        self.wishes = tmp / "links"
        self.wishes.mkdir()

    def link(self, name: str, mac: str, *, hardware: bool = True, **props: str) -> None:
        """A link in sysfs (with a ``device`` when ``hardware``) that udev knows."""
        where = self.sys / "class" / "net" / name
        where.mkdir(parents=True)
        (where / "address").write_text(mac + "\n")
        if hardware:
            (where / "device").mkdir()
        (self.db / "props" / name).write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def wish(self, name: str, content: str | bytes) -> Path:
        path = self.wishes / f"{name}.wish"
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def rendered(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.link_dir.iterdir())}

    def network_manager(self, state: str) -> None:
        """An nmcli on PATH whose NetworkManager is ``state`` (running, or anything else)."""
        (self.bin / "nmcli").write_text(FAKE_NMCLI)
        (self.bin / "nmcli").chmod(0o755)
        self.nm_state = state

    def told_network_manager(self) -> list[str]:
        log = self.db / "nmcli"
        return log.read_text().splitlines() if log.exists() else []

    def calls(self) -> list[str]:
        log = self.db / "calls"
        return log.read_text().split() if log.exists() else []

    def run(self, *, ok: bool = True) -> tuple[list[str], str]:
        (self.db / "triggered").unlink(missing_ok=True)
        (self.db / "calls").unlink(missing_ok=True)
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "KVDEV_SYSFS": str(self.sys),
            "KVDEV_MARK_DIR": str(self.marks),
            "KVDEV_LINK_WISHES": str(self.wishes),
            "KVDEV_NETWORK_DIR": str(self.link_dir),
            "FAKE_UDEV_DB": str(self.db),
            "FAKE_MARKS": str(self.marks),
            "FAKE_NM_RUNNING": getattr(self, "nm_state", ""),
            "FAKE_NM_OLD": getattr(self, "nm_old", ""),
        }
        done = subprocess.run(
            [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=False
        )
        assert (done.returncode == 0) == ok, done.stderr
        log = self.db / "triggered"
        return (log.read_text().split() if log.exists() else []), done.stderr


def test_only_links_whose_mark_is_out_of_date_get_an_event_and_a_second_run_sends_none(tmp_path):
    box = Box(tmp_path)
    box.wish("dpci0", "pci 0000:00:15.0\n")
    kept = box.link_dir / "10-kvdev-dpci0.link"
    box.link("ens16", "52:54:00:00:00:10")  # newly managed by MAC: mark it
    box.link("ens17", "52:54:00:00:00:11", ID_PATH="pci-0000:00:11.0")  # by PCI path: mark it
    box.link("ens18", "52:54:00:00:00:12", KVDEV_MANAGED="1")  # let go: unmark it
    box.link("ens19", "52:54:00:00:00:13", KVDEV_MANAGED="1")  # still marked and wanted
    box.link("ens20", "52:54:00:00:00:14")  # nobody's business
    box.link("dpci0", "52:54:00:00:00:15", ID_NET_LINK_FILE=str(kept), KVDEV_MANAGED="1")
    gone = box.link_dir / "10-kvdev-old0.link"  # a .link file whose wish the agent removed
    gone.write_text("[Match]\n")
    box.link("old0", "52:54:00:00:00:16", ID_NET_LINK_FILE=str(gone), KVDEV_MANAGED="1")
    box.link("ens21", "", ID_PATH="")  # no address, no path: never "the directory exists"
    for name in ("mac-52:54:00:00:00:10", "pci-0000:00:11.0", "mac-52:54:00:00:00:13"):
        (box.marks / name).touch()
    triggered, said = box.run()
    assert sorted(triggered) == ["ens16", "ens17", "ens18", "old0"]
    assert "ens16: marking" in said
    assert "ens18: unmarking" in said
    assert sorted(box.rendered()) == ["10-kvdev-dpci0.link"]
    assert box.run() == ([], "")


def test_no_mark_directory_unmarks_what_udev_still_marks(tmp_path):
    box = Box(tmp_path)
    box.marks.rmdir()
    box.link("ens16", "52:54:00:00:00:10", KVDEV_MANAGED="1")
    box.link("ens17", "52:54:00:00:00:11")
    assert box.run()[0] == ["ens16"]


def test_a_mac_mark_marks_only_the_nic_never_a_bridge_or_vlan_with_its_mac(tmp_path):
    """Issue 23 §2: a bridge takes its first port's MAC, a VLAN its parent's; neither has a
    ``device``. Before, the helper (and 81-kvdev.rules) marked them too and took the bridge
    away from NetworkManager."""
    box = Box(tmp_path)
    box.network_manager("running")
    mac = "52:54:00:00:00:10"
    box.link("ens16", mac)
    box.link("br0", mac, hardware=False, DEVTYPE="bridge")
    box.link("ens16.5", mac, hardware=False, DEVTYPE="vlan")
    (box.marks / f"mac-{mac}").touch()
    assert box.run()[0] == ["ens16"]
    assert box.told_network_manager() == ["device set ifname ens16 managed no"]
    # and one that was marked by the old rule is given back
    box.link("br1", mac, hardware=False, DEVTYPE="bridge", KVDEV_MANAGED="1")
    assert box.run()[0] == ["br1"]


@pytest.mark.parametrize("state", ["running", "asleep"])
def test_a_running_network_manager_is_told_of_each_changed_link_and_only_then(tmp_path, state):
    box = Box(tmp_path)
    box.network_manager(state)
    box.link("ens16", "52:54:00:00:00:10")  # newly kvdev's
    box.link("ens17", "52:54:00:00:00:11", KVDEV_MANAGED="1")  # let go
    box.link("ens18", "52:54:00:00:00:12")  # nobody's: not a word about it
    (box.marks / "mac-52:54:00:00:00:10").touch()
    box.run()
    told = box.told_network_manager()
    if state == "running":
        assert told == [
            "device set ifname ens16 managed no",
            "device set ifname ens17 managed reset",  # it decides again and connects it again
        ]
    else:
        assert told == []
    box.run()  # nothing changed: nothing to tell
    assert box.told_network_manager() == told


def test_a_network_manager_without_managed_reset_gets_managed_yes(tmp_path):
    """``managed reset`` hands a link back; a NetworkManager that refuses it gets ``yes``."""
    box = Box(tmp_path)
    box.network_manager("running")
    box.nm_old = "1"
    box.link("ens17", "52:54:00:00:00:11", KVDEV_MANAGED="1")  # let go
    _, stderr = box.run()
    assert box.told_network_manager() == [
        "device set ifname ens17 managed reset",
        "device set ifname ens17 managed yes",
    ]
    assert "ens17: NetworkManager refused 'managed reset'" in stderr


# --------------------------------------------------------------------------- the wishes


def test_each_wish_is_rendered_in_the_fixed_form_and_only_kvdevs_link_files_are_touched(
    tmp_path,
):
    box = Box(tmp_path)
    box.wish("data0", "mac 52:54:00:00:00:10\n")
    box.wish("data1", "permanent-mac 52:54:00:00:00:11\n")
    box.wish("data2", "pci 0000:07:00.0\n")
    (box.wishes / ".data3.wish.ab12.tmp").write_text("mac 52:54:00:00:00:13\n")  # in progress
    (box.link_dir / "50-site.link").write_text("[Match]\nOriginalName=*\n")  # not kvdev's
    (box.link_dir / "10-kvdev-stale.link").write_text("[Match]\n")  # no wish asks for it
    (box.link_dir / ".10-kvdev-x.link.abcd.tmp").write_text("")  # a killed write's leftover
    _, said = box.run()
    source = box.wishes
    assert box.rendered() == {
        "10-kvdev-data0.link": f"# Rendered by kvdev-udev-marks from {source}/data0.wish; "
        "removed with it.\n[Match]\nMACAddress=52:54:00:00:00:10\nPath=?*\n\n"
        "[Link]\nName=data0\n",
        "10-kvdev-data1.link": f"# Rendered by kvdev-udev-marks from {source}/data1.wish; "
        "removed with it.\n[Match]\nPermanentMACAddress=52:54:00:00:00:11\n\n"
        "[Link]\nName=data1\n",
        "10-kvdev-data2.link": f"# Rendered by kvdev-udev-marks from {source}/data2.wish; "
        "removed with it.\n[Match]\nPath=pci-0000:07:00.0\n\n[Link]\nName=data2\n",
        "50-site.link": "[Match]\nOriginalName=*\n",
    }
    assert "10-kvdev-stale.link: removed" in said
    assert {p.stat().st_mode & 0o777 for p in box.link_dir.iterdir()} >= {0o644}
    assert box.run()[1] == ""  # nothing to write a second time
    (box.wishes / "data1.wish").unlink()
    box.run()
    assert "10-kvdev-data1.link" not in box.rendered()


HOSTILE_NAMES = [
    "data=1",  # NAME=WANT once split here
    "a/b",
    "a b",
    "a\tb",
    "a:b",
    ".",
    "..",
    "a" * 16,
    "net%d",
    "all",
    "1234",
    "d\u00e4ten",
    "x\nProperty=SYSTEMD_WANTS=debug-shell.service",
]
HOSTILE_CONTENT = [
    b"mac 52:54:00:00:00:10\nProperty=SYSTEMD_WANTS=debug-shell.service\n",
    b"mac 52:54:00:00:00:10\n\n[Link]\nProperty=X=1\n",
    b"mac 52:54:00:00:00:10 Property=X=1\n",
    b"mac 52:54:00:00:00:10",  # no newline
    b"MACAddress=52:54:00:00:00:10\n",
    b"name 52:54:00:00:00:10\n",
    b"mac 52:54:00:00:00:1G\n",
    b"mac 52-54-00-00-00-10\n",
    b"mac 52:54:00:00:00:1A\n",  # not canonical
    b"pci 0000:07:00.0\nSYSTEMD_WANTS=x\n",
    b"pci 0000:07:20.0\n",  # device above 1f
    b"pci pci-0000:07:00.0\n",
    b"pci ../../etc\n",
    b"mac \xff\xfe\n",
    b"",
    b"mac 52:54:00:00:00:10\n" + b"#" * 100,
]


def test_hostile_wishes_are_refused_one_by_one_and_the_good_one_is_still_rendered(tmp_path):
    box = Box(tmp_path)
    box.wish("good0", "mac 52:54:00:00:00:10\n")
    for i, name in enumerate(HOSTILE_NAMES):
        try:
            box.wish(name, f"mac 52:54:00:00:01:{i:02x}\n")
        except OSError:
            continue  # a name the file system itself refuses ("a/b")
    for i, content in enumerate(HOSTILE_CONTENT):
        box.wish(f"bad{i}", content)
    (box.wishes / "huge.wish").write_bytes(b"mac 52:54:00:00:00:20\n" + b" " * (1 << 20))
    (box.wishes / "link.wish").symlink_to(box.wishes / "good0.wish")
    (box.wishes / "etc.wish").symlink_to("/etc/passwd")
    os.mkfifo(box.wishes / "fifo.wish")  # never blocks the helper
    (box.wishes / "dir.wish").mkdir()
    twin = box.wish("twin0", "mac 52:54:00:00:00:30\n")
    os.link(twin, box.wishes / "hard.wish")  # a hard link: maybe to a file not the agent's
    _, said = box.run()
    assert list(box.rendered()) == ["10-kvdev-good0.link"]
    refused = [line for line in said.splitlines() if ": refused: " in line]
    assert len(refused) >= len(HOSTILE_CONTENT) + 6
    assert "huge.wish: refused: larger than 64 bytes; not read" in said
    assert "etc.wish: refused: a symbolic link; not followed" in said
    assert "fifo.wish: refused: a FIFO, not a regular file; not opened" in said
    assert "hard.wish: refused: a file with 2 hard links; not read" in said
    assert "debug-shell" not in "".join(box.rendered().values())
    # a name with a newline is logged as one line: no forged journal line
    assert not any(line.startswith("Property=") for line in said.splitlines())
    for text in box.rendered().values():  # the fixed form: 6 lines, 2 keys of ours
        keys = [line.split("=")[0] for line in text.splitlines() if "=" in line]
        assert keys == ["MACAddress", "Path", "Name"], text


def test_two_wishes_for_one_nic_render_one_link_file(tmp_path):
    box = Box(tmp_path)
    box.wish("a0", "mac 52:54:00:00:00:10\n")
    box.wish("b0", "mac 52:54:00:00:00:10\n")
    _, said = box.run()
    assert list(box.rendered()) == ["10-kvdev-a0.link"]
    assert "b0.wish: refused: another wish has the same mac" in said


def test_a_symlinked_wish_directory_is_not_followed_and_nothing_is_lost(tmp_path):
    box = Box(tmp_path)
    box.wish("data0", "mac 52:54:00:00:00:10\n")
    box.run()
    before = box.rendered()
    elsewhere = tmp_path / "elsewhere"
    box.wishes.rename(elsewhere)
    (elsewhere / "data1.wish").write_text("mac 52:54:00:00:00:11\n")
    box.wishes.symlink_to(elsewhere)
    _, said = box.run()
    assert "not read" in said
    assert box.rendered() == before


def test_thousands_of_entries_cost_a_bounded_read_and_lose_nothing(tmp_path):
    box = Box(tmp_path)
    box.wish("data0", "mac 52:54:00:00:00:10\n")
    box.run()
    before = box.rendered()
    for i in range(5000):
        (box.wishes / f"x{i}.wish").write_text(
            f"mac 52:54:00:{i >> 8 & 255:02x}:{i & 255:02x}:00\n"
        )
    start = time.monotonic()
    _, said = box.run()
    print(f"5,000 wish entries: {time.monotonic() - start:.2f} s")  # a figure, not a bound
    assert "more than 1024 entries, not read; the .link files stay as they are" in said
    assert box.rendered() == before


def test_the_helper_starts_a_fixed_number_of_processes_whatever_the_number_of_links(tmp_path):
    """Issue 23 §5: the shell helper ran about six processes per link per round (1,000
    links: 26 s). Now: one export-db read per round, and events only for the stale links."""
    box = Box(tmp_path)
    for i in range(300):
        box.link(f"eth{i}", f"52:54:00:00:{i >> 8:02x}:{i & 255:02x}")
    (box.marks / "mac-52:54:00:00:00:07").touch()
    start = time.monotonic()
    triggered, _ = box.run()
    first = time.monotonic() - start
    assert triggered == ["eth7"]
    assert box.calls() == ["info", "trigger", "settle", "info"]
    start = time.monotonic()
    assert box.run()[0] == []
    assert box.calls() == ["info"]
    print(f"300 links: {first:.2f} s with one stale, {time.monotonic() - start:.2f} s with none")


def acl_entries(*entries):
    """A system.posix_acl_access value: (tag, perm, id) entries after the version."""
    return (2).to_bytes(4, "little") + b"".join(
        t.to_bytes(2, "little") + p.to_bytes(2, "little") + i.to_bytes(4, "little")
        for t, p, i in entries
    )


BASE = [(1, 7, 0xFFFFFFFF), (4, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF)]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to hand the wishes to another uid)")
@pytest.mark.parametrize("others", [False, True])
def test_the_acl_an_older_version_gave_the_agent_is_taken_out_and_only_that(tmp_path, others):
    """Upgrades: tmpfiles.d never removes the ACL the old kvdev.conf set on /run/systemd/network
    (user:kvdev:rwx), so the agent kept write access until the next boot."""
    box = Box(tmp_path)
    os.chown(box.wishes, 65534, 65534)  # the agent's (kvdev's) directory
    site = [(2, 5, 1234)] if others else []  # another package's entry stays
    entries = [*BASE[:1], (2, 7, 65534), *site, *BASE[1:]]
    os.setxattr(box.link_dir, "system.posix_acl_access", acl_entries(*entries))
    _, said = box.run()
    assert "took uid 65534's ACL entry out" in said
    if others:
        left = os.getxattr(box.link_dir, "system.posix_acl_access")
        assert left == acl_entries(
            BASE[0], *site, (4, 5, 0xFFFFFFFF), (0x10, 5, 0xFFFFFFFF), BASE[3]
        )
    else:
        assert "system.posix_acl_access" not in os.listxattr(box.link_dir)
        assert box.link_dir.stat().st_mode & 0o777 == 0o755
    assert "ACL" not in box.run()[1]  # once
