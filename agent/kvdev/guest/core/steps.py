"""The typed steps a plan is made of: plain values, applied elsewhere (``netlink``, ``linkfiles``).

Every step names the link by ifindex (stable while the link exists) and carries the ifname
and described device it is for, so results and logs read well. ``reason`` says why the step
is needed (shown by ``kvdev plan``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdev._records import compared
from kvdev.guest.core.observed import KVDEV_PROTO


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Step:
    """Base of all steps."""

    ifindex: int
    ifname: str
    device: str  # the described device's ref, or "" for housekeeping
    reason: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AddAltname(Step):
    """Add an alternative name to the link."""

    altname: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RemoveAltname(Step):
    """Remove an alternative name kvdev added earlier (the altname journal says so)."""

    altname: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SetDown(Step):
    """Set the link administratively down (only before a rename)."""


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Rename(Step):
    """Rename the link to ``new_name`` (the link is down)."""

    new_name: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SetMtu(Step):
    """Set the link's MTU."""

    mtu: int


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AddAddress(Step):
    """Add an address (``10.1.0.5/24``), marked with kvdev's protocol.

    ``protocol`` is another mark (or None: none) only when an address kvdev did not add is
    put back: one the kernel dropped when the link went down for a rename.
    """

    address: str
    protocol: int | None = KVDEV_PROTO


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RemoveAddress(Step):
    """Remove an address kvdev added earlier."""

    address: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AddRoute(Step):
    """Add a route through the link, marked with kvdev's protocol.

    ``protocol`` is another one only when a route kvdev did not add is put back: one the
    kernel deleted when the link went down for a rename (it keeps its own protocol, so kvdev
    never takes it for one of its own).
    """

    destination: str
    gateway: str | None
    metric: int | None
    protocol: int = KVDEV_PROTO


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RemoveRoute(Step):
    """Remove a route kvdev added earlier."""

    destination: str
    gateway: str | None
    metric: int | None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SetUp(Step):
    """Set the link administratively up."""


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class WriteLinkFile(Step):
    """Write a link wish (``linkwish``) so the name survives a reboot or re-plug.

    The root helper ``kvdev-udev-marks`` renders it as a ``.link`` file; the agent never writes
    one.
    """

    path: str
    content: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RemoveLinkFile(Step):
    """Remove the link wish of a name no longer wanted (the helper removes its ``.link`` file)."""

    path: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class StepResult:
    """How applying one step went.

    ``retryable`` is meaningful only when ``ok`` is False: True for errors that may pass
    (EBUSY, EAGAIN, a link that is gone for now), False for ones that will not (EINVAL, ERANGE).
    """

    step: Step
    ok: bool
    error: str = ""
    retryable: bool = False
