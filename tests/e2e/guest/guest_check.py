"""The guest side of the e2e test: runs INSIDE the VM (Debian's python3, stdlib only).

Owns: looking at the guest -- the kvdev service and package (systemctl, dpkg), the agent's
own view (``kvdev status --json``) and the kernel's (``ip -j link/addr``) -- and judging it
against the checks the host sends. Must not configure anything: the agent under test does.

Protocol, through the share mounted at ROOT (the first argument): for N = 1, 2, ... the host
writes ``ctl/phase-N.json`` (``{"name", "checks": [...], "timeoutSeconds", "final"}``); this
script looks at the guest until every check holds or the timeout passes, then writes
``out/phase-N.json`` (verdicts, the last snapshot, guest uptime and seconds taken). It stops
after a ``final`` phase or when ``ctl/abort`` appears; the unit around it then saves the
journal into the share and powers the guest off.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

POLL_SECONDS = 1.0
CTL_WAIT_SECONDS = 900.0  # the host drives the phases; it has its own, shorter, timeouts
KERNEL_ALTNAME_PREFIXES = ("enp", "enx", "ens", "eth")  # udev's predictable names
SHARE_UNIT = "kvdev-metadata-share.service"
SHARE_TARGET = "/run/kubernetes.io/dra-device-attributes"  # the agent's default root, resolved
CAP_NET_ADMIN = 1 << 12
NOBODY = 65534


def run(argv: list[str]) -> tuple[int, str, str]:
    """Run a command; its exit code, stdout and stderr."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "", f"{argv[0]}: {e}"
    return done.returncode, done.stdout, done.stderr


def run_json(argv: list[str]) -> Any:
    """A command's JSON output, or an ``{"error": ...}`` object saying why there is none."""
    rc, out, err = run(argv)
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return {"error": f"{' '.join(argv)}: exit {rc}: {err.strip() or out.strip()}"}


def uptime() -> float:
    """Seconds since the guest booted."""
    return float(Path("/proc/uptime").read_text().split()[0])


def package_of(path: str) -> str:
    """The package that installed ``path``, also when it shipped it under the merged-/usr alias.

    Trixie's systemd reports /usr/lib/systemd/system/..., bookworm's /lib/systemd/system/...; a
    package built by an older debhelper ships /lib/..., trixie's (kvdev's) /usr/lib/...: the
    same file on a merged-/usr system, which dpkg -S knows under one name only.
    """
    aliases = [path]
    for short, full in (("/lib/", "/usr/lib/"), ("/bin/", "/usr/bin/")):
        if path.startswith(full):
            aliases.append(short + path.removeprefix(full))
        elif path.startswith(short):
            aliases.append(full + path.removeprefix(short))
    for candidate in aliases:
        rc, out, _ = run(["dpkg", "-S", candidate])
        if rc == 0:
            return out.split(":", 1)[0]
    return f"no package has {' or '.join(aliases)}"


def service_facts() -> dict[str, Any]:
    """What systemd and dpkg say about kvdev-agent.service and who installed its files."""
    _, show, _ = run(
        [
            "systemctl",
            "show",
            "kvdev-agent.service",
            "-p",
            "ActiveState,SubState,MainPID,FragmentPath,Type,NRestarts,User,Group",
            "-p",  # systemd's own clock for start -> READY=1 (Type=notify)
            "ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic",
        ]
    )
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    pid = props.get("MainPID", "0")
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        argv = [a.decode() for a in cmdline if a]
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        argv, status = [], ""
    proc = {
        key: value.strip()
        for key, _, value in (line.partition(":") for line in status.splitlines())
        if key
        in {"Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "VmRSS"}
    }
    owners = {
        path: package_of(path)
        for path in ("/usr/bin/kvdev-agent", "/usr/bin/kvdev", props.get("FragmentPath", ""))
    }
    _, pkg, _ = run(["dpkg-query", "-W", "-f=${Package} ${Version} ${Status}", "kvdev"])
    return {"properties": props, "argv": argv, "owners": owners, "package": pkg, "proc": proc}


def privilege_facts() -> dict[str, Any]:
    """Who owns what the agent wrote, its exposure score, and what a reader (not root) gets."""
    written = [*Path("/var/lib/kvdev/links").glob("*.wish")]  # the agent's link wishes
    written.append(Path("/var/lib/kvdev/status.json"))
    owners = {str(path): path.stat().st_uid for path in written if path.exists()}
    # the .link files root's kvdev-udev-marks rendered, and what kvdev itself may do there
    rendered = {
        str(path): path.stat().st_uid
        for path in Path("/run/systemd/network").glob("10-kvdev-*.link")
    }
    probe = "/run/systemd/network/99-kvdev-probe.link"
    try:
        user = pwd.getpwnam("kvdev")
        as_kvdev = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}"]
        tried = run([*as_kvdev, "--clear-groups", "sh", "-c", f"printf '[Match]\\n' >{probe}"])
    except KeyError:
        tried = (-1, "", "no user kvdev")
    created = Path(probe).exists()
    Path(probe).unlink(missing_ok=True)
    _, out, err = run(["systemd-analyze", "security", "--no-pager", "kvdev-agent.service"])
    found = re.search(r"Overall exposure level for kvdev-agent.service: (\d+\.\d+)", out)
    try:
        gid = pwd.getpwnam("kvdev").pw_gid
    except KeyError:
        gid = -1
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}"]
    member = run([*as_nobody, f"--groups={gid}", "kvdev", "status", "--json"])
    stranger = run([*as_nobody, "--clear-groups", "kvdev", "status"])
    try:
        member_kind = json.loads(member[1]).get("kind")
    except json.JSONDecodeError:
        member_kind = None
    return {
        "owners": owners,
        "rendered": rendered,
        "kvdevWroteNetworkDir": created or tried[0] == 0,
        "exposure": float(found.group(1)) if found else None,
        "exposureOutput": (out + err)[-2000:] if not found else "",
        "member": {"rc": member[0], "kind": member_kind, "stderr": member[2].strip()},
        "stranger": {"rc": stranger[0], "stderr": stranger[2].strip()},
    }


def metadata_root() -> dict[str, str]:
    """The agent's metadata root (its config file) and what it resolves to in the guest now."""
    try:
        config = tomllib.loads(Path("/etc/kvdev/agent.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        return {"error": f"/etc/kvdev/agent.toml: {e}"}
    root = config.get("metadata-root", "/var/run/kubernetes.io/dra-device-attributes")
    return {"configured": root, "resolved": os.path.realpath(root)}


def share_facts() -> dict[str, Any]:
    """kvdev-metadata-share.service's state and what is mounted at the agent's default root."""
    _, show, _ = run(["systemctl", "show", SHARE_UNIT, "-p", "ActiveState,SubState,Result"])
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    mount = run_json(["findmnt", "-J", "-M", SHARE_TARGET, "-o", "SOURCE,FSTYPE,OPTIONS"])
    found = mount.get("filesystems", []) if isinstance(mount, dict) else []
    return {"unit": props, "mounts": found}


def stream_digests() -> dict[str, str]:
    """The SHA-256 of each metadata stream the agent's default root holds now, by file name."""
    root = Path(SHARE_TARGET)
    if not root.is_dir():
        return {}
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.glob("*-metadata.json"))
    }


def snapshot(kinds: set[str] | None = None) -> dict[str, Any]:
    """Everything the checks of ``kinds`` look at, taken now."""
    snap = {
        "uptime": uptime(),
        "metadataRoot": metadata_root(),
        "service": service_facts(),
        "share": share_facts(),
        "status": run_json(["kvdev", "status", "--json"]),
        "statusExit": run(["kvdev", "status"])[0],  # 0 converged, 1 not, 2 unreachable
        "streams": stream_digests(),
        "links": run_json(["ip", "-j", "-d", "link", "show"]),
        "addresses": run_json(["ip", "-j", "addr", "show"]),
    }
    if kinds is None or "privilege" in kinds:  # systemd-analyze takes seconds under TCG
        snap["privilege"] = privilege_facts()
    if kinds is None or kinds & {"manager", "managerLog", "managedLink"}:
        snap["managers"] = manager_facts(snap)
    if kinds is None or "cloudInit" in kinds:
        snap["cloudInit"] = cloud_init_facts()
    return snap


def manager_facts(snap: dict[str, Any]) -> dict[str, Any]:
    """Each link's udev marks, and what NetworkManager and systemd-networkd say about it."""
    links = snap["links"] if isinstance(snap["links"], list) else []
    udev = {}
    for lk in links:
        _, out, _ = run(["udevadm", "info", "--query=property", f"/sys/class/net/{lk['ifname']}"])
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        udev[lk["ifname"]] = {k: props[k] for k in MARKS if k in props}
    nm: dict[str, str] = {}
    rc, out, _ = run(["nmcli", "-t", "-f", "DEVICE,STATE", "device"])
    if rc == 0:
        nm = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    networkd: dict[str, str] = {}
    listed = run_json(["networkctl", "list", "--json=short"])
    if isinstance(listed, dict):
        networkd = {  # networkd's JSON calls the setup state "AdministrativeState"
            i["Name"]: i.get("AdministrativeState") or i.get("SetupState", "")
            for i in listed.get("Interfaces", [])
        }
    journal = {}
    for unit in ("NetworkManager", "systemd-networkd"):
        _, out, _ = run(["journalctl", "-b", "-u", unit, "-o", "cat", "--no-pager"])
        journal[unit] = out.splitlines()
    return {"udev": udev, "NetworkManager": nm, "networkd": networkd, "journal": journal}


def cloud_init_facts() -> dict[str, Any]:
    """cloud-init's own status, and the systemd-networkd files it rendered."""
    rendered = {
        str(p): p.read_text() for p in sorted(Path("/etc/systemd/network").glob("*cloud-init*"))
    }
    return {"status": run_json(["cloud-init", "status", "--format", "json"]), "rendered": rendered}


def _link_by_mac(snap: dict[str, Any], mac: str) -> dict[str, Any] | None:
    links = snap["addresses"] if isinstance(snap["addresses"], list) else []
    found = [lk for lk in links if lk.get("address", "").lower() == mac.lower()]
    return found[0] if len(found) == 1 else None


def _addresses(link: dict[str, Any]) -> list[str]:
    """A link's IPv4 and global IPv6 addresses, as CIDR (link-local ones are the kernel's)."""
    return sorted(
        f"{a['local']}/{a['prefixlen']}"
        for a in link.get("addr_info", [])
        if a.get("family") == "inet" or a.get("scope") == "global"
    )


def check_service(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The agent runs as kvdev-agent.service, from the package's /usr/bin/kvdev-agent."""
    s = snap["service"]
    props, pkg = s["properties"], c["package"]
    bad = []
    if (props.get("ActiveState"), props.get("SubState")) != ("active", "running"):
        bad.append(f"kvdev-agent.service is {props.get('ActiveState')}/{props.get('SubState')}")
    if "/usr/bin/kvdev-agent" not in s["argv"][:2]:
        bad.append(f"main process runs {s['argv']}, not /usr/bin/kvdev-agent")
    bad.extend(
        f"{path} belongs to {owner!r}, not package {pkg}"
        for path, owner in s["owners"].items()
        if owner != pkg
    )
    if not s["package"].endswith("install ok installed"):
        bad.append(f"dpkg has {pkg} as {s['package']!r}")
    return bad


def check_written(p: dict[str, Any], uid: int) -> list[str]:
    """The agent's files are its own; the .link files root's, in a directory it cannot write."""
    bad = []
    owners = p["owners"]
    if not any(path.endswith(".wish") for path in owners):
        bad.append("no link wish in /var/lib/kvdev/links")
    bad.extend(f"{path} is owned by uid {o}, not {uid}" for path, o in owners.items() if o != uid)
    if not p["rendered"]:
        bad.append("no .link file in /run/systemd/network (kvdev-udev-marks renders them)")
    bad.extend(f"{path} is owned by uid {o}, not root" for path, o in p["rendered"].items() if o)
    if p["kvdevWroteNetworkDir"]:
        bad.append("user kvdev could create a file in /run/systemd/network (issue 23 §1)")
    return bad


def check_privilege(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The agent runs as its own user with CAP_NET_ADMIN only, and wrote its files as it."""
    s, p = snap["service"], snap["privilege"]
    bad = []
    props, proc = s["properties"], s["proc"]
    if (props.get("User"), props.get("Group")) != (c["user"], c["user"]):
        bad.append(f"unit runs as {props.get('User')}:{props.get('Group')}, not {c['user']}")
    try:
        uid = pwd.getpwnam(c["user"]).pw_uid
    except KeyError:
        return [*bad, f"no user {c['user']}"]
    if proc.get("Uid", "").split() != [str(uid)] * 4:
        bad.append(f"main process has Uid {proc.get('Uid')}, not {uid}")
    want = f"{CAP_NET_ADMIN:016x}"
    caps = {k: proc.get(k) for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb")}
    bad.extend(
        f"{k} {v}, expected {want} (CAP_NET_ADMIN only)" for k, v in caps.items() if v != want
    )
    if proc.get("NoNewPrivs") != "1":
        bad.append(f"NoNewPrivs {proc.get('NoNewPrivs')}")
    bad.extend(check_written(p, uid))
    if p["exposure"] is None or p["exposure"] > c["maxExposure"]:
        bad.append(f"exposure {p['exposure']} > {c['maxExposure']}: {p['exposureOutput']}")
    if p["member"]["rc"] not in {0, 1} or p["member"]["kind"] != "AgentStatus":
        bad.append(f"a member of group {c['user']} (uid {NOBODY}) got {p['member']}")
    if p["stranger"]["rc"] != 2 or "permission denied" not in p["stranger"]["stderr"]:
        bad.append(f"a non-member (uid {NOBODY}) got {p['stranger']}")
    return bad


def _status_device(snap: dict[str, Any], c: dict[str, Any]) -> dict[str, Any] | None:
    devices = snap["status"].get("devices", []) if isinstance(snap["status"], dict) else []
    found = [
        d
        for d in devices
        if (d.get("claim") or d.get("podClaimName")) == c["claim"]
        and d.get("request") == c["request"]
        and d.get("device") == c["device"]
    ]
    return found[0] if len(found) == 1 else None


def check_device(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The agent's status shows the device in the phase, bound by the evidence, expected."""
    d = _status_device(snap, c)
    if d is None:
        return [f"agent status has no single device {c['claim']}/{c['request']}/{c['device']}"]
    bad = []
    if d["phase"] != c["phase"]:
        bad.append(f"phase {d['phase']} ({d.get('reason')}), expected {c['phase']}")
    kinds = [e["kind"] for e in d.get("evidence", [])]
    if "evidence" in c and not set(kinds) & set(c["evidence"]):
        bad.append(f"matched by {kinds}, expected one of {c['evidence']}")
    bad.extend(
        f"{key} {d.get(key)!r}, expected {c[key]!r}"
        for key in ("interface", "guestPciAddress", "mac", "driverMtu", "notes")
        if key in c and d.get(key) != c[key]
    )
    if c.get("kernelAltname"):
        altname = (d.get("desired") or {}).get("altname")
        link = _link_by_mac(snap, d.get("mac") or "")
        if not altname or link is None or altname not in link.get("altnames", []):
            have = link.get("altnames") if link else None
            bad.append(f"the kernel's altnames {have} lack the desired altname {altname!r}")
    return bad


def check_link(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The kernel's view (``ip -j addr``) of the NIC with this MAC: name, altname, MTU, IPs, up."""
    link = _link_by_mac(snap, c["mac"])
    if link is None:
        return [f"no single link with MAC {c['mac']}"]
    bad = []
    if link["ifname"] != c["ifname"]:
        bad.append(f"named {link['ifname']}, expected {c['ifname']}")
    if "altname" in c and c["altname"] not in link.get("altnames", []):
        bad.append(f"altnames {link.get('altnames', [])} lack {c['altname']}")
    if link["mtu"] != c["mtu"]:
        bad.append(f"MTU {link['mtu']}, expected {c['mtu']}")
    if _addresses(link) != sorted(c["addresses"]):
        bad.append(f"addresses {_addresses(link)}, expected {sorted(c['addresses'])}")
    if "UP" not in link.get("flags", []):
        bad.append(f"not up: flags {link.get('flags')}")
    return bad


def check_unmanaged(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The NIC no device describes: reported unmanaged, and exactly as the kernel made it."""
    link = _link_by_mac(snap, c["mac"])
    if link is None:
        return [f"no single link with MAC {c['mac']}"]
    bad = []
    status = snap["status"] if isinstance(snap["status"], dict) else {}
    if link["ifname"] not in status.get("unmanaged", []):
        bad.append(f"{link['ifname']} not in the agent's unmanaged {status.get('unmanaged')}")
    if link["ifname"] != c["ifname"]:
        bad.append(f"renamed to {link['ifname']}, expected the kernel's {c['ifname']}")
    foreign = [a for a in link.get("altnames", []) if not a.startswith(KERNEL_ALTNAME_PREFIXES)]
    if foreign:
        bad.append(f"altnames {foreign} added")
    if link["mtu"] != c["mtu"] or _addresses(link) or "UP" in link.get("flags", []):
        bad.append(f"touched: MTU {link['mtu']}, {_addresses(link)}, flags {link.get('flags')}")
    return bad


MARKS = ("KVDEV_MANAGED", "NM_UNMANAGED", "ID_NET_MANAGED_BY")
# Journal lines of a manager that mean it acted on a link (for the link's names).
ACTED = {
    "NetworkManager": ("Activation", "dhcp", "-> unavailable", "-> disconnected", "-> activated"),
    # (not "Link UP" or "Gained IPv6LL": networkd logs those for links it does not manage too)
    "systemd-networkd": ("Configuring with", "DHCP"),
}


def _ifname(snap: dict[str, Any], mac: str) -> str | None:
    link = _link_by_mac(snap, mac)
    return link["ifname"] if link is not None else None


def check_manager(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """kvdev's NICs carry its udev marks and the manager calls them unmanaged; the rest not."""
    facts, manager = snap["managers"], c["manager"]
    states = facts[manager]
    bad = []
    for mac in c.get("unmanaged", []):
        name = _ifname(snap, mac)
        if name is None:
            bad.append(f"no link with MAC {mac}")
            continue
        if facts["udev"].get(name, {}).get("KVDEV_MANAGED") != "1":
            bad.append(f"{name}: udev marks {facts['udev'].get(name)}, expected all of {MARKS}")
        if states.get(name) != "unmanaged":
            bad.append(f"{name}: {manager} says {states.get(name)!r}, expected 'unmanaged'")
    for mac in c.get("managed", []):
        name = _ifname(snap, mac)
        if name is None:
            bad.append(f"no link with MAC {mac}")
            continue
        if facts["udev"].get(name):
            bad.append(f"{name}: marked {facts['udev'][name]} though kvdev does not manage it")
        if states.get(name) in (None, "unmanaged"):
            bad.append(f"{name}: {manager} says {states.get(name)!r}, expected it to manage it")
    return bad


def _acted(snap: dict[str, Any], unit: str, names: list[str]) -> list[str]:
    lines = snap["managers"]["journal"][unit]
    return [
        ln
        for ln in lines
        if any(f"({n})" in ln or f"{n}:" in ln for n in names)
        and any(word in ln for word in ACTED[unit])
    ]


def check_manager_log(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The manager's own log: it never acted on kvdev's NICs (by any name they had), and it
    did act on the NIC kvdev does not manage (so the check can see what it looks for)."""
    unit = c["unit"]
    bad = []
    touched = _acted(snap, unit, c["untouched"])
    if touched:
        bad.append(f"{unit} acted on {c['untouched']}: {touched[:5]}")
    if c.get("touched") and not _acted(snap, unit, c["touched"]):
        bad.append(f"{unit} logged nothing of the kind {ACTED[unit]} for {c['touched']}")
    return bad


def check_managed_link(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """A NIC as whoever manages it configured it: up, with this address among its own."""
    link = _link_by_mac(snap, c["mac"])
    if link is None:
        return [f"no single link with MAC {c['mac']}"]
    bad = []
    if "UP" not in link.get("flags", []):
        bad.append(f"{link['ifname']} is not up: flags {link.get('flags')}")
    if c.get("address") and c["address"] not in _addresses(link):
        bad.append(f"{link['ifname']} has {_addresses(link)}, expected {c['address']} among them")
    return bad


def check_cloud_init(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """cloud-init's network stages ran from the config drive, cleanly, and it rendered a
    networkd file for each NIC. (Its last stage, cloud-final, is ordered after
    multi-user.target, which waits for this runner: it never runs while the checks do.)"""
    facts = snap["cloudInit"]
    bad = []
    status = facts["status"] if isinstance(facts["status"], dict) else {}
    if status.get("datasource") != c["datasource"]:
        bad.append(f"cloud-init datasource {status.get('datasource')!r}, not {c['datasource']!r}")
    for stage in ("init-local", "init"):
        done = status.get(stage) or {}
        if not done.get("finished") or done.get("errors"):
            bad.append(f"cloud-init stage {stage}: {done or 'not run'}")
    text = "\n".join(facts["rendered"].values()).lower()
    missing = [mac for mac in c["macs"] if mac.lower() not in text]
    if missing:
        bad.append(f"no rendered networkd file for {missing} in {sorted(facts['rendered'])}")
    return bad


def check_status(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The agent's overall status: converged or not, no metadata errors, claim generations,
    and ``kvdev status``'s exit status (``exit``)."""
    st = snap["status"]
    if not isinstance(st, dict) or "error" in st:
        return [f"no agent status: {st}"]
    bad = []
    if "exit" in c and snap["statusExit"] != c["exit"]:
        bad.append(f"kvdev status exited {snap['statusExit']}, expected {c['exit']}")
    if "converged" in c and st.get("converged") != c["converged"]:
        bad.append(f"converged is {st.get('converged')}, expected {c['converged']}")
    errors = json.dumps(st.get("metadataErrors") or [])
    if "metadataError" in c:  # the agent must report a problem whose text has this in it
        if c["metadataError"] not in errors:
            bad.append(f"metadata errors {errors} lack {c['metadataError']!r}")
    elif st.get("metadataErrors"):
        bad.append(f"metadata errors: {errors}")
    for claim, least in c.get("minGeneration", {}).items():
        gens = [x["observedGeneration"] for x in st.get("claims", []) if x["claim"] == claim]
        if not gens or min(gens) < least:
            bad.append(f"claim {claim} observed generation {gens}, expected >= {least}")
    return bad


def check_stream(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The stream under ``key`` in the agent's root has the driver's bytes (``sha256``), and
    the agent's status shows it in force at ``generation`` with ``origin``."""
    bad = []
    have = snap["streams"].get(c["key"])
    if have != c["sha256"]:
        bad.append(f"{c['key']} has SHA-256 {have}, not the driver's file's {c['sha256']}")
    st = snap["status"] if isinstance(snap["status"], dict) else {}
    claims = [x for x in st.get("claims", []) if Path(x.get("source", "")).name == c["key"]]
    if len(claims) != 1:
        return [*bad, f"agent status has no single claim entry for {c['key']}: {st.get('claims')}"]
    got = claims[0]
    for field, status_field in (("generation", "observedGeneration"), ("origin", "origin")):
        if got.get(status_field) != c[field]:
            bad.append(
                f"{c['key']}: {status_field} {got.get(status_field)!r}, expected {c[field]!r}"
            )
    return bad


def check_share(snap: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The share unit ran cleanly; the virtiofs share is mounted read-only, or nothing is."""
    share = snap["share"]
    unit = share["unit"]
    bad = []
    state = (unit.get("ActiveState"), unit.get("SubState"), unit.get("Result"))
    if state != ("active", "exited", "success"):
        bad.append(f"{SHARE_UNIT} is {'/'.join(str(x) for x in state)}")
    mounts = share["mounts"]
    if not c["mounted"]:
        if mounts:
            bad.append(f"{SHARE_TARGET} has mounts {mounts}, expected none")
        return bad
    if len(mounts) != 1:
        return [*bad, f"{SHARE_TARGET} has mounts {mounts}, expected one"]
    m = mounts[0]
    if (m.get("fstype"), m.get("source")) != ("virtiofs", c["tag"]):
        bad.append(f"{SHARE_TARGET} is {m.get('fstype')} {m.get('source')}, not virtiofs")
    if "ro" not in (m.get("options") or "").split(","):
        bad.append(f"{SHARE_TARGET} mounted {m.get('options')}, not read-only")
    return bad


CHECKS = {
    "service": check_service,
    "privilege": check_privilege,
    "device": check_device,
    "link": check_link,
    "unmanaged": check_unmanaged,
    "status": check_status,
    "share": check_share,
    "stream": check_stream,
    "manager": check_manager,
    "managerLog": check_manager_log,
    "managedLink": check_managed_link,
    "cloudInit": check_cloud_init,
}


def act(actions: list[list[str]]) -> list[dict[str, Any]]:
    """Run a phase's actions (a manager restart, a link flap ...) in order, before it is judged."""
    out = []
    for argv in actions:
        rc, stdout, stderr = run(argv)
        out.append({"argv": argv, "rc": rc, "output": (stdout + stderr)[-2000:]})
        time.sleep(1.0)  # let the kernel's and the managers' events out before the next one
    return out


def judge(snap: dict[str, Any], checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each check with its verdict and, when it fails, why."""
    out = []
    for c in checks:
        try:
            problems = CHECKS[c["kind"]](snap, c)
        except (KeyError, TypeError, AttributeError) as e:  # a malformed snapshot or check
            problems = [f"cannot evaluate: {type(e).__name__}: {e}"]
        out.append({"check": c, "ok": not problems, "problems": problems})
    return out


def wait_for(path: Path, abort: Path) -> bool:
    """Wait for the host's next phase file; False when it aborts or never writes one."""
    deadline = time.monotonic() + CTL_WAIT_SECONDS
    while time.monotonic() < deadline:
        if abort.exists():
            return False
        if path.exists():
            return True
        time.sleep(0.3)
    return False


def write_json(path: Path, value: Any) -> None:
    """Write a report so the host never reads half of it (rename is atomic on 9p too)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    with tmp.open() as f:
        os.fsync(f.fileno())
    tmp.rename(path)


def main() -> int:
    root = Path(sys.argv[1])
    ctl, out = root / "ctl", root / "out"
    out.mkdir(exist_ok=True)
    write_json(out / "booted.json", {"uptime": uptime()})
    phase = 1
    while True:
        if not wait_for(ctl / f"phase-{phase}.json", ctl / "abort"):
            return 1
        spec = json.loads((ctl / f"phase-{phase}.json").read_text())
        done = act(spec.get("actions", []))
        started, started_up = time.monotonic(), uptime()
        deadline = started + spec["timeoutSeconds"]
        kinds = {c["kind"] for c in spec["checks"]}
        while True:
            snap = snapshot(kinds)
            verdicts = judge(snap, spec["checks"])
            ok = all(v["ok"] for v in verdicts)
            if ok or time.monotonic() > deadline or (ctl / "abort").exists():
                break
            time.sleep(POLL_SECONDS)
        failed = [a for a in done if a["rc"] != 0]  # an action that failed fails the phase
        verdicts += [
            {"check": {"kind": "action", "argv": a["argv"]}, "ok": False, "problems": [a["output"]]}
            for a in failed
        ]
        ok = ok and not failed
        write_json(
            out / f"phase-{phase}.json",
            {
                "name": spec["name"],
                "final": bool(spec.get("final")),
                "ok": ok,
                "actions": done,
                "verdicts": verdicts,
                "startedUptime": started_up,
                "doneUptime": snap["uptime"],
                "seconds": round(time.monotonic() - started, 2),
                "snapshot": snap,
            },
        )
        if spec.get("final") or not ok:
            return 0 if ok else 1
        phase += 1


if __name__ == "__main__":
    sys.exit(main())
