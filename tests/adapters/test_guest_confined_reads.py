"""The agent's readers on hostile files: each reads through ``kvdev._confined`` with its own rules.

A FIFO is fed by a writer thread, so that a reader that opens it gets data and returns (it
would otherwise wait for a writer for ever): "never opened" is then seen in what was read and
in every ``os.open`` watched, not in a timeout. The network configuration and the root helper's
check of its own ``.link`` files opened such a FIFO before they read through the confined reader.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdev import _confined
from kvdev.guest import udevmarks
from kvdev.guest.adapters import netconfig
from kvdev.guest.adapters.files import Budget, read_bounded
from kvdev.guest.cli import collect


class Feeder:
    """Writers for FIFOs: each gives ``data`` to the first reader that opens its FIFO."""

    def __init__(self) -> None:
        self.threads: list[tuple[int, threading.Thread]] = []

    def fifo(self, path: Path, data: bytes) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        inode = os.open(path, os.O_PATH)  # the FIFO itself, even once its name is replaced

        def feed() -> None:
            fd = os.open(f"/proc/self/fd/{inode}", os.O_WRONLY)  # waits for a reader
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

        thread = threading.Thread(target=feed, daemon=True)
        thread.start()
        self.threads.append((inode, thread))
        return path

    def release(self) -> None:
        """Open each FIFO for reading (without waiting), so every writer ends."""
        for inode, thread in self.threads:
            fd = os.open(f"/proc/self/fd/{inode}", os.O_RDONLY | os.O_NONBLOCK)
            try:
                thread.join()
            finally:
                os.close(fd)
                os.close(inode)


@pytest.fixture
def feeder() -> Iterator[Feeder]:
    fed = Feeder()
    yield fed
    fed.release()


class Opens:
    """Every ``os.open`` made while installed, with its flags."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, int]] = []
        real = os.open

        def watched(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append((os.fspath(path), flags))
            return real(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", watched)

    def opened_for_reading(self, name: str) -> bool:
        return any(p.endswith(name) and not f & os.O_PATH for p, f in self.calls)


# --------------------------------------------------------------------------- netconfig


def test_a_fifo_as_resolv_conf_is_a_problem_never_opened(tmp_path, feeder):
    feeder.fifo(tmp_path / "etc/resolv.conf", b"nameserver 10.9.9.9\n")
    servers, problems = netconfig.dns_servers(tmp_path)
    assert servers == ()  # what a writer put in a FIFO is never read
    assert problems == (f"{tmp_path}/etc/resolv.conf: a FIFO, not a regular file; not opened",)


def test_a_fifo_as_a_keyfile_names_no_nic(tmp_path, feeder):
    keyfile = b"[connection]\ninterface-name=eth7\n[ipv4]\nmethod=auto\n"
    where = tmp_path / "etc/NetworkManager/system-connections/x.nmconnection"
    feeder.fifo(where, keyfile)
    configured, problems = netconfig.read(tmp_path)
    assert configured == ()
    assert problems == (f"{where}: a FIFO, not a regular file; not opened",)


def test_a_fifo_as_networkmanagers_device_state_is_not_managed(tmp_path, feeder):
    feeder.fifo(tmp_path / "run/NetworkManager/devices/2", b"[device]\nmanaged=true\n")
    (tmp_path / "run/NetworkManager/devices/3").write_text("[device]\nmanaged=true\n")
    assert netconfig.nm_managed(tmp_path, [2, 3]) == {3}


def test_a_linked_resolv_conf_is_still_followed(tmp_path):
    """The guest's own configuration: systemd-resolved's resolv.conf is a link."""
    stub = tmp_path / "run/systemd/resolve/stub-resolv.conf"
    stub.parent.mkdir(parents=True)
    stub.write_text("nameserver 10.0.0.53\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/resolv.conf").symlink_to(stub)
    assert netconfig.dns_servers(tmp_path) == (("10.0.0.53",), ())


def test_a_device_as_a_netplan_file_is_not_opened(tmp_path, monkeypatch):
    where = tmp_path / "etc/netplan/00.yaml"
    where.parent.mkdir(parents=True)
    os.mknod(where, 0o020600, os.makedev(1, 5))  # /dev/zero's numbers: endless if read
    opens = Opens(monkeypatch)
    configured, problems = netconfig.read(tmp_path)
    assert configured == ()
    assert problems == (f"{where}: a character device, not a regular file; not opened",)
    assert not opens.opened_for_reading("00.yaml")


# --------------------------------------------------------------------------- udevmarks


def test_the_root_helper_never_opens_a_fifo_in_place_of_its_link_file(
    tmp_path, monkeypatch, feeder
):
    wishes, network = tmp_path / "links", tmp_path / "network"
    wishes.mkdir()
    network.mkdir()
    (wishes / "eth1.wish").write_text("mac 52:54:00:00:00:10\n")
    planted = network / "10-kvdev-eth1.link"
    feeder.fifo(planted, b"[Match]\n")
    opens = Opens(monkeypatch)
    kept = udevmarks.render(wishes, network)
    assert kept == {str(planted)}
    assert not opens.opened_for_reading("10-kvdev-eth1.link")
    assert planted.is_file()  # replaced by the rendering
    assert "MACAddress=52:54:00:00:00:10" in planted.read_text()


def test_the_root_helper_rewrites_a_link_file_that_is_a_symbolic_link(tmp_path):
    wishes, network = tmp_path / "links", tmp_path / "network"
    wishes.mkdir()
    network.mkdir()
    (wishes / "eth1.wish").write_text("mac 52:54:00:00:00:10\n")
    udevmarks.render(wishes, network)
    rendered = network / "10-kvdev-eth1.link"
    elsewhere = tmp_path / "copy.link"
    elsewhere.write_bytes(rendered.read_bytes())
    rendered.unlink()
    rendered.symlink_to(elsewhere)  # the same text, through a link: not the helper's file
    udevmarks.render(wishes, network)
    assert not rendered.is_symlink()


def test_a_wish_owned_by_another_user_is_refused(tmp_path, capsys):
    wishes = tmp_path / "links"
    wishes.mkdir()
    (wishes / "eth1.wish").write_text("mac 52:54:00:00:00:10\n")
    os.chown(wishes / "eth1.wish", 65534, 65534)
    assert udevmarks.read_wishes(wishes) == []
    assert "eth1.wish: refused: owned by uid 65534, not by [0]; not read" in capsys.readouterr().err


# --------------------------------------------------------------------------- collect


def _collected(root: Path, before_read=lambda _entry: None) -> dict[str, bytes | str]:
    """What ``kvdev collect`` copies of each entry under ``root``: its bytes, or why not."""
    out: dict[str, bytes | str] = {}
    for entry in collect._walk(root):  # each entry's directory fd is open only while yielded
        before_read(entry)
        try:
            out[entry.name] = collect._read(entry)
        except _confined.RefusedError as e:
            out[entry.name] = str(e)
    return out


def test_collect_copies_no_fifo_link_or_oversized_file(tmp_path, monkeypatch, feeder):
    state = tmp_path / "state"
    state.mkdir()
    (state / "good.json").write_text("{}")
    feeder.fifo(state / "fifo.json", b"{}")
    (tmp_path / "secret").write_text("root's")
    (state / "link.json").symlink_to(tmp_path / "secret")
    monkeypatch.setattr(collect, "MAX_FILE", 8)
    (state / "big.json").write_bytes(b"x" * 9)
    opens = Opens(monkeypatch)
    assert _collected(state) == {
        "big.json": "big.json: larger than 8 bytes; not read; not collected",
        "fifo.json": "fifo.json: a FIFO, not a regular file; not opened; not collected",
        "good.json": b"{}",
        "link.json": "link.json: a symbolic link; not followed; not collected",
    }
    assert not any(opens.opened_for_reading(n) for n in ("fifo.json", "link.json", "big.json"))


def test_collect_copies_no_file_swapped_after_the_listing(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "a.json").write_text("listed")

    def swap(_entry: collect._Entry) -> None:
        (state / "b.json").write_text("another")
        (state / "b.json").replace(state / "a.json")

    assert _collected(state, swap) == {
        "a.json": "a.json: no longer the file listed; not read; not collected"
    }


# --------------------------------------------------------------------------- files


def test_the_metadata_reader_spends_no_budget_on_a_file_past_it(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 100)
    budget = Budget(limit=50)
    with pytest.raises(OSError, match="read budget is spent"):
        read_bounded(big, budget=budget)
    assert (budget.left, budget.refused) == (50, 1)
    with pytest.raises(OSError, match="larger than 10 bytes"):
        read_bounded(big, limit=10)
