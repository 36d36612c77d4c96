"""The few agent messages people alert on, each with a fixed journald ``MESSAGE_ID``.

Pure: two consecutive statuses and the safety policy's refusals in, messages out. It owns
which changes deserve one (a device became Configured; the policy refused something it did
not refuse before; a metadata file became invalid), their text and their fields: the
``MESSAGE_ID`` (a UUID per kind of message, as systemd's catalog gives its own, so that
``journalctl MESSAGE_ID=...`` finds every one whatever its wording) and ``DEVICE`` / ``CLAIM``.
The loop logs them (``guest/loop.py``); ``kvdev-agent(8)`` lists the IDs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared
from kvdev.guest.core.planning import Blocked
from kvdev.guest.core.status import Phase, Status, changes

CONFIGURED: Final = "b18060ec46284ce1b39e4a3353bb561f"  # a described device is configured
REFUSED: Final = "1b50d70fcdf748848ff181eca211c6a6"  # the safety policy refused a step
METADATA_INVALID: Final = "7b9e245f5e774cc7ac73f788d877d66d"  # a metadata file is invalid


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Alert:
    """One message: its ID, its level (``info`` or ``warning``), text and journal fields."""

    message_id: str
    level: str
    text: str
    device: str = ""

    @property
    def fields(self) -> dict[str, str]:
        """``MESSAGE_ID``, and ``DEVICE`` and ``CLAIM`` when the message is about a device."""
        out = {"MESSAGE_ID": self.message_id}
        if self.device:
            out |= {"DEVICE": self.device, "CLAIM": claim_of(self.device)}
        return out


def claim_of(ref: str) -> str:
    """The claim of a device ref (``claim/request/driver/pool/device``)."""
    return ref.split("/", 1)[0]


def alerts(
    before: Status | None,
    after: Status,
    refused_before: Sequence[Blocked],
    refused_now: Sequence[Blocked],
) -> list[Alert]:
    """What changed from ``before`` to ``after`` that someone may alert on, in that order."""
    out: list[Alert] = []
    for change in changes(before, after):
        if (
            change.type in {"DeviceAdded", "DeviceChanged"}
            and change.phase == Phase.CONFIGURED.value
        ):
            out.append(Alert(CONFIGURED, "info", f"{change.subject}: configured", change.subject))
        elif change.type == "MetadataError":
            out.append(Alert(METADATA_INVALID, "warning", f"metadata invalid: {change.message}"))
    seen = {(b.device, b.reason) for b in refused_before}
    out.extend(
        Alert(REFUSED, "warning", f"{b.device}: refused on {b.ifname}: {b.reason}", b.device)
        for b in refused_now
        if (b.device, b.reason) not in seen
    )
    return out
