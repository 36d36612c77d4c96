"""Pure: link wishes, the ``.link`` files rendered from them, and which links udev should mark.

This module owns the data that crosses the privilege boundary between the agent (user
``kvdev``) and its root helper ``kvdev-udev-marks``, in both directions, and the helper's
decisions. Nothing the agent writes is ever read by a root process as configuration:

* A **link wish** is the agent's request that a name survive reboots and re-plugs. It is one
  small file ``<name>.wish`` in the agent's state (``/var/lib/kvdev/links``) holding one line,
  ``<kind> <value>``: ``mac <address>``, ``permanent-mac <address>`` or ``pci <dddd:bb:dd.f>``.
  ``wish_text`` writes it (the agent), ``parse_wish`` reads it (the helper) and refuses
  anything else: a name the kernel, udev or NetworkManager would read differently
  (``kvdev.schema.ifnames``), another kind, a value that is not a canonical address, a
  second line, more than ``WISH_MAX_BYTES``.
* ``render_link`` is the whole ``.link`` file the helper writes for a wish, as root, in
  ``/run/systemd/network``: fixed text around the checked name and address, nothing the
  agent wrote copied into it. A MAC match also requires a device path (``Path=?*``), which
  only a link with its own hardware has, so that a bridge, bond or VLAN carrying the NIC's MAC
  never matches.
* ``marked`` is what ``81-kvdev.rules`` decides for a link, and ``stale`` the links whose
  udev mark differs from it: the only links the helper asks udev to look at again. Only a link
  with a ``device`` (its own hardware: a virtio-net, a PCI NIC, an SR-IOV VF) is ever marked,
  never an upper device that shares its MAC.
* ``parse_export_db`` reads ``udevadm info --export-db`` once per round instead of one
  ``udevadm info`` per link.
* ``acl_without_user`` takes user ``kvdev``'s entry out of a directory's POSIX ACL: versions
  before issue 23 gave it rwx on ``/run/systemd/network`` by tmpfiles.d, and tmpfiles never
  removes an ACL, so an upgraded system kept it until the next boot.

No I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from kvdev._records import compared
from kvdev.schema.ifnames import check_ifname

WISH_SUFFIX = ".wish"
LINK_FILE_PREFIX = "10-kvdev-"
LINK_FILE_GLOB = f"*/{LINK_FILE_PREFIX}*.link"  # 81-kvdev.rules' ID_NET_LINK_FILE match
WISH_MAX_BYTES = 64  # "permanent-mac " and a 20-octet address, with room to spare
WISHES_MAX = 1024  # entries in the wish directory the helper reads at most (see udevmarks)
MAC_MARK, PCI_MARK = "mac-", "pci-"

KINDS = ("mac", "permanent-mac", "pci")
_MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}(?:(?::[0-9a-f]{2}){14})?\Z")
_PCI = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]\Z")
_MATCH_KEY = {"mac": "MACAddress", "permanent-mac": "PermanentMACAddress", "pci": "Path"}


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Wish:
    """A checked link wish: give the link that ``kind`` ``value`` matches the name ``name``."""

    name: str
    kind: str
    value: str


def wish_file(name: str) -> str:
    """The file name of the wish for interface name ``name``."""
    return f"{name}{WISH_SUFFIX}"


def wish_text(kind: str, value: str) -> str:
    """The content of a wish (the agent's side); ``ValueError`` if the helper would refuse it."""
    text = f"{kind} {value}\n"
    parse_wish("x", text.encode())
    return text


def parse_wish(name: str, data: bytes) -> Wish:
    """Check one wish file's name (without ``.wish``) and bytes; ``ValueError`` says what is wrong.

    The message never repeats the content (the helper runs as root and logs it).
    """
    check_ifname(name)
    if len(data) > WISH_MAX_BYTES:
        raise ValueError(f"more than {WISH_MAX_BYTES} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise ValueError("not ASCII") from e
    if not text.endswith("\n") or text.count("\n") != 1:
        raise ValueError("not one line ending in a newline")
    kind, sep, value = text[:-1].partition(" ")
    if not sep or kind not in KINDS:
        raise ValueError(f"not '<kind> <value>' with a kind of {', '.join(KINDS)}")
    pattern = _PCI if kind == "pci" else _MAC
    if not pattern.match(value):
        raise ValueError(f"the {kind} value is not a canonical {'PCI' if kind == 'pci' else 'MAC'}")
    return Wish(name, kind, value)


def link_file_name(name: str) -> str:
    """The name of the ``.link`` file the helper renders for interface name ``name``."""
    return f"{LINK_FILE_PREFIX}{name}.link"


def render_link(wish: Wish, source: str) -> str:
    """The whole ``.link`` file for a checked wish; ``source`` is the wish file's path."""
    match = f"{_MATCH_KEY[wish.kind]}={'pci-' if wish.kind == 'pci' else ''}{wish.value}\n"
    if wish.kind == "mac":
        match += "Path=?*\n"  # only a link with hardware of its own, never one sharing its MAC
    return (
        f"# Rendered by kvdev-udev-marks from {source}; removed with it.\n"
        f"[Match]\n{match}\n[Link]\nName={wish.name}\n"
    )


def first_of_each_match(wishes: Iterable[Wish]) -> tuple[list[Wish], list[Wish]]:
    """The wishes to render (one per match, by name) and those that ask for a match again."""
    kept: dict[tuple[str, str], Wish] = {}
    again = []
    for w in sorted(wishes, key=lambda w: w.name):
        if (w.kind, w.value) in kept:
            again.append(w)
        else:
            kept[(w.kind, w.value)] = w
    return list(kept.values()), again


# --------------------------------------------------------------------------- udev's marks


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class NetLink:
    """A network link as the helper sees it: sysfs (address, a ``device``) and udev's database."""

    name: str
    mac: str
    hardware: bool  # sysfs has <link>/device: 81-kvdev.rules' TEST=="device"
    props: Mapping[str, str]


def parse_export_db(text: str) -> dict[str, dict[str, str]]:
    """The udev properties of every ``net`` device in ``udevadm info --export-db``, by name."""
    out: dict[str, dict[str, str]] = {}
    for block in text.split("\n\n"):
        props: dict[str, str] = {}
        path = ""
        for line in block.splitlines():
            if line.startswith("P: "):
                path = line[3:]
            elif line.startswith("E: "):
                key, _, value = line[3:].partition("=")
                props[key] = value
        if props.get("SUBSYSTEM") == "net":
            out[props.get("INTERFACE") or path.rpartition("/")[2]] = props
    return out


def marked(link: NetLink, has_mark: Mapping[str, bool], link_files: frozenset[str]) -> bool:
    """True when ``81-kvdev.rules`` marks ``link`` now.

    ``has_mark`` tells whether a mark file exists (the helper tests one name per key, as the
    rule does); ``link_files`` are the paths of the ``.link`` files the helper keeps.
    """
    if not link.hardware:
        return False
    link_file = link.props.get("ID_NET_LINK_FILE", "")
    if fnmatchcase(link_file, LINK_FILE_GLOB) and link_file in link_files:
        return True
    if link.mac and has_mark.get(f"{MAC_MARK}{link.mac}", False):
        return True
    id_path = link.props.get("ID_PATH", "")
    return (
        id_path.startswith(PCI_MARK)
        and len(id_path) > len(PCI_MARK)
        and has_mark.get(id_path, False)
    )


def mark_keys(link: NetLink) -> list[str]:
    """The mark file names ``marked`` asks about for ``link`` (none without hardware)."""
    if not link.hardware:
        return []
    keys = [f"{MAC_MARK}{link.mac}"] if link.mac else []
    id_path = link.props.get("ID_PATH", "")
    if id_path.startswith(PCI_MARK) and len(id_path) > len(PCI_MARK) and "/" not in id_path:
        keys.append(id_path)
    return keys


def stale(
    links: Iterable[NetLink], has_mark: Mapping[str, bool], link_files: frozenset[str]
) -> list[tuple[NetLink, bool]]:
    """The links whose udev mark (``KVDEV_MANAGED=1``) is not what the rule decides, and that."""
    out = []
    for link in links:
        want = marked(link, has_mark, link_files)
        if want != (link.props.get("KVDEV_MANAGED") == "1"):
            out.append((link, want))
    return out


# --------------------------------------------------------------------------- the old ACL

_ACL_VERSION = 2  # the system.posix_acl_access xattr: u32 version, then (u16 tag, u16 perm, u32 id)
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK = 1, 2, 4, 8, 0x10
_ENTRY = 8


def acl_without_user(acl: bytes, uid: int) -> tuple[bytes | None, int] | None:
    """``acl`` less its entry for ``uid``; None when it has none (or cannot be read).

    Else (the new ACL, or None when only the mode's own entries are left; the group class's
    bits). With named entries left, the mask is recomputed (the union of the group class);
    with none, the caller removes the ACL and sets the mode's group bits to the owning group's.
    """
    version = int.from_bytes(acl[:4], "little")
    if len(acl) < 4 or (len(acl) - 4) % _ENTRY or version != _ACL_VERSION:
        return None
    entries = [
        (
            int.from_bytes(acl[i : i + 2], "little"),
            int.from_bytes(acl[i + 2 : i + 4], "little"),
            int.from_bytes(acl[i + 4 : i + 8], "little"),
        )
        for i in range(4, len(acl), _ENTRY)
    ]
    kept = [e for e in entries if not (e[0] == _ACL_USER and e[2] == uid)]
    if len(kept) == len(entries):
        return None
    group_obj = next((perm for tag, perm, _ in kept if tag == _ACL_GROUP_OBJ), 0)
    named = [e for e in kept if e[0] in (_ACL_USER, _ACL_GROUP)]
    if not named:
        return None, group_obj
    mask = group_obj
    for _, perm, _ in named:
        mask |= perm
    kept = [(t, mask if t == _ACL_MASK else p, i) for t, p, i in kept]
    data = _ACL_VERSION.to_bytes(4, "little") + b"".join(
        t.to_bytes(2, "little") + p.to_bytes(2, "little") + i.to_bytes(4, "little")
        for t, p, i in kept
    )
    return data, mask
