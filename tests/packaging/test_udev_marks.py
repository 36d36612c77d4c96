"""packaging/libexec/kvdev-udev-marks: which links it asks udev to look at again, and only those.

The script reads sysfs (``KVDEV_SYSFS``), the agent's mark files (``KVDEV_MARK_DIR``) and each
link's udev properties (``udevadm info``), and asks for "change" events (``udevadm trigger``).
Here ``udevadm`` is a script on PATH that keeps each link's properties in a file and, on a
trigger, re-evaluates the mark the way 81-kvdev.rules does (so a second round finds nothing
stale). The real udev, with the real rule and the real managers, is in the VM e2e
(tests/e2e/test_vm_neighbours.py).
"""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "libexec" / "kvdev-udev-marks"

FAKE_UDEVADM = r"""#!/bin/sh
# udevadm info --query=property --path=DEV | trigger --action=change DEV... | settle ...
db=$FAKE_UDEV_DB
case $1 in
info) dev=${3#--path=}; cat "$db/${dev##*/}" ;;
trigger)
    shift
    [ "$1" = --action=change ] || exit 64
    shift
    for dev; do
        name=${dev##*/}
        echo "$name" >>"$db/triggered"
        grep -v '^KVDEV_MANAGED=' "$db/$name" >"$db/$name.new" || true
        mac=$(cat "$dev/address")
        id_path=$(sed -n 's/^ID_PATH=//p' "$db/$name")
        link=$(sed -n 's/^ID_NET_LINK_FILE=//p' "$db/$name")
        if [ -e "$FAKE_MARKS/mac-$mac" ] \
            || { [ -n "$id_path" ] && [ -e "$FAKE_MARKS/$id_path" ]; } \
            || { [ -n "$link" ] && [ -e "$link" ]; }; then
            echo KVDEV_MANAGED=1 >>"$db/$name.new"
        fi
        mv "$db/$name.new" "$db/$name"
    done ;;
settle) ;;
*) exit 64 ;;
esac
"""


FAKE_NMCLI = r"""#!/bin/sh
# nmcli -t -f RUNNING general | nmcli device set NAME managed yes|no
case $1 in
-t) echo "$FAKE_NM_RUNNING" ;;
device) echo "$*" >>"$FAKE_UDEV_DB/nmcli" ;;
*) exit 64 ;;
esac
"""


class Box:
    def __init__(self, tmp: Path) -> None:
        self.sys, self.db, self.marks, self.bin = (tmp / d for d in ("sys", "db", "marks", "bin"))
        for d in (self.db, self.marks, self.bin):
            d.mkdir()
        (self.bin / "udevadm").write_text(FAKE_UDEVADM)
        (self.bin / "udevadm").chmod(0o755)
        self.link_dir = tmp / "network"
        self.link_dir.mkdir()

    def link(self, name: str, mac: str, **props: str) -> None:
        where = self.sys / "class" / "net" / name
        where.mkdir(parents=True)
        (where / "address").write_text(mac + "\n")
        (self.db / name).write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def network_manager(self, state: str) -> None:
        """An nmcli on PATH whose NetworkManager is ``state`` (running, or anything else)."""
        (self.bin / "nmcli").write_text(FAKE_NMCLI)
        (self.bin / "nmcli").chmod(0o755)
        self.nm_state = state

    def told_network_manager(self) -> list[str]:
        log = self.db / "nmcli"
        return log.read_text().splitlines() if log.exists() else []

    def run(self) -> tuple[list[str], str]:
        (self.db / "triggered").unlink(missing_ok=True)
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "KVDEV_SYSFS": str(self.sys),
            "KVDEV_MARK_DIR": str(self.marks),
            "FAKE_UDEV_DB": str(self.db),
            "FAKE_MARKS": str(self.marks),
            "FAKE_NM_RUNNING": getattr(self, "nm_state", ""),
        }
        done = subprocess.run(
            [str(SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=60
        )
        assert done.returncode == 0, done.stderr
        log = self.db / "triggered"
        return (log.read_text().split() if log.exists() else []), done.stderr


def test_only_links_whose_mark_is_out_of_date_get_an_event_and_a_second_run_sends_none(tmp_path):
    box = Box(tmp_path)
    kept = box.link_dir / "10-kvdev-dpci0.link"
    kept.write_text("[Match]\n")
    box.link("ens16", "52:54:00:00:00:10")  # newly managed by MAC: mark it
    box.link("ens17", "52:54:00:00:00:11", ID_PATH="pci-0000:00:11.0")  # by PCI path: mark it
    box.link("ens18", "52:54:00:00:00:12", KVDEV_MANAGED="1")  # let go: unmark it
    box.link("ens19", "52:54:00:00:00:13", KVDEV_MANAGED="1")  # still marked and wanted
    box.link("ens20", "52:54:00:00:00:14")  # nobody's business
    box.link("dpci0", "52:54:00:00:00:15", ID_NET_LINK_FILE=str(kept), KVDEV_MANAGED="1")
    gone = box.link_dir / "10-kvdev-old0.link"  # a .link file the agent removed
    box.link("old0", "52:54:00:00:00:16", ID_NET_LINK_FILE=str(gone), KVDEV_MANAGED="1")
    box.link("ens21", "", ID_PATH="")  # no address, no path: never "the directory exists"
    for name in ("mac-52:54:00:00:00:10", "pci-0000:00:11.0", "mac-52:54:00:00:00:13"):
        (box.marks / name).touch()
    triggered, said = box.run()
    assert sorted(triggered) == ["ens16", "ens17", "ens18", "old0"]
    assert "ens16: marking" in said
    assert "ens18: unmarking" in said
    assert box.run() == ([], "")


def test_no_mark_directory_unmarks_what_udev_still_marks(tmp_path):
    box = Box(tmp_path)
    box.marks.rmdir()
    box.link("ens16", "52:54:00:00:00:10", KVDEV_MANAGED="1")
    box.link("ens17", "52:54:00:00:00:11")
    assert box.run()[0] == ["ens16"]


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
        assert told == ["device set ens16 managed no", "device set ens17 managed yes"]
    else:
        assert told == []
    box.run()  # nothing changed: nothing to tell
    assert box.told_network_manager() == told
