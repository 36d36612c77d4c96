"""Pure planning: what each bound interface should look like, and the steps to get there.

For every described device bound to a guest NIC, the desired state is:

* an **altname** derived from the claim (the pod's claim name for template claims), the base
  request and the device, always, so people and scripts have a stable handle;
* a **name**, only when a hint asks for one. A name held by a link that is not itself being
  renamed away blocks the rename (reported, never forced); renames that trade names go
  through temporary names. A link wish (``linkwish``: the name and the MAC or PCI path to
  match, which the root helper ``kvdev-udev-marks`` renders as a ``.link`` file) keeps the
  name across reboots and re-plugs;
* an **MTU**, when a hint sets one and the driver's bounds allow it (and, with IPv6
  addresses or routes, when it is at least 1280: the kernel refuses IPv6 below that, so the
  combination is refused before any step rather than half-applied);
* **addresses**: ``networkData.ips`` plus the hint's; **routes**: the hint's;
* the link **up**.

A link still on its own temporary name (an agent killed mid-trade) whose device no longer asks
for a name gets a name the trade freed: its own old one if free, else another (the caller
journals the names a trade starts from: ``restore``).

What the safety policy (``safety``) refuses is left out of the desired state and reported as
blocked (the primary NIC and a stacked one are not touched at all); what it only warns about
stays in, with the warning in ``Plan.warnings``.

A link taken down for a rename loses its routes and IPv6 addresses (the kernel's doing): the
plan puts back those kvdev did not add too, with their own protocol, after the link is up
again (the kernel's own, and those a router advertised, come back by themselves).

The plan is the difference between that and what netlink observed: a converged system plans
nothing. kvdev removes only addresses and routes carrying its protocol mark (``KVDEV_PROTO``)
and altnames it added (the caller's altname journal: ``altnames``) on links it manages; a
device that leaves the metadata keeps its configuration, but an altname it had moves to the
link that wants it now. Stale altnames go first, before any rename or AddAltname, so the names
they free are free for those (the kernel refuses a name another link holds).

No I/O here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from kvdev._records import compared
from kvdev.guest.core import linkwish, primary, safety
from kvdev.guest.core.matching import Binding, Matching, MatchState
from kvdev.guest.core.observed import KVDEV_PROTO, RTPROT_KERNEL, RTPROT_RA, Link, NetState, Route
from kvdev.guest.core.primary import Decision
from kvdev.guest.core.steps import (
    AddAddress,
    AddAltname,
    AddRoute,
    RemoveAddress,
    RemoveAltname,
    RemoveLinkFile,
    RemoveRoute,
    Rename,
    SetDown,
    SetMtu,
    SetUp,
    Step,
    WriteLinkFile,
)
from kvdev.schema.fields import base_request
from kvdev.schema.hints import IPV6_MIN_MTU

ALTNAME_MAX_BYTES = 127  # ALTIFNAMSIZ (128) minus the NUL
TEMP_PREFIX = "kvtmp"
_DEFAULT_METRIC = {4: 0, 6: 1024}  # what the kernel stores when no metric is given
IFAPROT_KERNEL = frozenset({1, 2, 3})  # addresses the kernel made: loopback, RA, link-local


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Policy:
    """Site choices that are not in the metadata."""

    link_dir: str = "/var/lib/kvdev/links"  # where link wishes go (kvdev-udev-marks reads them)
    altnames: bool = True


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class DesiredRoute:
    """A route kvdev wants through an interface."""

    destination: str
    gateway: str | None = None
    metric: int | None = None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Desired:
    """What one bound interface should look like."""

    device: str
    ifindex: int
    ifname: str
    altname: str | None
    mtu: int | None
    addresses: tuple[str, ...]
    routes: tuple[DesiredRoute, ...]
    link_file: tuple[str, str] | None = None  # a link wish's (path, content), for a rename
    primary: bool = False  # its hint says it is to become the guest's primary NIC (safety)
    refused_routes: tuple[tuple[tuple[str, str | None, int | None], str], ...] = ()
    """Routes the hints list that the safety policy refuses, with why."""


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Blocked:
    """Something wanted that kvdev will not do, and why."""

    device: str
    ifname: str
    reason: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Warned:
    """Something wanted that kvdev does, with a warning (the safety policy's)."""

    device: str
    ifname: str
    reason: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Plan:
    """The steps to apply, in order, with the desired state they aim at."""

    steps: tuple[Step, ...]
    desired: tuple[Desired, ...]
    blocked: tuple[Blocked, ...]
    warnings: tuple[Warned, ...] = ()

    @property
    def empty(self) -> bool:
        """True when there is nothing to do."""
        return not self.steps


_ALTNAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def altname_for(binding: Binding) -> str:
    """``<claim>.<request>.<device>``; shortened with a hash past the kernel's 127 bytes.

    Names come from metadata that upstream's reader accepts whatever they hold, so anything
    but ``[A-Za-z0-9_.-]`` (a '/', a space, non-ASCII) becomes ``-``, with a hash of the
    original appended, so that the kernel never refuses the altname and two names stay apart.
    """
    d = binding.device
    name = f"{d.pod_claim_name or d.claim}.{base_request(d.request)}.{d.name}"
    safe = _ALTNAME_UNSAFE.sub("-", name)
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    if safe == name and len(name) <= ALTNAME_MAX_BYTES:
        return name
    if safe != name and len(safe) + 11 <= ALTNAME_MAX_BYTES:
        return f"{safe}-{digest}"
    return f"{safe[: ALTNAME_MAX_BYTES - 11]}-{digest}"


def _family(address: str) -> int:
    return 6 if ":" in address else 4


def _metric(route: DesiredRoute) -> int:
    return route.metric if route.metric is not None else _DEFAULT_METRIC[_family(route.destination)]


def _link_file(binding: Binding, link: Link, name: str, policy: Policy) -> tuple[str, str] | None:
    """The link wish (path, content) that keeps ``name`` for this link; None without a key."""
    if link.permanent_mac:
        content = linkwish.wish_text("permanent-mac", link.permanent_mac)
    elif binding.guest is not None and binding.guest.pci_address:
        content = linkwish.wish_text("pci", binding.guest.pci_address)
    elif link.mac:
        content = linkwish.wish_text("mac", link.mac)
    else:
        return None  # nothing a .link file could match it by
    return f"{policy.link_dir}/{linkwish.wish_file(name)}", content


def temp_name(ifindex: int) -> str:
    """The name a link holds while it trades names with others."""
    return f"{TEMP_PREFIX}{ifindex}"


def wanted_mtu(binding: Binding, ifname: str, capped: list[Warned]) -> int | None:
    """The NIC's MTU: the hint's, else the driver's (its ``mtu`` attribute), never above it.

    A hint asking for more than the driver's MTU gets the driver's, with a warning in ``capped``.
    """
    net = binding.hint.network if binding.hint is not None else None
    asked = net.mtu if net is not None else None
    driver = binding.device.mtu
    if asked is None or driver is None or asked <= driver:
        return asked if asked is not None else driver
    capped.append(
        Warned(
            binding.device.ref,
            ifname,
            f"the hints ask for MTU {asked}, more than the driver's {driver} (its mtu attribute): "
            f"set to {driver}",
        )
    )
    return driver


def _desire(
    binding: Binding,
    link: Link,
    policy: Policy,
    blocked: list[Blocked],
    restore: Mapping[int, str],
    capped: list[Warned],
) -> Desired:
    net = binding.hint.network if binding.hint is not None else None
    ref = binding.device.ref
    mtu = wanted_mtu(binding, link.ifname, capped)
    if mtu is not None and not (link.min_mtu or 0) <= mtu <= (link.max_mtu or mtu):
        blocked.append(
            Blocked(
                ref,
                link.ifname,
                f"MTU {mtu} is outside the driver's range {link.min_mtu}..{link.max_mtu}",
            )
        )
        mtu = None
    addresses = tuple(dict.fromkeys([*binding.device.ips, *((net.addresses or []) if net else [])]))
    routes = tuple(
        DesiredRoute(r.destination, r.gateway, r.metric)
        for r in ((net.routes or []) if net else [])
    )
    mtu, addresses, routes = _ipv6_minimum(ref, link, mtu, addresses, routes, blocked)
    name = net.interface_name if net is not None and net.interface_name else link.ifname
    name = restore.get(link.ifindex, name) if name == temp_name(link.ifindex) else name
    return Desired(
        device=ref,
        ifindex=link.ifindex,
        ifname=name,
        altname=altname_for(binding) if policy.altnames else None,
        mtu=mtu,
        addresses=addresses,
        routes=routes,
        link_file=(
            _link_file(binding, link, name, policy)
            if net is not None and net.interface_name
            else None
        ),
        primary=bool(net is not None and net.primary),
    )


def _ipv6_minimum(
    ref: str,
    link: Link,
    mtu: int | None,
    addresses: tuple[str, ...],
    routes: tuple[DesiredRoute, ...],
    blocked: list[Blocked],
) -> tuple[int | None, tuple[str, ...], tuple[DesiredRoute, ...]]:
    """Refuse what the kernel would half-apply: IPv6 on a link whose MTU is below 1280.

    The kernel turns IPv6 off on a link below ``IPV6_MIN_MTU`` (RFC 8200) and then refuses its
    IPv6 addresses and routes (EINVAL), after the MTU and the IPv4 addresses went in. So the
    combination is refused here, before any step: a hinted MTU below the minimum is left out
    when the device has IPv6 addresses or routes (they go in at the link's own MTU); when the
    link's own MTU is below it and no hint changes that, the IPv6 addresses and routes are.
    """
    six = [a for a in addresses if _family(a) == 6]
    six_routes = [r.destination for r in routes if _family(r.destination) == 6]
    if not six and not six_routes:
        return mtu, addresses, routes
    what = ", ".join(
        part
        for part in (
            f"IPv6 addresses {', '.join(six)} (networkData.ips, network.addresses)" if six else "",
            f"IPv6 routes to {', '.join(six_routes)} (network.routes)" if six_routes else "",
        )
        if part
    )
    if mtu is not None and mtu < IPV6_MIN_MTU:
        reason = (
            f"network.mtu {mtu} is below {IPV6_MIN_MTU}, the IPv6 minimum, and the device has "
            f"{what}: the MTU is not set"
        )
        blocked.append(Blocked(ref, link.ifname, reason))
        mtu = None
    if mtu is None and link.mtu < IPV6_MIN_MTU:
        reason = (
            f"the link's MTU {link.mtu} is below {IPV6_MIN_MTU}, the IPv6 minimum: {what} "
            "not configured"
        )
        blocked.append(Blocked(ref, link.ifname, reason))
        addresses = tuple(a for a in addresses if _family(a) == 4)
        routes = tuple(r for r in routes if _family(r.destination) == 4)
    return mtu, addresses, routes


def _renames(
    desired: list[Desired], state: NetState, blocked: list[Blocked], freed: Collection[str]
) -> tuple[list[Step], set[int], list[Desired]]:
    """Rename steps (down, temporary names when names are traded, final names).

    ``freed``: altnames the plan removes before its renames. Returns the steps, the links they
    take down, and the desired states with blocked renames replaced by the current name.
    """
    holders = {lk.ifname: lk.ifindex for lk in state.links}
    holders.update({a: lk.ifindex for lk in state.links for a in lk.altnames if a not in freed})
    moving = {d.ifindex: d for d in desired if d.ifname != _name(state, d)}
    ok = _feasible(moving, holders)
    blocked.extend(
        Blocked(d.device, _name(state, d), _blocked_reason(d, ifindex, holders, moving, state))
        for ifindex, d in moving.items()
        if ifindex not in ok
    )
    traded = any(holders.get(d.ifname) in ok for d in ok.values())
    steps: list[Step] = []
    downed: set[int] = set()
    for ifindex, d in sorted(ok.items()):
        link = state.link(ifindex)
        assert link is not None
        if link.up:
            steps.append(SetDown(ifindex, link.ifname, d.device, "a link must be down to rename"))
            downed.add(ifindex)
        if traded:
            temp = temp_name(ifindex)
            steps.append(Rename(ifindex, link.ifname, d.device, "free the name for a trade", temp))
    for ifindex, d in sorted(ok.items()):
        current = temp_name(ifindex) if traded else _name(state, d)
        steps.append(Rename(ifindex, current, d.device, "the hints ask for this name", d.ifname))
    kept = [
        _keep_name(d, state) if d.ifindex in moving and d.ifindex not in ok else d for d in desired
    ]
    return steps, downed, kept


def _feasible(moving: dict[int, Desired], holders: dict[str, int]) -> dict[int, Desired]:
    """Renames that can go ahead: the name is free, or held by a link that moves too.

    Chains and trades work; anything depending on a blocked rename is blocked in turn.
    """
    ok = dict(moving)
    changed = True
    while changed:
        changed = False
        for ifindex, d in list(ok.items()):
            holder = holders.get(d.ifname)
            if holder is not None and (holder == ifindex or holder not in ok):
                del ok[ifindex]
                changed = True
    return ok


def _blocked_reason(
    d: Desired, ifindex: int, holders: dict[str, int], moving: dict[int, Desired], state: NetState
) -> str:
    holder = holders[d.ifname]
    owner = state.link(holder)
    owner_name = owner.ifname if owner else str(holder)
    if holder == ifindex:
        why = f"an altname of {owner_name}"
    elif holder in moving:
        why = f"held by {owner_name}, whose own rename is blocked"
    else:
        why = f"held by {owner_name}, which kvdev does not rename"
    return f"name {d.ifname!r} is {why}"


def _name(state: NetState, d: Desired) -> str:
    link = state.link(d.ifindex)
    return link.ifname if link is not None else d.ifname


def _keep_name(d: Desired, state: NetState) -> Desired:
    return replace(d, ifname=_name(state, d), link_file=None)


def _link_steps(d: Desired, link: Link, state: NetState, was_downed: bool) -> list[Step]:
    steps: list[Step] = []
    at = (d.ifindex, d.ifname, d.device)
    if d.altname and d.altname not in link.altnames and d.altname != link.ifname:
        steps.append(AddAltname(*at, "stable handle for the described device", d.altname))
    if d.mtu is not None and link.mtu != d.mtu:
        steps.append(SetMtu(*at, f"MTU is {link.mtu}", d.mtu))
    if not link.up or was_downed:
        steps.append(SetUp(*at, "a managed link is up"))
    have = {a.address: a for a in state.addresses if a.ifindex == d.ifindex}
    if was_downed:  # the kernel drops IPv6 addresses and all routes of a link taken down
        have = {k: a for k, a in have.items() if _family(k) == 4}
    steps.extend(
        RemoveAddress(*at, "kvdev added it and the metadata no longer lists it", a.address)
        for a in have.values()
        if a.proto == KVDEV_PROTO and a.address not in d.addresses
    )
    steps.extend(AddAddress(*at, "listed in the metadata", a) for a in d.addresses if a not in have)
    wanted = {(r.destination, r.gateway, _metric(r)) for r in d.routes}
    refused = {
        (dest, gw, _metric(DesiredRoute(dest, gw, metric))): why
        for (dest, gw, metric), why in d.refused_routes
    }
    routes = [r for r in state.routes if r.ifindex == d.ifindex and not was_downed]
    present = set()
    for r in routes:
        key = (
            r.destination,
            r.gateway,
            r.metric if r.metric is not None else _DEFAULT_METRIC[_family(r.destination)],
        )
        present.add(key)
        if r.protocol == KVDEV_PROTO and key not in wanted:
            why = refused.get(key)
            steps.append(
                RemoveRoute(
                    *at,
                    f"kvdev added it and the safety policy refuses it now: {why}"
                    if why is not None
                    else "kvdev added it and the hints no longer list it",
                    r.destination,
                    r.gateway,
                    r.metric,
                )
            )
    steps.extend(
        AddRoute(*at, "listed in the hints", r.destination, r.gateway, r.metric)
        for r in d.routes
        if (r.destination, r.gateway, _metric(r)) not in present
    )
    if was_downed:
        steps.extend(_put_back(d, state, wanted))
    return steps


def _put_back(d: Desired, state: NetState, wanted: set[tuple[str, str | None, int]]) -> list[Step]:
    """What the link lost, not kvdev's, when it went down for its rename: back as it was."""
    at = (d.ifindex, d.ifname, d.device)
    why = "it was on the link before the link went down for its rename"
    out: list[Step] = [
        AddAddress(*at, why, a.address, a.proto)
        for a in state.addresses
        if a.ifindex == d.ifindex
        and _family(a.address) == 6
        and a.proto != KVDEV_PROTO
        and a.proto not in IFAPROT_KERNEL
        and not a.address.startswith("fe80:")
        and a.address not in d.addresses
    ]
    out.extend(
        AddRoute(*at, why, r.destination, r.gateway, r.metric, r.protocol)
        for r in state.routes
        if r.ifindex == d.ifindex
        and r.protocol not in {KVDEV_PROTO, RTPROT_KERNEL, RTPROT_RA}
        and (r.destination, r.gateway, _route_metric(r)) not in wanted
    )
    return out


def _route_metric(r: Route) -> int:
    return r.metric if r.metric is not None else _DEFAULT_METRIC[_family(r.destination)]


def plan(  # noqa: PLR0913 - the pass's inputs; dns keyword-only
    matching: Matching,
    state: NetState,
    link_files: Mapping[str, str] | None = None,
    policy: Policy | None = None,
    restore: Mapping[int, str] | None = None,
    owned: Decision | None = None,
    altnames: Mapping[int, Collection[str]] | None = None,
    *,
    dns: Sequence[str] = (),
) -> Plan:
    """Diff the desired state of every bound NIC against the observed state.

    ``restore``: ifindex -> the name the link had before a trade that may have been
    interrupted (see ``temp_name``). ``owned``: the guest's own NICs (``core.primary``), not
    touched at all, like the primary NIC, and whose traffic no other link may capture.
    ``altnames``: ifindex -> the altnames kvdev added to the link (the altname journal), the
    only ones it ever removes. ``dns``: the guest's DNS servers (``safety.Guard``).
    """
    policy = policy or Policy()
    protected = primary.protected(state, owned)
    back = _restorations(matching, state, restore or {})
    blocked: list[Blocked] = []
    desired: list[Desired] = []
    capped: list[Warned] = []  # hints' MTUs above the driver's
    for b in matching.bindings:
        nic = b.nic
        link = state.link(nic.ifindex) if b.state is MatchState.BOUND and nic else None
        if link is None:
            continue
        if (why := _hands_off(link, state, protected)) is not None:
            blocked.append(Blocked(b.device.ref, link.ifname, why))
            continue
        desired.append(_desire(b, link, policy, blocked, back, capped))
    desired, warnings = _safe(desired, state, blocked, safety.Guard(protected, tuple(dns)))
    steps = _stale_altnames(desired, state, altnames or {}, protected)
    freed = {s.altname for s in steps if isinstance(s, RemoveAltname)}
    renames, downed, desired = _renames(desired, state, blocked, freed)
    steps.extend(renames)
    for d in desired:
        link = state.link(d.ifindex)
        assert link is not None
        steps.extend(_link_steps(d, link, state, d.ifindex in downed))
    steps.extend(_file_steps(desired, link_files or {}, policy))
    return Plan(tuple(steps), tuple(desired), tuple(blocked), (*capped, *warnings))


def _hands_off(link: Link, state: NetState, protected: primary.Protected) -> str | None:
    """Why kvdev does not touch ``link`` at all (a primary NIC, ``core.primary``; a stacked one)."""
    return protected.why(link.ifindex) or safety.stacked(link, state)


def _stale_altnames(
    desired: list[Desired],
    state: NetState,
    added: Mapping[int, Collection[str]],
    protected: primary.Protected,
) -> list[Step]:
    """The altnames kvdev added (``added``) that are no longer wanted where they are.

    A link kvdev configures keeps only its desired altname of those. A link it no longer
    configures (its device left the metadata, or is not bound now) keeps them, as it keeps
    its addresses, unless a configured link wants one: the name moves. A link kvdev does not
    touch at all keeps everything. An altname kvdev did not add is never removed.
    """
    if not added:  # nearly always once converged: nothing to look up
        return []
    wanted = {d.ifindex: d for d in desired}
    wanted_by = {d.altname: d for d in desired if d.altname}
    steps: list[Step] = []
    for ifindex, names in sorted(added.items()):
        link = state.link(ifindex)
        if link is None or (ifindex not in wanted and _hands_off(link, state, protected)):
            continue
        for name in sorted(set(names).intersection(link.altnames)):
            mine, other = wanted.get(ifindex), wanted_by.get(name)
            if mine is not None and mine.altname != name:
                why = "kvdev added it and the metadata no longer asks for it"
                steps.append(RemoveAltname(ifindex, link.ifname, mine.device, why, name))
            elif mine is None and other is not None:
                why = f"kvdev added it and the metadata now asks for it on {other.ifname}"
                steps.append(RemoveAltname(ifindex, link.ifname, other.device, why, name))
    return steps


def _safe(
    desired: list[Desired], state: NetState, blocked: list[Blocked], guard: safety.Guard
) -> tuple[list[Desired], list[Warned]]:
    """``desired`` with what the safety policy refuses left out (and blocked); its warnings."""
    wanted = [
        safety.Wanted(
            d.device,
            d.ifindex,
            d.ifname,
            d.addresses,
            tuple((r.destination, r.gateway, r.metric) for r in d.routes),
            d.primary,
        )
        for d in desired
    ]
    out: list[Desired] = []
    warnings: list[Warned] = []
    for d, ruling in zip(desired, safety.judge(wanted, state, guard), strict=True):
        out.append(
            replace(
                d,
                addresses=ruling.addresses,
                routes=tuple(DesiredRoute(*r) for r in ruling.routes),
                refused_routes=ruling.refused_routes,
            )
        )
        blocked.extend(Blocked(d.device, d.ifname, reason) for reason in ruling.refused)
        warnings.extend(Warned(d.device, d.ifname, reason) for reason in ruling.warnings)
    return out, warnings


def _restorations(
    matching: Matching, state: NetState, journal: Mapping[int, str]
) -> dict[int, str]:
    """For links left on their temporary names: a name the interrupted trade freed.

    Each gets its own old name when nothing holds it, else the first other freed name; names
    a hint asks for are never handed out.
    """
    stuck = sorted(lk.ifindex for lk in state.links if lk.ifname == temp_name(lk.ifindex))
    if not stuck or not journal:  # nearly always: nothing to hand out, no names to collect
        return {}
    held = {lk.ifname for lk in state.links} | {a for lk in state.links for a in lk.altnames}
    held |= {
        b.hint.network.interface_name
        for b in matching.bindings
        if b.hint is not None and b.hint.network is not None and b.hint.network.interface_name
    }
    free = sorted(set(journal.values()) - held)
    out = {}
    for ifindex in stuck:
        if journal.get(ifindex) in free:
            out[ifindex] = journal[ifindex]
            free.remove(journal[ifindex])
    for ifindex in stuck:
        if ifindex not in out and ifindex in journal and free:
            out[ifindex] = free.pop(0)
    return out


def _file_steps(desired: list[Desired], existing: Mapping[str, str], policy: Policy) -> list[Step]:
    steps: list[Step] = []
    wanted = {d.link_file[0]: (d, d.link_file[1]) for d in desired if d.link_file}
    for path, (d, content) in sorted(wanted.items()):
        if existing.get(path) != content:
            steps.append(
                WriteLinkFile(
                    d.ifindex,
                    d.ifname,
                    d.device,
                    "keep the name across reboots and re-plugs (a link wish)",
                    path,
                    content,
                )
            )
    prefix = f"{policy.link_dir}/"
    steps.extend(
        RemoveLinkFile(0, "", "", "no managed interface wants this name any more", path)
        for path in sorted(existing)
        if path.startswith(prefix) and path.endswith(linkwish.WISH_SUFFIX) and path not in wanted
    )
    return steps
