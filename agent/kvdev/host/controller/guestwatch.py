"""The guests' verdicts over time: grace, state changes worth an Event, the metrics' counts (pure).

Owns what the controller remembers of each VMI's guest between syncs (``Tracker``; times are
the controller's monotonic seconds, passed in):

* the **grace**: a VMI is in grace for ``grace`` seconds after the controller first sees it
  ``Running`` (with this UID), and after what its ConfigMap describes changes (its streams'
  devices or its device hints, as read; kept, so that unchanged data is not read again at each
  sync: ``guests.decode``). A guest needs time to apply them, and KubeVirt up to its
  guest-agent poll (``--qemu-agent-sys-interval``, 120 s by default) to report them. Within it,
  what would be ``Differs`` or ``Unreported`` is ``Pending`` (``guests.compare``);
  ``Assessment.recheck`` says when to sync the VMI again to see the grace end. A restarted
  controller starts every Running VMI's grace afresh;
* **Events**: a NIC whose state changed gets one ``Note`` (``GuestNIC<State>``: Warning for
  Differs and Unreported), at most one per NIC per ``event_interval`` seconds (a change within
  it is noted once the interval is over: ``recheck``); a NIC first seen Applied or Pending
  gets none. The recorder's spam filter bounds them per VMI on top;
* the **counts** a scrape reads (``counts``): NICs by state, Unreported NICs by reason, VMIs
  by their worst NIC, and the age of the oldest NIC continuously ``Differs``.

``forget`` drops a VMI that is gone. Not thread-safe: the live controller holds a lock around
it. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kvdev.host.controller.guests import (
    Decoded,
    GuestReport,
    NicReport,
    NicState,
    UnreportedReason,
    compare,
    decode,
    described_nics,
)
from kvdev.host.controller.vmievents import Note, Reason
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.schema.stream import Writable

GRACE_SECONDS: Final = 180.0  # KubeVirt's guest-agent poll (120 s) plus a guest's first boot
EVENT_INTERVAL_SECONDS: Final = 60.0
_RUNNING: Final = "Running"
_REASONS: Final = {
    NicState.APPLIED: Reason.GUEST_NIC_APPLIED,
    NicState.PENDING: Reason.GUEST_NIC_PENDING,
    NicState.DIFFERS: Reason.GUEST_NIC_DIFFERS,
    NicState.UNREPORTED: Reason.GUEST_NIC_UNREPORTED,
}

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Assessment:
    """One sync's verdict, the Events it is worth, and when to look again (None: no need)."""

    report: GuestReport
    notes: tuple[Note, ...] = ()
    recheck: float | None = None  # seconds from now


@dataclass(frozen=True, slots=True)
class Counts:
    """What the guest metrics say at a scrape."""

    nics: dict[NicState, int]
    unreported: dict[UnreportedReason, int]
    vmis: dict[NicState, int]
    differs_oldest_seconds: float


@dataclass(slots=True)
class _Nic:
    state: NicState
    reason: UnreportedReason | None
    differs_since: float | None
    noted: NicState | None  # the state its last Event said (None: none yet)
    noted_at: float | None


@dataclass(slots=True)
class _Vmi:
    uid: str | None
    # the ConfigMap data last read (its fingerprint: the text is the cache's), and what it read as
    data: int | None = None
    decoded: Decoded = field(default_factory=Decoded)
    running_since: float | None = None
    changed_at: float | None = None
    state: NicState | None = None
    nics: dict[str, _Nic] = field(default_factory=dict)


def _fingerprint(data: Mapping[str, str]) -> int:
    """The data's fingerprint: equal data, equal ints (different data: a 2**-64 chance)."""
    return hash(tuple(sorted(data.items())))


class Tracker:
    """Every VMI's guest verdicts over time (see the module docstring)."""

    def __init__(
        self, grace: float = GRACE_SECONDS, event_interval: float = EVENT_INTERVAL_SECONDS
    ) -> None:
        if grace < 0 or event_interval < 0:
            raise ValueError("the grace and the Event interval must not be negative")
        self.grace, self.event_interval = grace, event_interval
        self._vmis: dict[Key, _Vmi] = {}

    def assess(
        self,
        key: Key,
        vmi: VirtualMachineInstance,
        data: Mapping[str, str],
        now: float,
        documents: Mapping[str, Writable] | None = None,
    ) -> Assessment:
        """Judge the NICs ``data`` (the VMI's ConfigMap) describes now; remember the verdicts.

        Says which Events they are worth. The data is read again only when it changed
        (``documents``: those a render encoded into it, read without their text: ``decode``).
        """
        held = self._vmis.get(key)
        if held is None or held.uid != vmi.metadata.uid:
            held = self._vmis[key] = _Vmi(vmi.metadata.uid)
        seen = _fingerprint(data)
        if held.data != seen:
            decoded = decode(data, documents)
            if held.data is not None and decoded != held.decoded:  # the metadata or hints
                held.changed_at = now
            held.data, held.decoded = seen, decoded
        described = described_nics(vmi, data, held.decoded)
        running = vmi.status is not None and vmi.status.phase == _RUNNING
        if not running:
            held.running_since = None
        elif held.running_since is None:
            held.running_since = now
        starts = [t for t in (held.running_since, held.changed_at) if t is not None]
        grace_left = max((t + self.grace - now for t in starts), default=0.0)
        report = compare(vmi, described, grace_left=max(grace_left, 0.0))
        waits = [grace_left] if grace_left > 0 else []
        notes = self._changes(held, report, now, waits)
        held.state = report.state
        return Assessment(report, tuple(notes), min(waits) if waits else None)

    def _changes(
        self, held: _Vmi, report: GuestReport, now: float, waits: list[float]
    ) -> list[Note]:
        notes = []
        kept: dict[str, _Nic] = {}
        for nic in report.nics:
            before = held.nics.get(nic.nic.ref)
            state = nic.state
            if before is None:
                first_noted = state in (NicState.DIFFERS, NicState.UNREPORTED)
                before = _Nic(state, nic.reason, None, None if first_noted else state, None)
            if state is NicState.DIFFERS:
                if before.differs_since is None or before.state is not state:
                    before.differs_since = now
            else:
                before.differs_since = None
            before.state, before.reason = state, nic.reason
            if before.noted is not state:
                since = None if before.noted_at is None else now - before.noted_at
                if since is None or since >= self.event_interval:
                    notes.append(_note(nic, before.noted))
                    before.noted, before.noted_at = state, now
                else:
                    waits.append(self.event_interval - since)
            kept[nic.nic.ref] = before
        held.nics = kept
        return notes

    def forget(self, key: Key) -> None:
        """The VMI is gone."""
        self._vmis.pop(key, None)

    def counts(self, now: float) -> Counts:
        """NICs and VMIs by state, Unreported NICs by reason, the oldest Differs' age."""
        nics = dict.fromkeys(NicState, 0)
        vmis = dict.fromkeys(NicState, 0)
        unreported = dict.fromkeys(UnreportedReason, 0)
        oldest: float | None = None
        for held in self._vmis.values():
            if held.state is not None:
                vmis[held.state] += 1
            for nic in held.nics.values():
                nics[nic.state] += 1
                if nic.state is NicState.UNREPORTED and nic.reason is not None:
                    unreported[nic.reason] += 1
                if nic.differs_since is not None:
                    oldest = nic.differs_since if oldest is None else min(oldest, nic.differs_since)
        age = max(now - oldest, 0.0) if oldest is not None else 0.0
        return Counts(nics, unreported, vmis, age)


def _note(nic: NicReport, before: NicState | None) -> Note:
    """``NIC net1 (MAC 02:..): Differs: 10.1.0.5/24 not on the guest's data0 (was Applied)``."""
    mac = f" (MAC {nic.nic.mac})" if nic.nic.mac else ""
    was = f" (was {before.value})" if before is not None else ""
    message = f"NIC {nic.nic.label}{mac}: {nic.state.value}: {nic.detail}{was}"
    return Note(_REASONS[nic.state], message)


__all__ = [
    "EVENT_INTERVAL_SECONDS",
    "GRACE_SECONDS",
    "Assessment",
    "Counts",
    "Tracker",
]
