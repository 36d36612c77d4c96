"""Pure matching: each described device to at most one guest device, with the evidence.

Keys, strongest first; a device bound by one phase is not a candidate in the later ones:

1. **pinned**: a guest hint's ``guest.pciAddress``; or **tag**: a hint's ``guest.tag`` looked
   up in the config drive's ``devices[]`` (which gives the guest PCI address). A pin is
   authoritative: a pinned device that is not there is ``missing``, never matched otherwise.
2. **mac**: the MAC the guest sees, from a hint's ``guest.macAddress`` (the host side writes
   one only where KubeVirt itself sets that MAC: a binding plugin's interface, never a DRA
   SR-IOV host device) when set, else ``networkData.hardwareAddress``, against each NIC's
   permanent MAC, else current MAC.
3. **vendor-device**: the PCI vendor:device ID, only when exactly one described device and
   exactly one remaining guest device share it. With several on each side the order of
   host and guest addresses is not trustworthy (VFs are known to be reordered), so that is
   ``ambiguous``, resolved by pinning addresses or tags in the hints.

Two candidates, or two described devices wanting one guest device, is ``ambiguous`` for
the devices involved only; duplicate MACs never stop the run. A guest device no described
device binds is ``unmanaged`` and must never be touched. A CPU device (``DescribedDevice.cpu``)
is matched to nothing: its binding is ``NOTHING_TO_MATCH`` (shown as configured, evidence
``cpu``), never missing.

What one device's binding says stays bounded, so that output grows linearly with devices
however many share a MAC or want one guest device: at most ``MAX_CANDIDATES`` candidates
(the reason gives the count) and ``MAX_NAMED`` competitors named in a reason ("and N more");
matching itself looks MACs up in an index, once per phase.

No I/O here: all inputs are values.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared
from kvdev.guest.core.observed import GuestDevice, Nic
from kvdev.schema.configdrive import TaggedDevice
from kvdev.schema.described import NOT_WRITTEN, DescribedDevice, hint_for
from kvdev.schema.hints import DeviceHint

MAX_CANDIDATES = 8  # guest devices kept as one device's candidates (the reason says how many)
MAX_NAMED = 3  # other described devices a reason names


class MatchState(enum.Enum):
    """Outcome for one described device."""

    BOUND = "Bound"
    MISSING = "Missing"
    AMBIGUOUS = "Ambiguous"
    INVALID = "Invalid"  # its metadata holds a value kvdev cannot act on: never matched
    DEFERRED = "Deferred"  # the driver has not written its metadata yet: never matched
    NOTHING_TO_MATCH = "NothingToMatch"  # a CPU device: no guest device stands for it


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Evidence:
    """One reason for a binding: which key matched, and on what value."""

    kind: str  # pinned | tag | permanent-mac | mac | vendor-device
    detail: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Binding:
    """What became of one described device."""

    device: DescribedDevice
    state: MatchState
    guest: GuestDevice | None = None
    evidence: tuple[Evidence, ...] = ()
    candidates: tuple[str, ...] = ()  # guest device keys considered, when not bound
    reason: str = ""  # why it is missing or ambiguous
    hint: DeviceHint | None = None

    @property
    def nic(self) -> Nic | None:
        """The bound guest device's network interface, if it has exactly one."""
        if self.guest is not None and len(self.guest.nics) == 1:
            return self.guest.nics[0]
        return None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Matching:
    """All bindings, in the order of the described devices, and the unmanaged guest devices."""

    bindings: tuple[Binding, ...]
    unmanaged: tuple[GuestDevice, ...]


def match(
    described: Sequence[DescribedDevice],
    guest: Sequence[GuestDevice],
    hints: Sequence[DeviceHint] = (),
    tagged: Sequence[TaggedDevice] = (),
) -> Matching:
    """Bind described devices to guest devices; see the module docstring for the rules.

    A device whose metadata kvdev cannot act on (``DescribedDevice.problems``) is never
    matched: its binding is ``INVALID`` with the first problem as the reason, and the guest
    device it would have taken stays free for nobody else to take by mistake either. A device
    whose driver has not written its metadata yet (``deferred``) is not matched either: its
    binding is ``DEFERRED`` until the rewrite.
    """
    usable = [d for d in described if d.usable and not d.deferred and not d.cpu]
    matching = _match(usable, guest, hints, tagged)
    found = iter(matching.bindings)
    bindings = tuple(
        next(found)
        if d.usable and not d.deferred and not d.cpu
        else nothing_to_match(d, hint_for(d, hints))
        if d.usable and d.cpu
        else Binding(d, MatchState.INVALID, reason=_invalid_reason(d), hint=hint_for(d, hints))
        if not d.usable
        else Binding(d, MatchState.DEFERRED, reason=NOT_WRITTEN, hint=hint_for(d, hints))
        for d in described
    )
    return Matching(bindings, matching.unmanaged)


CPU_REASON: Final = "a CPU device: the VM's vCPUs, no guest device to match"


def nothing_to_match(d: DescribedDevice, hint: DeviceHint | None) -> Binding:
    """The binding of a CPU device: done as it is, with nothing to match or configure."""
    evidence = Evidence("cpu", f"driver {d.driver}: the VM's vCPUs")
    return Binding(
        d, MatchState.NOTHING_TO_MATCH, evidence=(evidence,), reason=CPU_REASON, hint=hint
    )


def _invalid_reason(d: DescribedDevice) -> str:
    first = d.problems[0]
    where = f"{first.path}: " if first.path else ""
    more = f" (and {len(d.problems) - 1} more)" if len(d.problems) > 1 else ""
    return f"metadata: {where}{first.message}{more}"


def _match(
    described: Sequence[DescribedDevice],
    guest: Sequence[GuestDevice],
    hints: Sequence[DeviceHint],
    tagged: Sequence[TaggedDevice],
) -> Matching:
    by_key = {g.key: g for g in guest}
    results: dict[int, Binding] = {}
    chosen = {i: hint_for(d, hints) for i, d in enumerate(described)}

    # Phase 1: pins and tags.
    wants: dict[int, tuple[str, Evidence] | Binding] = {}
    for i, d in enumerate(described):
        hint = chosen[i]
        if hint is not None and hint.guest is not None:
            wanted = _pinned(d, hint, tagged, by_key)
            if wanted is not None:
                wants[i] = wanted
    _settle(described, wants, by_key, chosen, results)

    # Phase 2: MACs, among guest devices not yet bound.
    index = _mac_index(_free(guest, results))
    wants = {}
    for i, d in enumerate(described):
        hint = chosen[i]
        hinted = hint.guest.mac_address if hint is not None and hint.guest is not None else None
        if i not in results and (hinted or d.mac) is not None:
            wants[i] = _by_mac(d, index, hinted, hint if hinted else None)
    _settle(described, wants, by_key, chosen, results)

    # Phase 3: vendor:device, one to one only.
    free = _free(guest, results)
    wants = {}
    _by_vendor_device(described, free, results, wants)
    _settle(described, wants, by_key, chosen, results)

    bindings = tuple(
        results.get(i) or Binding(d, MatchState.MISSING, reason=_missing_reason(d), hint=chosen[i])
        for i, d in enumerate(described)
    )
    bound = {b.guest.key for b in bindings if b.guest is not None}
    return Matching(bindings, tuple(g for g in guest if g.key not in bound))


def _free(guest: Sequence[GuestDevice], results: dict[int, Binding]) -> list[GuestDevice]:
    taken = {b.guest.key for b in results.values() if b.guest is not None}
    return [g for g in guest if g.key not in taken]


def _pinned(
    d: DescribedDevice,
    hint: DeviceHint,
    tagged: Sequence[TaggedDevice],
    by_key: dict[str, GuestDevice],
) -> tuple[str, Evidence] | Binding | None:
    assert hint.guest is not None
    pin = hint.guest.pci_address
    tag = hint.guest.tag
    tag_addresses = sorted(
        {t.pci_address for t in tagged if tag in t.tags and t.pci_address is not None}
    )
    if tag is not None and len(tag_addresses) > 1:
        return Binding(
            d,
            MatchState.AMBIGUOUS,
            candidates=tuple(tag_addresses[:MAX_CANDIDATES]),
            hint=hint,
            reason=f"tag {tag!r} is on {len(tag_addresses)} config-drive devices",
        )
    if pin is not None:
        if tag_addresses and tag_addresses[0] != pin:
            return Binding(
                d,
                MatchState.AMBIGUOUS,
                candidates=(pin, tag_addresses[0]),
                hint=hint,
                reason=f"hint pins {pin} but tag {tag!r} is at {tag_addresses[0]}",
            )
        if pin not in by_key:
            return Binding(
                d,
                MatchState.MISSING,
                hint=hint,
                reason=f"pinned to guest PCI address {pin}, which the guest does not have",
            )
        return pin, Evidence("pinned", f"guest PCI address {pin} from the hints")
    if tag_addresses and tag_addresses[0] in by_key:
        return tag_addresses[0], Evidence("tag", f"tag {tag!r} at {tag_addresses[0]}")
    return None  # an unresolvable tag is no evidence: fall through to the MAC


_MacIndex = dict[tuple[str, str], list[GuestDevice]]  # (attribute, MAC) -> guest devices


def _mac_index(free: Sequence[GuestDevice]) -> _MacIndex:
    """Every free guest device under each permanent and current MAC of its NICs, in order."""
    index: _MacIndex = defaultdict(list)
    for g in free:
        for attr in ("permanent_mac", "mac"):
            for mac in dict.fromkeys(getattr(n, attr) for n in g.nics):
                if mac is not None:
                    index[attr, mac].append(g)
    return index


def _by_mac(
    d: DescribedDevice,
    index: _MacIndex,
    hinted: str | None = None,
    hint: DeviceHint | None = None,
) -> tuple[str, Evidence] | Binding:
    """Bind by MAC; a MAC from the hints is authoritative (its absence is definitive)."""
    mac = hinted or d.mac
    source = " (from the hints)" if hinted else ""
    for kind, attr in (("permanent-mac", "permanent_mac"), ("mac", "mac")):
        hits = index.get((attr, mac or ""), [])
        if len(hits) == 1:
            return hits[0].key, Evidence(kind, f"{mac}{source} on {hits[0].nics[0].ifname}")
        if len(hits) > 1:
            return Binding(
                d,
                MatchState.AMBIGUOUS,
                candidates=tuple(g.key for g in hits[:MAX_CANDIDATES]),
                reason=f"{len(hits)} guest devices have MAC {mac}{source}",
            )
    return Binding(d, MatchState.MISSING, reason=f"no guest NIC has MAC {mac}{source}", hint=hint)


def _by_vendor_device(
    described: Sequence[DescribedDevice],
    free: Sequence[GuestDevice],
    results: dict[int, Binding],
    wants: dict[int, tuple[str, Evidence] | Binding],
) -> None:
    waiting: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for i, d in enumerate(described):
        if i not in results and d.mac is None and d.vendor_id and d.device_id:
            waiting[(d.vendor_id, d.device_id)].append(i)
    for (vendor, dev), indices in waiting.items():
        pool = [g for g in free if (g.vendor_id, g.device_id) == (vendor, dev)]
        if len(indices) == 1 and len(pool) == 1:
            wants[indices[0]] = (pool[0].key, Evidence("vendor-device", f"only {vendor}:{dev}"))
        elif pool:
            for i in indices:
                wants[i] = Binding(
                    described[i],
                    MatchState.AMBIGUOUS,
                    candidates=tuple(g.key for g in pool[:MAX_CANDIDATES]),
                    reason=f"{len(indices)} described and {len(pool)} guest devices are "
                    f"{vendor}:{dev}; pin guest addresses or tags in the hints",
                )


def _settle(
    described: Sequence[DescribedDevice],
    wants: dict[int, tuple[str, Evidence] | Binding],
    by_key: dict[str, GuestDevice],
    chosen: dict[int, DeviceHint | None],
    results: dict[int, Binding],
) -> None:
    """Record one phase's outcomes; two devices wanting one guest device are both ambiguous."""
    claimants: defaultdict[str, list[int]] = defaultdict(list)
    for i, want in wants.items():
        if isinstance(want, Binding):
            if want.state is not MatchState.MISSING or want.hint is not None:
                results[i] = want  # definitive: ambiguous, or a pinned device that is absent
        else:
            claimants[want[0]].append(i)
    for key, indices in claimants.items():
        for i in indices:
            d, evidence = described[i], wants[i]
            assert not isinstance(evidence, Binding)
            if len(indices) == 1:
                results[i] = Binding(
                    d, MatchState.BOUND, by_key[key], (evidence[1],), hint=chosen[i]
                )
            else:
                named = [described[j].ref for j in indices[: MAX_NAMED + 1] if j != i]
                more = len(indices) - 1 - MAX_NAMED
                others = ", ".join(named[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")
                results[i] = Binding(
                    d,
                    MatchState.AMBIGUOUS,
                    candidates=(key,),
                    hint=chosen[i],
                    reason=f"{key} is also wanted by {others}",
                )


def _missing_reason(d: DescribedDevice) -> str:
    if d.mac is not None:
        return f"no guest NIC has MAC {d.mac}"
    if d.vendor_id and d.device_id:
        return f"no unbound guest device is {d.vendor_id}:{d.device_id}"
    return "nothing to match on: no hint, no MAC, no PCI vendor:device ID"
