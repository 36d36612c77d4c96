"""The crash-and-restart suite's world: many NICs, random desired states, the exact check.

``Lab`` gives a namespace ``COUNT`` veth links (MACs ``02:00:00:cc:00:0i``, unmanaged peers
``cpeer<i>``) and a metadata tree describing them (claim ``crash``, matched by MAC).
``Lab.draw`` picks a new desired state: names from a random permutation (so renames chain and
swap through temporary names) or fresh ones, MTU, addresses (IPv4 and IPv6) and routes per NIC.
``Lab.differences`` lists every way the kernel, the link-wish directory, ``status.json`` and
``altnames.json`` differ from exactly that state (empty: converged). IPv6 duplicate address
detection is off in the lab, so every kernel change after a write is the agent's (the kill
points count them).
"""

import ipaddress
import json
import random
import subprocess
from dataclasses import dataclass

from agentlab import add_link, ip_json, write_atomically
from kvdev.guest.core.linkwish import wish_file
from kvdev.guest.core.planning import TEMP_PREFIX

COUNT = 6
CLAIM, REQUEST, DRIVER = "crash", "nics", "crash.example.com"
METADATA = f"resourceclaims/{CLAIM}/{REQUEST}/{DRIVER}-metadata.json"
HINTS = "kvdev/guest-hints.json"
MTUS = (1500, 4000, 9000)


def mac(i):
    return f"02:00:00:cc:00:{i:02x}"


def altname(i):
    return f"{CLAIM}.{REQUEST}.vf-{i}"


@dataclass(frozen=True)
class Want:
    """One NIC's desired state."""

    name: str
    mtu: int
    addresses: frozenset[str]  # networkData.ips + the hint's
    routes: frozenset[tuple[str, str, int]]  # (destination, gateway, metric as the kernel keeps it)


def _routes(i, rng):
    pool = [
        (f"10.{30 + i}.0.0/16", f"10.20.{i}.1", 100),
        (f"10.{40 + i}.0.0/24", f"10.20.{i}.1", None),
        (f"10.{40 + i}.1.0/24", f"10.20.{i}.2", 50),
        (f"fd00:{30 + i}::/48", _ip(f"fd00:20:{i}::1"), None),
        (f"fd00:{40 + i}::/64", _ip(f"fd00:20:{i}::2"), 300),
    ]
    return rng.sample(pool, rng.randint(0, len(pool)))


class Lab:
    """The namespace, the tree and the desired state in force."""

    def __init__(self, ns, work, seed):
        self.ns, self.work = ns, work
        self.rng = random.Random(seed)  # noqa: S311 - reproducible test data
        self.tree = work / "tree"
        self.link_dir, self.state_dir = work / "network", work / "state"
        self.want: dict[int, Want] = {}
        self.generation = 0
        for key in ("all", "default"):  # no DAD: every change seen in a run is the agent's
            subprocess.run(
                ["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.accept_dad=0"],
                check=True,
            )
        for i in range(COUNT):
            add_link(ns, f"n{i}", mac(i), f"cpeer{i}")

    def draw(self, *, trade=False, named=True):
        """A new desired state (names differ from the current ones) written into the tree.

        ``trade``: a permutation of the names in use; ``named=False``: no name hints at all.
        """
        rng = self.rng
        if not trade and rng.random() < 0.2:
            names = [f"x{rng.randint(0, 99)}n{i}" for i in range(COUNT)]
        else:
            while True:
                names = rng.sample([f"d{j}" for j in range(COUNT)], COUNT)
                if not self.want or names != [self.want[i].name for i in range(COUNT)]:
                    break
        hints, devices, want = [], [], {}
        for i, name in enumerate(names):
            ips = [f"10.20.{i}.5/24", _iface(f"fd00:20:{i}::5/64")]
            extra = rng.sample([f"10.20.{i}.{k}/24" for k in range(10, 14)], rng.randint(0, 3))
            routes = _routes(i, rng)
            mtu = rng.choice(MTUS)
            devices.append(
                {
                    "driver": DRIVER,
                    "pool": "node-a",
                    "name": f"vf-{i}",
                    "networkData": {"ips": ips, "hardwareAddress": mac(i)},
                }
            )
            network = {
                **({"interfaceName": name} if named else {}),
                "mtu": mtu,
                "addresses": extra,
                "routes": [
                    {"destination": d, "gateway": g} | ({"metric": m} if m is not None else {})
                    for d, g, m in routes
                ],
            }
            hints.append(
                {
                    "claim": {"resourceClaimName": CLAIM},
                    "request": REQUEST,
                    "driver": DRIVER,
                    "device": f"vf-{i}",
                    "network": network,
                }
            )
            kept = frozenset(
                (_net(d), _ip(g), m if m is not None else (1024 if ":" in d else 0))
                for d, g, m in routes
            )
            want[i] = Want(name, mtu, frozenset(map(_iface, ips + extra)), kept)
        self.generation += 1
        meta = {"name": CLAIM, "namespace": "vms", "uid": "c0ffee00-0000-4000-8000-000000000001"}
        doc = {
            "apiVersion": "metadata.resource.k8s.io/v1alpha1",
            "kind": "DeviceMetadata",
            "metadata": meta | {"generation": self.generation},
            "requests": [{"name": REQUEST, "devices": devices}],
        }
        hint_doc = {
            "apiVersion": "guest.kvdev.io/v1alpha1",
            "kind": "GuestHints",
            "metadata": {"name": "crash", "generation": self.generation},
            "devices": hints,
        }
        for rel, body in ((METADATA, doc), (HINTS, hint_doc)):
            path = self.tree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(body) + "\n")
        self.want = want
        return want

    def differences(self):
        """Every way the guest differs from exactly the desired state; empty when converged."""
        found = []
        by_mac = {entry.get("address"): entry for entry in ip_json(self.ns, "addr")}
        names = [entry["ifname"] for entry in by_mac.values()]
        found += [f"temporary name left: {n}" for n in names if n.startswith(TEMP_PREFIX)]
        found += [f"name held twice: {n}" for n in set(names) if names.count(n) > 1]
        for i, want in self.want.items():
            entry = by_mac.get(mac(i))
            if entry is None:
                found.append(f"{mac(i)}: link gone")
                continue
            found += _link_differences(self.ns, i, entry, want)
        found += self._file_differences()
        journal = _load(self.state_dir / "altnames.json")  # what kvdev added: exactly its own
        added = {
            str(by_mac[mac(i)]["ifindex"]): [altname(i)] for i in self.want if mac(i) in by_mac
        }
        if journal != added:
            found.append(f"altnames.json: {journal}, expected {added}")
        return found

    def _file_differences(self):
        found = []
        wanted = {wish_file(w.name): i for i, w in self.want.items()}
        present = sorted(p.name for p in self.link_dir.iterdir()) if self.link_dir.is_dir() else []
        found += [f"stray file in the link dir: {n}" for n in present if n not in wanted]
        for file, i in wanted.items():
            path = self.link_dir / file
            text = path.read_text() if path.exists() else ""
            if text != f"mac {mac(i)}\n":
                found.append(f"{file}: missing or wrong ({text!r})")
        states = sorted(p.name for p in self.state_dir.iterdir()) if self.state_dir.is_dir() else []
        found += [
            f"stray file in the state dir: {n}"
            for n in states
            if n not in {"status.json", "marks", "altnames.json"}
        ]
        marks = self.state_dir / "marks"
        have = sorted(p.name for p in marks.iterdir()) if marks.is_dir() else []
        want_marks = sorted(f"mac-{mac(i)}" for i in self.want)  # core.marking: one per link
        if have != want_marks:
            found.append(f"link marks {have}, expected {want_marks}")
        status = _load(self.state_dir / "status.json")
        phases = {d["ref"]: (d["phase"], d["interface"]) for d in status.get("devices", [])}
        for i, want in self.want.items():
            ref = f"{CLAIM}/{REQUEST}/{DRIVER}/node-a/vf-{i}"
            if phases.get(ref) != ("Configured", want.name):
                found.append(f"status.json: {ref} is {phases.get(ref)}")
        if status.get("converged") is not True:
            found.append("status.json: not converged")
        return found


def _net(text):
    return str(ipaddress.ip_network(text))


def _ip(text):
    return str(ipaddress.ip_address(text))


def _iface(text):
    return str(ipaddress.ip_interface(text))


def _load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _link_differences(ns, i, entry, want):
    name, found = entry["ifname"], []
    if name != want.name:
        found.append(f"{mac(i)} is {name}, wants {want.name}")
    altnames = sorted(entry.get("altnames", []))
    if altnames != [altname(i)]:
        found.append(f"{name}: altnames {altnames}")
    if entry.get("mtu") != want.mtu:
        found.append(f"{name}: mtu {entry.get('mtu')}, wants {want.mtu}")
    if "UP" not in entry.get("flags", []):
        found.append(f"{name}: down")
    have = [
        f"{a['local']}/{a['prefixlen']}"
        for a in entry.get("addr_info", [])
        if a.get("scope") == "global"
    ]
    if len(have) != len(set(have)) or set(have) != want.addresses:
        found.append(f"{name}: addresses {sorted(have)}, wants {sorted(want.addresses)}")
    routes = [
        (r["dst"], r.get("gateway"), r.get("metric", 0))
        for family in ("-4", "-6")
        for r in ip_json(ns, family, "route", "show", "table", "all", "dev", name)
        if r.get("protocol") != "kernel"
    ]
    if len(routes) != len(set(routes)) or set(routes) != want.routes:
        found.append(f"{name}: routes {sorted(routes)}, wants {sorted(want.routes)}")
    return found


def peers(ns):
    """The unmanaged peers as they are (name, MAC, MTU, up): never to change."""
    return sorted(
        (e["ifname"], e.get("address"), e.get("mtu"), "UP" in e.get("flags", []))
        for e in ip_json(ns, "addr")
        if e["ifname"].startswith("cpeer")
    )
