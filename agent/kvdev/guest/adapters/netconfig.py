"""Reading the guest's own network configuration: which NICs it names, for ``core.primary``.

Under a config root (``/`` in a guest; a scratch tree in tests) it reads, bounded:

* NetworkManager keyfiles, ``etc/NetworkManager/system-connections/*.nmconnection``:
  ``interface-name=`` of ``[connection]``, ``mac-address=`` of ``[ethernet]``, of a profile
  that will give its NIC a default route (DHCP/SLAAC, NM's default method, or a gateway);
* netplan, ``etc/netplan/*.yaml``, and cloud-init's network-config (version 2 like netplan,
  version 1 ``type: physical`` entries with ``name``/``mac_address``) in
  ``etc/cloud/cloud.cfg.d/*.cfg`` and ``var/lib/cloud/seed/*/network-config``: each
  ``ethernets`` entry's ``match`` (``macaddress``, ``name``) or, without one, its id;
* ifupdown, ``etc/network/interfaces`` and ``etc/network/interfaces.d/*``: the names of
  ``iface``, ``auto`` and ``allow-*`` lines (``lo`` aside);
* systemd-networkd, ``etc/systemd/network/*.network``: ``[Match]`` ``Name=`` and
  ``MACAddress=`` (lists too) of a file with ``DHCP=`` on or a ``Gateway=``: cloud-init renders
  a file of static addresses for every NIC of its network data, and those NICs are not the
  guest's way out (kvdev may take them; its marks then keep networkd off them); names with glob
  characters name no NIC.

YAML is read with PyYAML when the guest has it (cloud-init and netplan need it there); without
it, every MAC after a ``macaddress:``/``mac_address:`` key is still found. Bounds: 64 files per
directory (by name), 64 KiB per file, 1 MiB in all; what is left out or cannot be read is a
problem (``file: why``) for the log, never an exception: a pass never fails on these files.
Each file is read by ``kvdev._confined.read_path``: links followed (they are the guest's own
configuration), but only a regular file is opened, so a FIFO or a device there never blocks a
pass. It decides nothing.

``dns_servers`` reads the guest's DNS servers for the safety policy (``safety.Guard``): the
``nameserver`` lines of ``etc/resolv.conf`` and of the files systemd-resolved
(``run/systemd/resolve/resolv.conf``: the servers behind its 127.0.0.53 stub) and
NetworkManager (``run/NetworkManager/resolv.conf``) write; loopback servers (a local stub or
cache) name nothing. Same bounds per file; at most ``MAX_NAMESERVERS`` servers.

``nm_managed`` reads NetworkManager's runtime device state (``run/NetworkManager/devices/
<ifindex>``, ``managed=`` of ``[device]``) of the links asked about: which it manages now
(``core.marking.nm_overrides``). At most 4 KiB per file.

``ifcfg`` reads the ifcfg-rh files (``etc/sysconfig/network-scripts/ifcfg-*``: ``DEVICE=``,
``HWADDR=``/``MACADDR=``, else the file's suffix): the NICs they name, which NetworkManager up to
1.58 (its ifcfg-rh plugin, removed in 1.60) and the network-scripts would configure.
``cloud_init_hotplug`` says where cloud-init's network hotplug is on (``updates: network: when:``
listing ``hotplug`` in ``etc/cloud/cloud.cfg``, ``cloud.cfg.d/*.cfg`` or the instance's
cloud-config, or the flag file ``var/lib/cloud/hotplug.enabled``): cloud-init then renders and
applies network configuration for every NIC that appears, a DRA NIC kvdev configures included.
Both feed ``core.rivals``; same bounds.

``auto_default`` reads NetworkManager's configuration (``etc/NetworkManager/NetworkManager.conf``
and ``conf.d/*.conf``, then ``usr/lib/NetworkManager/conf.d``): whether NetworkManager is there
and would give every ethernet NIC without a profile a DHCP connection of its own (no
``no-auto-default=*`` in ``[main]``), and which NICs ``no-auto-default`` leaves out (by MAC,
``mac:``, or ``interface-name:``).
"""

from __future__ import annotations

import ipaddress
import re
import stat
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kvdev._confined import RefusedError, read_path
from kvdev.guest.core.primary import AutoDefault, Configured

if TYPE_CHECKING:
    import configparser

MAX_FILES_PER_DIR = 64
MAX_FILE_BYTES = 64 * 1024
MAX_TOTAL_BYTES = 1 << 20
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_YAML_MAC = re.compile(r"(?:macaddress|mac_address)\s*:\s*[\"']?([0-9A-Fa-f:]{17})")
_GLOB = re.compile(r"[*?\[\]!]")


def _mac(value: object) -> str | None:
    text = str(value).strip().lower() if isinstance(value, str) else ""
    return text if _MAC.match(text) else None


def _name(value: object) -> str | None:
    text = str(value).strip() if isinstance(value, str | int) else ""
    return text if text and not _GLOB.search(text) and len(text) < 16 and text != "lo" else None


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_TOTAL_BYTES


def _files(directory: Path, suffix: str, problems: list[str]) -> list[Path]:
    try:
        names = sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))
    except OSError:  # no such directory: nothing configured there
        return []
    if len(names) > MAX_FILES_PER_DIR:
        problems.append(f"{directory}: {len(names)} files, only the first {MAX_FILES_PER_DIR} read")
    return [directory / n for n in names[:MAX_FILES_PER_DIR]]


def _text(path: Path, budget: _Budget, problems: list[str]) -> str | None:
    """The file's text; None, and a problem, when it is not read.

    Read by ``kvdev._confined.read_path``: links followed (``resolv.conf`` is one), a FIFO or a
    device never opened.
    """
    room = min(MAX_FILE_BYTES, budget.left)
    try:
        data = read_path(path, room)
    except RefusedError as e:
        if not stat.S_ISDIR(e.mode):
            problems.append(f"{path}: {e.reason}")
        return None
    except OSError as e:
        if not isinstance(e, FileNotFoundError):
            problems.append(f"{path}: cannot read: {e.strerror or e}")
        return None
    budget.left -= len(data)
    return data.decode("utf-8", "replace")


def _ini(text: str, source: str, problems: list[str]) -> configparser.ConfigParser | None:
    import configparser  # noqa: PLC0415 - only where there are keyfiles (~1 ms of a start)

    parser = configparser.ConfigParser(strict=False, interpolation=None, allow_no_value=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source)
    except configparser.Error as e:
        problems.append(f"{source}: {str(e).splitlines()[0]}")
        return None
    return parser


_NETWORKD_ROUTED = re.compile(
    r"(?m)^\s*(?:DHCP\s*=\s*(?:yes|true|on|1|ipv4|ipv6)\s*$|Gateway\s*=\s*\S)"
)


def _keyfile_routed(parser: configparser.ConfigParser) -> bool:
    """Whether the profile will give its NIC a default route: DHCP/SLAAC or a gateway.

    DHCP/SLAAC is NM's default method; a profile of static addresses only is not the guest's
    way out.
    """
    for family in ("ipv4", "ipv6"):
        method: str = parser.get(family, "method", fallback="auto") or "auto"
        gateway: str = parser.get(family, "gateway", fallback="") or ""
        if method in {"auto", "dhcp"} or gateway:
            return True
        if parser.has_section(family) and any(
            k.startswith("address") and "," in (v or "") for k, v in parser.items(family)
        ):
            return True  # address1=10.0.0.2/24,10.0.0.1: a gateway
    return False


def _keyfile(text: str, source: str, problems: list[str]) -> Iterator[Configured]:
    parser = _ini(text, source, problems)
    if parser is None or not _keyfile_routed(parser):
        return
    name = _name(parser.get("connection", "interface-name", fallback=None))
    mac = _mac(parser.get("ethernet", "mac-address", fallback=None))
    if name or mac:
        yield Configured(source, name, mac)


def _networkd(text: str, source: str, problems: list[str]) -> Iterator[Configured]:
    parser = _ini(text, source, problems)
    if parser is None or not parser.has_section("Match"):
        return
    if not _NETWORKD_ROUTED.search(text):
        return  # static addresses only (cloud-init renders these for every NIC): not the way out
    for mac in (parser.get("Match", "MACAddress", fallback="") or "").split():
        if _mac(mac):
            yield Configured(f"{source} [Match]", None, _mac(mac))
    for name in (parser.get("Match", "Name", fallback="") or "").split():
        if _name(name):
            yield Configured(f"{source} [Match]", _name(name), None)


def _ifupdown(text: str, source: str, problems: list[str]) -> Iterator[Configured]:
    del problems
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and (words[0] in {"iface", "auto"} or words[0].startswith("allow-")):
            for word in words[1:2] if words[0] == "iface" else words[1:]:
                if name := _name(word.split(":", 1)[0]):
                    yield Configured(source, name, None)


def _yaml_load(text: str) -> object:
    try:
        import yaml  # noqa: PLC0415 - optional: the guest's netplan/cloud-init bring it
    except ImportError:
        return None
    return yaml.safe_load(text)


def _yaml(text: str, source: str, problems: list[str]) -> Iterator[Configured]:
    try:
        doc = _yaml_load(text)
    except Exception as e:  # noqa: BLE001 - any YAML error: a problem, never a failed pass
        problems.append(f"{source}: not YAML: {(str(e) or type(e).__name__).splitlines()[0]}")
        doc = None
    if doc is None:  # no PyYAML (or unreadable): the MACs it names still count
        for mac in _YAML_MAC.findall(text):
            if found := _mac(mac.lower()):
                yield Configured(source, None, found)
        return
    net = doc.get("network", doc) if isinstance(doc, dict) else None
    if isinstance(net, dict):
        yield from _version2(net.get("ethernets"), source)
        yield from _version1(net.get("config"), source)


def _version2(ethernets: object, source: str) -> Iterator[Configured]:
    """netplan, and cloud-init's network-config version 2: ``ethernets``."""
    for key, entry in ethernets.items() if isinstance(ethernets, dict) else ():
        where = f"{source} ethernets.{key}"
        match = entry.get("match") if isinstance(entry, dict) else None
        if isinstance(match, dict):  # a glob names no NIC
            name, mac = _name(match.get("name")), _mac(match.get("macaddress"))
            if name or mac:
                yield Configured(where, name, mac)
        elif name := _name(key):
            yield Configured(where, name, None)


def _version1(config: object, source: str) -> Iterator[Configured]:
    """cloud-init's network-config version 1: ``type: physical`` entries."""
    for entry in config if isinstance(config, list) else ():
        if isinstance(entry, dict) and entry.get("type") == "physical":
            name, mac = _name(entry.get("name")), _mac(entry.get("mac_address"))
            if name or mac:
                yield Configured(f"{source} config[{entry.get('name')}]", name, mac)


_Reader = Callable[[str, str, list[str]], Iterator[Configured]]
_WHERE: tuple[tuple[str, str, _Reader], ...] = (
    ("etc/NetworkManager/system-connections", ".nmconnection", _keyfile),
    ("etc/netplan", ".yaml", _yaml),
    ("etc/cloud/cloud.cfg.d", ".cfg", _yaml),
    ("etc/network/interfaces.d", "", _ifupdown),
    ("etc/systemd/network", ".network", _networkd),
)
_SINGLE: tuple[tuple[str, _Reader], ...] = (("etc/network/interfaces", _ifupdown),)


def read(root: Path) -> tuple[tuple[Configured, ...], tuple[str, ...]]:
    """The NICs the guest's network configuration under ``root`` names; the problems met."""
    problems: list[str] = []
    budget = _Budget()
    paths: list[tuple[Path, _Reader]] = [(root / rel, reader) for rel, reader in _SINGLE]
    for rel, suffix, reader in _WHERE:
        paths += [(p, reader) for p in _files(root / rel, suffix, problems)]
    for seed in _files(root / "var/lib/cloud/seed", "", problems):
        paths.append((seed / "network-config", _yaml))
    out: list[Configured] = []
    for path, reader in paths:
        text = _text(path, budget, problems)
        if text is not None:
            out.extend(reader(text, str(path), problems))
    return tuple(out), tuple(problems)


_IFCFG_DIR = "etc/sysconfig/network-scripts"
_IFCFG_KEY = re.compile(r"""(?m)^\s*(DEVICE|HWADDR|MACADDR)\s*=\s*["']?([^"'\s#]*)""")


def ifcfg(root: Path) -> tuple[tuple[Configured, ...], tuple[str, ...]]:
    """The NICs the ifcfg-rh files under ``root`` name (one entry per file); the problems met."""
    problems: list[str] = []
    budget = _Budget()
    out: list[Configured] = []
    for path in _files(root / _IFCFG_DIR, "", problems):
        if not path.name.startswith("ifcfg-") or path.name == "ifcfg-lo":
            continue
        text = _text(path, budget, problems)
        if text is None:
            continue
        keys = dict(_IFCFG_KEY.findall(text))
        name = _name(keys.get("DEVICE") or path.name.removeprefix("ifcfg-"))
        mac = _mac((keys.get("HWADDR") or keys.get("MACADDR") or "").lower())
        if name or mac:
            out.append(Configured(str(path), name, mac))
    return tuple(out), tuple(problems)


_CLOUD_CFG = ("etc/cloud/cloud.cfg", "var/lib/cloud/instance/cloud-config.txt")
HOTPLUG_FLAG = "var/lib/cloud/hotplug.enabled"
_HOTPLUG_TEXT = re.compile(r"(?s)updates\s*:.*?network\s*:.*?when\s*:[^\n]*hotplug|-\s*hotplug\b")


def _hotplug_on(text: str) -> bool:
    """``updates.network.when`` lists ``hotplug`` (read as YAML when PyYAML is there)."""
    try:
        doc = _yaml_load(text)
    except Exception:  # noqa: BLE001 - not YAML: looked at as text below
        doc = None
    if doc is None:
        return bool(_HOTPLUG_TEXT.search(text))
    updates = doc.get("updates") if isinstance(doc, dict) else None
    network = updates.get("network") if isinstance(updates, dict) else None
    when = network.get("when") if isinstance(network, dict) else None
    return isinstance(when, list) and "hotplug" in when


def cloud_init_hotplug(root: Path) -> tuple[str | None, tuple[str, ...]]:
    """Where cloud-init's network hotplug is switched on under ``root`` (None: nowhere)."""
    problems: list[str] = []
    if (root / HOTPLUG_FLAG).is_file():
        return str(root / HOTPLUG_FLAG), ()
    budget = _Budget()
    paths = [root / rel for rel in _CLOUD_CFG]
    paths[1:1] = _files(root / "etc/cloud/cloud.cfg.d", ".cfg", problems)
    for path in paths:
        text = _text(path, budget, problems)
        if text is not None and _hotplug_on(text):
            return str(path), tuple(problems)
    return None, tuple(problems)


def rival_config(root: Path) -> tuple[tuple[Configured, ...], str | None, tuple[str, ...]]:
    """``ifcfg`` and ``cloud_init_hotplug`` at once: what ``core.rivals`` judges; the problems."""
    named, problems = ifcfg(root)
    hotplug, more = cloud_init_hotplug(root)
    return named, hotplug, problems + more


MAX_NAMESERVERS = 8
_RESOLV = (
    "etc/resolv.conf",
    "run/systemd/resolve/resolv.conf",
    "run/NetworkManager/resolv.conf",
)


def dns_servers(root: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The guest's DNS servers (not loopback), in the order found; the problems met."""
    problems: list[str] = []
    budget = _Budget()
    found: dict[str, None] = {}
    for rel in _RESOLV:
        text = _text(root / rel, budget, problems)
        for line in (text or "").splitlines():
            words = line.split()
            if len(words) < 2 or words[0] != "nameserver":
                continue
            try:
                ip = ipaddress.ip_address(words[1].split("%", 1)[0])
            except ValueError:
                continue
            if not ip.is_loopback and not ip.is_unspecified and len(found) < MAX_NAMESERVERS:
                found[str(ip)] = None
    return tuple(found), tuple(problems)


_NM_CONF = (
    ("usr/lib/NetworkManager/conf.d", ".conf"),
    ("etc/NetworkManager/conf.d", ".conf"),
)


def auto_default(root: Path) -> tuple[AutoDefault | None, tuple[str, ...]]:
    """NetworkManager's auto-default as its configuration sets it; None without NetworkManager.

    NetworkManager reads ``NetworkManager.conf``, then ``conf.d`` (``usr/lib`` before
    ``etc``), a later ``no-auto-default=`` replacing an earlier one.
    """
    problems: list[str] = []
    main = root / "etc/NetworkManager/NetworkManager.conf"
    paths = [main]
    for rel, suffix in _NM_CONF:
        paths += _files(root / rel, suffix, problems)
    if not main.exists() and len(paths) == 1:
        return None, tuple(problems)
    budget = _Budget()
    value = ""
    for path in paths:
        text = _text(path, budget, problems)
        parser = _ini(text, str(path), problems) if text is not None else None
        if parser is not None and parser.has_option("main", "no-auto-default"):
            value = parser.get("main", "no-auto-default", fallback="") or ""
    macs: set[str] = set()
    names: set[str] = set()
    for item in re.split(r"[,;\s]+", value):
        if item == "*":
            return AutoDefault(on=False), tuple(problems)
        spec = item.removeprefix("mac:")
        if mac := _mac(spec.lower()):
            macs.add(mac)
        elif item.startswith("interface-name:") and (
            name := _name(item.removeprefix("interface-name:"))
        ):
            names.add(name)
    return AutoDefault(on=True, macs=frozenset(macs), names=frozenset(names)), tuple(problems)


NM_STATE_MAX_BYTES = 4096
# NetworkManager's device state file has one section, [device]: a pattern, not configparser
# (a tenth of the cost, on every pass for every link kvdev configures).
_NM_MANAGED = re.compile(r"(?m)^\s*managed\s*=\s*(\S+)\s*$")


def nm_managed(root: Path, ifindexes: Collection[int]) -> frozenset[int]:
    """Of ``ifindexes``, those NetworkManager's runtime device state says it manages."""
    directory = root / "run/NetworkManager/devices"
    if not ifindexes or not directory.is_dir():
        return frozenset()
    out = set()
    for ifindex in sorted(ifindexes):
        try:
            data = read_path(directory / str(ifindex), NM_STATE_MAX_BYTES)
        except (OSError, RefusedError):
            continue
        found = _NM_MANAGED.search(data.decode("utf-8", "replace"))
        if found is not None and found.group(1).lower() in {"true", "yes", "1"}:
            out.add(ifindex)
    return frozenset(out)
