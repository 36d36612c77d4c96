"""What people read of the agent's state, and how ``kvdev`` finds a device among it.

Pure: JSON-ready dicts in (exactly as ``GET /v1/status``, ``/v1/devices`` and ``/v1/plan``
answer them and ``encode`` makes them), text out. It owns the human renderings of
``kvdev status``, ``devices``, ``explain`` and ``plan`` and of ``kvdev-agent --once``
(``pass_text``), and ``find_devices``, the lookup behind ``explain`` by ref, interface
name, altname, MAC, guest PCI address or bare device name. Every device table is drawn from
one set of columns (``COLUMNS``), so a header is spelled, and a cell computed, one way
everywhere. Missing or null fields print as ``-``: the API may add fields and an older agent
may lack some. Every string the API answered is escaped (``kvdev.printable``) before it is
laid out, so a name in a metadata file cannot drive the terminal; JSON and YAML output never
comes here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, cast

from kvdev.printable import escape_tree

PHASE_ORDER: Final = ("Configured", "Pending", "Missing", "Ambiguous", "Error", "Unmanaged")
_PHASE_COLOR: Final = {"Configured": "32", "Pending": "33", "Missing": "31", "Ambiguous": "31"}
_SHORT_PCI = re.compile(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")

Json = Mapping[str, Any]


def _safe(body: Json) -> Json:
    """``body`` with every string in it escaped for a terminal."""
    return cast("Json", escape_tree(body))


def paint(code: str, text: str, color: bool) -> str:
    """``text`` in an SGR colour when ``color`` is on."""
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def _phase_code(phase: str) -> str:
    return _PHASE_COLOR.get(phase, "1;31" if phase == "Error" else "")


def _phase(phase: str, color: bool) -> str:
    return paint(_phase_code(phase), phase, color)


def _s(value: object) -> str:
    """A cell: ``-`` for null or empty, lists comma-joined, booleans as yes/no."""
    if value is None or value in ("", [], ()):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(_s(v) for v in value)
    return str(value)


def _get(obj: Json | None, *keys: str) -> Any:  # noqa: ANN401 - a JSON value of any type
    """``obj[k1][k2]...``, or None as soon as a level is missing."""
    value: Any = obj
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def table(rows: Sequence[Sequence[str]], colors: Mapping[int, Sequence[str]] | None = None) -> str:
    """Aligned columns (two spaces apart, the last one unpadded); ``colors[row]`` per cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        codes = (colors or {}).get(n, ())
        cells = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - len(cell)) if i < len(row) - 1 else ""
            code = codes[i] if i < len(codes) else ""
            cells.append(paint(code, cell, bool(code)) + pad)
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def human_bytes(n: object) -> str:
    """``1536`` -> ``1.5KiB``; ``-`` when unknown."""
    if not isinstance(n, int) or isinstance(n, bool):
        return "-"
    value, units = float(n), ["B", "KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{n}B" if units[0] == "B" else f"{value:.1f}{units[0]}"


def human_speed(mbps: object) -> str:
    """``25000`` -> ``25Gb/s``; ``-`` when unknown."""
    if not isinstance(mbps, int) or isinstance(mbps, bool) or mbps <= 0:
        return "-"
    return f"{mbps // 1000}Gb/s" if mbps % 1000 == 0 else f"{mbps}Mb/s"


def human_duration(seconds: object) -> str:
    """``3725`` -> ``1h2m5s``."""
    if not isinstance(seconds, int | float):
        return "-"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (s, "s")]
    return "".join(f"{v}{u}" for v, u in parts if v) or "0s"


def counts_text(counts: Mapping[str, int], color: bool = False) -> str:
    """``2 Configured, 1 Missing`` in phase order; ``no devices described`` when empty."""
    counts = cast("Mapping[str, int]", escape_tree(counts))
    order = sorted(counts, key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else 99, p))
    return ", ".join(f"{counts[p]} {_phase(p, color)}" for p in order) or "no devices described"


# --------------------------------------------------------------------------- status


def _labelled(pairs: Sequence[tuple[str, str]], indent: str = "") -> list[str]:
    """``label:  text`` lines, the texts aligned; an empty label continues the one above."""
    width = max(len(label) for label, _ in pairs) + 2
    return [f"{indent}{(label + ':') if label else '':<{width}}{text}" for label, text in pairs]


def _version(claim: Json) -> str:
    """``v1beta1`` of ``metadata.resource.k8s.io/v1beta1``, with a ``*`` after a fallback."""
    version = _s(claim.get("apiVersion")).rpartition("/")[2]
    return version + ("*" if claim.get("fallback") else "")


def _condition(c: Json, color: bool) -> str:
    """``StateNotSaved (Error): cannot save ...``, red when it blocks convergence."""
    severity = _s(c.get("severity"))
    text = f"{_s(c.get('type'))} ({severity}): {_s(c.get('message'))}"
    return paint("31" if severity == "Error" else "33", text, color)


def status_text(body: Json, color: bool = False) -> str:
    """``kvdev status``: the agent's state in labelled lines, then the claims in force."""
    body = _safe(body)
    converged = paint("32", "yes", color) if body.get("converged") else paint("1;31", "no", color)
    agent = body.get("agent") or {}
    errors = body.get("metadataErrors") or []
    warned = body.get("metadataWarnings") or []
    conditions = body.get("conditions") or []
    pairs = [
        ("converged", f"{converged}, since {_s(body.get('since'))}"),
        ("ready", _s(body.get("ready"))),
        ("devices", counts_text(body.get("counts") or {}, color)),
        (
            "dry run",
            "yes: the agent plans and reports, changing nothing" if body.get("dryRun") else "no",
        ),
        ("unmanaged", _s(body.get("unmanaged"))),
        ("metadata errors", str(len(errors)) if errors else "none"),
        *(("", paint("31", str(e), color)) for e in errors),
        ("warnings", str(len(warned)) if warned else "none"),
        *(("", paint("33", f"[upstream] {w}", color)) for w in warned),
        ("conditions", str(len(conditions)) if conditions else "none"),
        *(("", _condition(c, color)) for c in conditions),
        ("last error", _s(body.get("lastError"))),
        ("reconcile", f"pass #{_s(body.get('reconcile'))}"),
        (
            "agent",
            (
                f"pid {_s(agent.get('pid'))}, RSS {human_bytes(agent.get('rssBytes'))}, "
                f"CPU {_s(agent.get('cpuSeconds'))} s, "
                f"up {human_duration(agent.get('uptimeSeconds'))}, kvdev {_s(agent.get('version'))}"
            ),
        ),
    ]
    lines = _labelled(pairs)
    claims = body.get("claims") or []
    if claims:
        keys = ("claim", "namespace", "podClaimName", "observedGeneration")
        rows: list[tuple[str, ...]] = [("CLAIM", "NAMESPACE", "POD CLAIM", "OBSERVED GEN")]
        rows[0] += ("READ AS", "SOURCE")
        rows.extend(
            (*(_s(c.get(k)) for k in keys), _version(c), _s(c.get("source"))) for c in claims
        )
        if any(c.get("origin") for c in claims):  # a ConfigMap's: the driver's, or rebuilt
            rows = [(*rows[0], "FROM")] + [
                (*r, _s(c.get("origin"))) for r, c in zip(rows[1:], claims, strict=True)
            ]
        lines.append("claims:")
        lines.extend("  " + line for line in table(rows).splitlines())
        lines.extend(
            f"  {_s(c.get('claim'))}: read as {_version(c)}: a newer version is unusable: "
            f"{c['fallback']}"
            for c in claims
            if c.get("fallback")
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- devices


def _traffic(d: Json) -> str:
    stats = d.get("interfaceStats") or {}
    if not stats:
        return "-"
    return f"{human_bytes(stats.get('rxBytes'))}/{human_bytes(stats.get('txBytes'))}"


def _detail(d: Json) -> str:
    """Why a device is not configured, else the addresses it was given."""
    if d.get("reason"):
        return str(d["reason"])
    addresses = _get(d, "desired", "addresses")
    return "addresses " + ",".join(addresses) if addresses else ""


COLUMNS: Final[Mapping[str, Callable[[Json], str]]] = {
    "DEVICE": lambda d: _s(d.get("ref")),
    "PHASE": lambda d: _s(d.get("phase")),
    "INTERFACE": lambda d: _s(_get(d, "observed", "interface") or d.get("interface")),
    "GUEST PCI": lambda d: _s(d.get("guestPciAddress")),
    "DRIVER": lambda d: _s(_get(d, "guest", "driver")),
    "NUMA": lambda d: _s(_get(d, "guest", "numaNode")),
    "MAC": lambda d: _s(d.get("mac")),
    "MATCHED BY": lambda d: _s([e.get("kind") for e in d.get("evidence") or []]),
    "ADDRESSES": lambda d: _s(_get(d, "observed", "addresses")),
    "RX/TX": _traffic,
    "SPEED": lambda d: human_speed(_get(d, "interfaceStats", "speedMbps")),
    "DETAIL": _detail,
}
WIDE_COLUMNS: Final = (
    *("DEVICE", "PHASE", "INTERFACE", "GUEST PCI", "DRIVER", "NUMA", "MAC", "ADDRESSES"),
    *("RX/TX", "SPEED"),
)
# kvdev devices' default: 100 columns for short refs, one address and the usual names
DEVICES_COLUMNS: Final = ("DEVICE", "PHASE", "INTERFACE", "GUEST PCI", "MAC", "ADDRESSES")
PASS_COLUMNS: Final = ("DEVICE", "PHASE", "INTERFACE", "GUEST PCI", "MAC", "MATCHED BY", "DETAIL")


def devices_table(
    items: Sequence[Json], color: bool = False, columns: Sequence[str] = DEVICES_COLUMNS
) -> str:
    """One aligned row per described device, in ``columns`` (``kvdev devices``' by default)."""
    if not items:
        return "no devices described\n"
    items = [_safe(d) for d in items]
    rows: list[tuple[str, ...]] = [tuple(columns)]
    rows.extend(tuple(COLUMNS[c](d) for c in columns) for d in items)
    colors: dict[int, list[str]] = {}
    if color and "PHASE" in columns:
        at = list(columns).index("PHASE")
        for n, d in enumerate(items, start=1):
            colors[n] = [""] * at + [_phase_code(str(d.get("phase")))]
    return table(rows, colors)


def short_refs(items: Sequence[Json]) -> list[Json]:
    """``items`` with each ref as ``claim/request/device``, the form ``explain`` takes.

    Two devices that share a short form keep their full refs.
    """

    def short(d: Json) -> str:
        return f"{_s(d.get('claim'))}/{_s(d.get('request'))}/{_s(d.get('device'))}"

    seen: dict[str, int] = {}
    for d in items:
        seen[short(d)] = seen.get(short(d), 0) + 1
    return [{**d, "ref": short(d)} if seen[short(d)] == 1 else d for d in items]


def pass_text(body: Json, color: bool = False) -> str:
    """``kvdev-agent --once``: the devices after the pass, what was left alone, the summary."""
    body = _safe(body)
    devices = body.get("devices") or []
    lines = devices_table(devices, color, PASS_COLUMNS).splitlines() if devices else []
    if body.get("unmanaged"):
        lines.append(f"unmanaged (never touched): {', '.join(body['unmanaged'])}")
    lines.extend(f"metadata error: {e}" for e in body.get("metadataErrors") or [])
    lines.extend(f"metadata warning: [upstream] {w}" for w in body.get("metadataWarnings") or [])
    lines.extend(f"condition: {_condition(c, color)}" for c in body.get("conditions") or [])
    lines.append(("dry run: " if body.get("dryRun") else "") + _s(body.get("summary")))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- explain


def _norm_mac(text: str) -> str:
    return text.strip().lower().replace("-", ":")


def _norm_pci(text: str) -> str:
    text = text.strip().lower()
    return "0000:" + text if _SHORT_PCI.fullmatch(text) else text


def _lookup_keys(d: Json) -> tuple[tuple[str, set[object]], ...]:
    """What a device may be named by, per kind of name, in the order they are tried."""
    names = {d.get("interface"), _get(d, "observed", "interface"), _get(d, "desired", "interface")}
    names |= {_get(d, "desired", "altname"), *(_get(d, "observed", "altnames") or ())}
    macs = {d.get("mac"), _get(d, "observed", "mac"), _get(d, "observed", "permanentMac")}
    pcis = {d.get("guestPciAddress"), _get(d, "guest", "pciAddress")}
    return (
        ("ref", {d.get("ref")}),
        ("interface name", names),
        ("MAC", macs),
        ("PCI", pcis),
        ("device name", {d.get("device")}),
    )


def find_devices(items: Iterable[Json], key: str) -> tuple[list[Json], str]:
    """The devices ``key`` names, and how: by ref, interface name or altname, MAC, PCI, name.

    The name is the bare device name of its claim (``vf-1``); several claims may share one,
    and the caller says so.
    """
    wanted = {
        "ref": key,
        "interface name": key,
        "MAC": _norm_mac(key),
        "PCI": _norm_pci(key),
        "device name": key,
    }
    items = list(items)
    for how, value in wanted.items():
        found = [d for d in items if value in dict(_lookup_keys(d))[how] - {None}]
        if found:
            return found, how
    return [], ""


_VERDICT: Final = {
    "Configured": "matched, and nothing is left to do",
    "Pending": "matched; steps are still to apply",
    "Missing": "no guest device matches it",
    "Ambiguous": "more than one guest device could be it; kvdev never guesses",
    "Error": "matched, but configuring it failed or is blocked",
}


def step_line(step: Json) -> str:
    """One applied step as the agent logs it: ``dpci0: SetMtu mtu 1400 (MTU is 1500)``."""
    step = _safe(step)
    kind, ifname, what, why = _step_text(step)
    return f"{ifname}: {kind} {what} ({why})" if what != "-" else f"{ifname}: {kind} ({why})"


def _step_text(step: Json) -> tuple[str, str, str, str]:
    """(type, interface, what, why) of one planned step."""
    if step.get("newName"):
        what = f"-> {step['newName']}"
    elif step.get("altname"):
        what = f"altname {step['altname']}"
    elif step.get("mtu") is not None:
        what = f"mtu {step['mtu']}"
    elif step.get("address"):
        what = str(step["address"])
    elif step.get("destination"):
        what = f"route {step['destination']}"
        what += f" via {step['gateway']}" if step.get("gateway") else ""
        what += f" metric {step['metric']}" if step.get("metric") is not None else ""
    else:
        what = "-"
    return (_s(step.get("type")), _s(step.get("ifname")), what, _s(step.get("reason")))


def _route(r: Json) -> str:
    """``10.3.0.0/16 via 10.1.0.1`` (the metric is not compared: the kernel may add one)."""
    return str(r.get("destination")) + (f" via {r['gateway']}" if r.get("gateway") else "")


def _state_rows(d: Json) -> list[tuple[str, str, str, str]]:
    """(field, desired, observed, mark) for what planning wants against what netlink saw."""
    want, seen = d.get("desired") or {}, d.get("observed") or {}
    if not want and not seen:
        return []
    routes = [_route(r) for r in want.get("routes") or []]
    # An older agent reports no observed routes (None): nothing to compare, no mark.
    seen_routes = None if "routes" not in seen else [_route(r) for r in seen["routes"] or []]
    absent = set(routes) - set(seen_routes or [])

    def differs(a: object, b: object) -> bool:
        return a is not None and b is not None and a != b

    altname, altnames = want.get("altname"), seen.get("altnames") or []
    missing = set(want.get("addresses") or []) - set(seen.get("addresses") or [])
    rows = [
        ("interface", want.get("interface"), seen.get("interface"), differs),
        ("altname", altname, altnames, lambda a, b: bool(a) and a not in b),
        ("mtu", want.get("mtu"), seen.get("mtu"), differs),
        ("addresses", want.get("addresses"), seen.get("addresses"), lambda *_: bool(missing)),
        ("routes", routes, seen_routes, lambda *_: seen_routes is not None and bool(absent)),
        ("up", True if want else None, seen.get("up"), differs),
    ]
    return [(f, _s(a), _s(b), "differs" if test(a, b) else "") for f, a, b, test in rows]


def _guest_text(g: Json) -> str:
    """``0000:07:00.0 15b3:101e class 020000, driver mlx5_core, NUMA 0``: the facts known."""
    ids = f"{g['vendorId']}:{g['deviceId']}" if g.get("vendorId") else None
    head = [g.get("pciAddress") or "no PCI address", ids, g.get("class") and f"class {g['class']}"]
    facts = [" ".join(str(h) for h in head if h)]
    facts += [f"driver {g['driver']}"] if g.get("driver") else []
    facts += [f"NUMA {g['numaNode']}"] if g.get("numaNode") is not None else []
    facts += [f"nodes {_s(g['devNodes'])}"] if g.get("devNodes") else []
    return ", ".join(facts)


def _notes(d: Json) -> list[tuple[str, str]]:
    """The driver's MTU, notes on its metadata and its taints, as explain's labelled lines."""
    pairs = [("driver MTU", _s(d["driverMtu"]))] if d.get("driverMtu") is not None else []
    pairs.extend(("notes" if i == 0 else "", _s(n)) for i, n in enumerate(d.get("notes") or []))
    pairs.extend(("taints" if i == 0 else "", _s(t)) for i, t in enumerate(d.get("taints") or []))
    return pairs


def explain_text(d: Json, color: bool = False) -> str:
    """``kvdev explain``: why a device matched or did not, and what is left to do."""
    d = _safe(d)
    phase = str(d.get("phase"))
    claim = f"{_s(d.get('claim'))} (pod claim {_s(d.get('podClaimName'))})"
    pairs = [
        ("phase", f"{_phase(phase, color)}: {_VERDICT.get(phase, '')}".rstrip(": ")),
        ("claim", f"{claim}, request {_s(d.get('request'))}, generation {_s(d.get('generation'))}"),
        ("device", f"{_s(d.get('driver'))} / {_s(d.get('pool'))} / {_s(d.get('device'))}"),
    ]
    evidence = d.get("evidence") or [{"kind": "none", "detail": "nothing matched it"}]
    pairs.extend(
        ("evidence" if i == 0 else "", f"{e.get('kind')}: {e.get('detail')}")
        for i, e in enumerate(evidence)
    )
    if d.get("origin"):  # where its stream came from: the driver's file, or rebuilt
        pairs.append(("source", _s(d.get("origin"))))
    pairs += [("candidates", _s(d.get("candidates"))), ("reason", _s(d.get("reason")))]
    pairs.extend(
        ("warnings" if i == 0 else "", paint("33", str(w), color))
        for i, w in enumerate(d.get("warnings") or [])
    )
    pairs.extend(_notes(d))
    guest = d.get("guest")
    if guest:
        pairs.append(("guest device", _guest_text(guest)))
    stats = d.get("interfaceStats")
    if stats:
        rx, tx = human_bytes(stats.get("rxBytes")), human_bytes(stats.get("txBytes"))
        pairs.append(("traffic", f"rx {rx}, tx {tx}, speed {human_speed(stats.get('speedMbps'))}"))
    lines = [paint("1", _s(d.get("ref")), color), *_labelled(pairs, "  ")]
    state = _state_rows(d)
    if state:
        rows = [("", "DESIRED", "OBSERVED", ""), *state]
        marks = {n: ["", "", "", "33"] for n, r in enumerate(rows) if r[3] and color}
        lines.extend("  " + line for line in table(rows, marks).splitlines())
    steps = d.get("pendingSteps") or []
    lines.append(f"  pending steps: {len(steps) or 'none'}")
    if steps:
        lines.extend("    " + line for line in table([_step_text(s) for s in steps]).splitlines())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- plan


def plan_text(body: Json, color: bool = False) -> str:
    """``kvdev plan``: the steps a pass would apply now, grouped by device, then what is blocked."""
    body = _safe(body)
    steps = body.get("steps") or []
    blocked = body.get("blocked") or []
    if not steps and not blocked:
        return "nothing to do: every bound interface is as desired\n"
    groups: dict[str, list[Json]] = {}
    for step in steps:
        groups.setdefault(step.get("device") or "(housekeeping)", []).append(step)
    ordered = [s for members in groups.values() for s in members]
    rendered = iter(table([_step_text(s) for s in ordered]).splitlines() if ordered else [])
    lines: list[str] = []
    for device, members in groups.items():
        lines.append(paint("1", device, color))
        lines.extend("  " + next(rendered) for _ in members)
    if blocked:
        lines.append(paint("1;31", "blocked:", color))
        rows = [(_s(b.get("device")), _s(b.get("interface")), _s(b.get("reason"))) for b in blocked]
        lines.extend("  " + line for line in table(rows).splitlines())
    warned = body.get("warnings") or []
    if warned:
        lines.append(paint("33", "warnings:", color))
        rows = [(_s(w.get("device")), _s(w.get("interface")), _s(w.get("reason"))) for w in warned]
        lines.extend("  " + line for line in table(rows).splitlines())
    lines.append(
        f"{len(steps)} step(s) for {len([g for g in groups if g != '(housekeeping)'])} "
        f"device(s), {len(blocked)} blocked"
    )
    return "\n".join(lines) + "\n"
