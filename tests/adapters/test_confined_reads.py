"""The confined reader on real files: what the node relay and ``bundle --from-cdi`` may open.

A spec's ``hostPath`` is read only beneath a host directory, never through a link (at any
component) or ``..``, and only a regular file with one link is opened: a device, a FIFO or a
socket is looked at (``O_PATH``) and never opened. Every ``open(2)`` the reader makes is
watched, so "never opened" is checked, not assumed; a name swapped between look and open
is swapped for real, at that moment.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from kvdev._confined import RefusedError, read_beneath
from kvdev.errors import SchemaError
from kvdev.host.bundle.source import read_cdi_dir
from kvdev.host.cdi.ondisk import read_host_file
from kvdev.host.relay.finder import find
from kvdev.schema.tree import ROOT

UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
DRIVER = "sriov.example.com"
BODY = b'{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata"}'
SECRET = b"the relay's own token"
PLACE = f"{ROOT}/resourceclaims/c/nic-1/{DRIVER}-metadata.json"


class Opens:
    """Every ``os.open`` made while installed: (path, flags)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, after=None) -> None:
        self.calls: list[tuple[str, int]] = []
        real = os.open

        def watched(path, flags, *args, **kwargs):
            fd = real(path, flags, *args, **kwargs)
            self.calls.append((os.fspath(path), flags))
            if after is not None:
                after(os.fspath(path), flags)
            return fd

        monkeypatch.setattr(os, "open", watched)

    def opened_for_reading(self, name: str) -> bool:
        """``name`` (a last component) was opened other than ``O_PATH``."""
        return any(p.endswith(name) and not f & os.O_PATH for p, f in self.calls)


@pytest.fixture
def tree(tmp_path):
    """A host directory with a driver's file at plugins/drv/a/b/metadata.json, a secret
    outside it."""
    plugins = tmp_path / "plugins"
    deep = plugins / "drv/a/b"
    deep.mkdir(parents=True)
    (deep / "metadata.json").write_bytes(BODY)
    outside = tmp_path / "outside"
    (outside / "a/b").mkdir(parents=True)
    (outside / "a/b/metadata.json").write_bytes(SECRET)
    (outside / "secret").write_bytes(SECRET)
    return plugins, outside


def test_a_drivers_file_is_read(tree):
    plugins, _ = tree
    host = f"{plugins}/drv/a/b/metadata.json"
    assert read_host_file(host, [plugins], 1024) == BODY
    assert read_host_file(f"{plugins}//drv/./a/b/metadata.json", [plugins], 1024) == BODY


@pytest.mark.parametrize("at", ["drv", "drv/a", "drv/a/b", "drv/a/b/metadata.json"])
def test_a_link_at_any_component_is_refused(tree, at):
    plugins, _ = tree
    component = plugins / at
    component.rename(plugins.parent / "moved")
    component.symlink_to(plugins.parent / "moved")  # followed, it would read the same bytes
    with pytest.raises(RefusedError, match="is a symbolic link"):
        read_host_file(f"{plugins}/drv/a/b/metadata.json", [plugins], 1024)


def test_dot_dot_and_paths_outside_the_roots_are_refused(tree):
    plugins, outside = tree
    for host in (
        f"{plugins}/drv/../../outside/secret",
        f"{plugins}/../outside/secret",
        f"{outside}/secret",
        f"{plugins}2/x",  # beside the root, not beneath it
        "/proc/self/environ",
        "relative/metadata.json",
    ):
        with pytest.raises(RefusedError) as e:
            read_host_file(host, [plugins], 1024)
        assert e.value.path == host or host.startswith(str(plugins))


def test_proc_self_environ_through_a_link_is_refused(tree):
    plugins, _ = tree
    (plugins / "drv/environ").symlink_to("/proc/self/environ")
    with pytest.raises(RefusedError, match="symbolic link"):
        read_host_file(f"{plugins}/drv/environ", [plugins], 1 << 20)


@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "directory"])
def test_a_special_file_is_looked_at_never_opened(tree, monkeypatch, kind):
    plugins, _ = tree
    node = plugins / "drv/node"
    if kind == "fifo":
        os.mkfifo(node)
    elif kind == "device":  # /dev/null's numbers: a real character device node
        null = Path("/dev/null").stat().st_rdev
        try:
            os.mknod(node, stat.S_IFCHR | 0o600, null)
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(node))
        s.close()
    else:
        node.mkdir()
    opens = Opens(monkeypatch)
    with pytest.raises(RefusedError, match="not a regular file"):
        read_host_file(str(node), [plugins], 1024)
    assert not opens.opened_for_reading("node"), opens.calls


def test_a_hard_link_is_refused(tree):
    plugins, outside = tree
    os.link(outside / "secret", plugins / "drv/linked")
    with pytest.raises(RefusedError, match="2 hard links"):
        read_host_file(f"{plugins}/drv/linked", [plugins], 1024)


def test_a_directory_swapped_after_its_look_is_not_followed(tree, monkeypatch):
    plugins, outside = tree

    def swap(path, flags):
        if path == "a" and flags & os.O_PATH:  # drv/a looked at: now make it a link out
            (plugins / "drv/a").rename(plugins / "drv/a.old")
            (plugins / "drv/a").symlink_to(outside / "a")

    Opens(monkeypatch, after=swap)
    # The walk goes on through the directory it looked at, never through the new link.
    assert read_host_file(f"{plugins}/drv/a/b/metadata.json", [plugins], 1024) == BODY


def test_a_file_swapped_for_a_fifo_after_its_look_is_the_file_looked_at(tree, monkeypatch):
    plugins, _ = tree
    path = plugins / "drv/a/b/metadata.json"

    def swap(name, flags):
        if name == "metadata.json" and flags & os.O_PATH:
            path.rename(path.with_name("old.json"))
            os.mkfifo(path)  # a plain open() of it now would wait for a writer

    opens = Opens(monkeypatch, after=swap)
    assert read_host_file(str(path), [plugins], 1024) == BODY
    assert not any(p == "metadata.json" and not f & os.O_PATH for p, f in opens.calls)


def test_larger_than_the_limit_is_refused(tree):
    plugins, _ = tree
    (plugins / "drv/big").write_bytes(b" " * 1025)
    with pytest.raises(RefusedError, match="larger than 1024 bytes"):
        read_beneath(plugins, "drv/big", 1024)


def spec(cdi: Path, name: str, host: str) -> None:
    body = {
        "cdiVersion": "0.5.0",
        "kind": f"{DRIVER}/metadata",
        "devices": [
            {
                "name": f"{UID}_nic-1",
                "containerEdits": {"mounts": [{"hostPath": host, "containerPath": PLACE}]},
            }
        ],
    }
    (cdi / name).write_text(json.dumps(body))


def test_the_relay_and_the_bundle_relay_no_file_from_outside(tree, monkeypatch):
    plugins, outside = tree
    cdi = plugins.parent / "cdi"
    cdi.mkdir()
    (plugins / "drv/token").symlink_to(outside / "secret")
    null = plugins / "drv/null"
    os.mknod(null, stat.S_IFCHR | 0o600, Path("/dev/null").stat().st_rdev)
    hostile = {
        "a.json": "/proc/self/environ",
        "b.json": f"{plugins}/drv/token",
        "c.json": f"{plugins}/drv/../../outside/secret",
        "d.json": str(null),
    }
    for name, host in hostile.items():
        spec(cdi, name, host)
    (cdi / "e.json").symlink_to(cdi / "a.json")  # a spec is read beneath its directory too
    opens = Opens(monkeypatch)
    found = find([cdi], [plugins])
    assert found.files == []
    assert sorted(Path(p.source).name for p in found.problems) == [*sorted(hostile), "e.json"]
    assert all(SECRET not in f.data for f in found.files)
    assert not opens.opened_for_reading("null")
    with pytest.raises(SchemaError) as e:
        read_cdi_dir(cdi, host_dirs=[plugins])
    assert len(e.value.problems) == 5
