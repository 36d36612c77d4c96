"""``Netlink``: the state from the event-fed cache, and steps applied as one batch.

``read_state`` answers from a ``Cache`` that one full dump filled (at the first read, and again
after the event socket overflowed: ENOBUFS) and that the events since keep current: a read
costs the events that arrived, not the links of the guest. ``apply`` turns each step into one
request (what to say, its bytes, which errnos mean it is already done), sends every request of
the call in one ``send`` (NLM_F_ACK on each), reads the acknowledgements together and maps each
one back to its step by sequence number, with the kernel's extended-ack message in the error.
The kernel handles the messages of one send in order and goes on after one fails, as the
steps were applied one by one before.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from kvdev._records import compared
from kvdev.errors import RetryableError
from kvdev.guest.adapters.netlink import _codec as codec
from kvdev.guest.adapters.netlink._cache import Cache
from kvdev.guest.adapters.netlink._rtnl import (
    NLM_F_DUMP_INTR,
    NLMSG_DONE,
    NLMSG_ERROR,
    RT_SCOPE_LINK,
    RT_SCOPE_NOWHERE,
    RT_SCOPE_UNIVERSE,
    RTM_GETROUTE,
    RTMSG,
    Socket,
    messages,
    open_socket,
    subscribe,
)
from kvdev.guest.core import steps as st
from kvdev.guest.core.observed import KVDEV_PROTO, NetState

_DUMP_ATTEMPTS = 3  # a dump interrupted by concurrent changes is retried this many times
_DRAIN_LIMIT = 10_000  # datagrams per read, so an event storm cannot hold the caller
_RECV_SIZE = 1 << 16

_RETRYABLE = frozenset(
    {errno.EBUSY, errno.EAGAIN, errno.ENODEV, errno.ENETUNREACH, errno.ETIMEDOUT, errno.ENOBUFS}
)
_ALREADY_THERE = frozenset({errno.EEXIST})
_ALREADY_GONE = frozenset({errno.EADDRNOTAVAIL, errno.ESRCH, errno.ENOENT})
_NOT_NETLINK = "not a netlink step"


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _Request:
    """One netlink request for a step: what to say, what to send, which errnos mean done."""

    what: str
    message: bytes
    done_if: frozenset[int] = frozenset()
    altname: str | None = None  # on EEXIST: done only if the link has it (not another link)


class _Interrupted(Exception):  # noqa: N818 - private control flow, not an error
    """The kernel flagged a dump as inconsistent (NLM_F_DUMP_INTR): something changed."""


def _error_text(what: str, code: int, message: str) -> str:
    reason = os.strerror(code) if code > 0 else "error"
    if message and message != reason:
        return f"{what}: {message} ({reason}, errno {code})"
    return f"{what}: {reason} (errno {code})"


def _route_text(verb: str, step: st.AddRoute | st.RemoveRoute) -> str:
    via = f" via {step.gateway}" if step.gateway else ""
    metric = f" metric {step.metric}" if step.metric is not None else ""
    return f"{verb} route {step.destination}{via} dev {step.ifname}{metric}"


def _route(seq: int, step: st.AddRoute | st.RemoveRoute) -> bytes:
    """The request adding or removing the route of ``step`` (ValueError if malformed)."""
    network = ipaddress.ip_network(step.destination)
    gateway = ipaddress.ip_address(step.gateway) if step.gateway else None
    if gateway is not None and gateway.version != network.version:
        raise ValueError(f"gateway {gateway} is not IPv{network.version}")
    add = isinstance(step, st.AddRoute)
    if isinstance(step, st.AddRoute):
        protocol = step.protocol
        scope = RT_SCOPE_UNIVERSE if gateway is not None else RT_SCOPE_LINK
    else:  # only kvdev's own: the kernel matches the protocol of a route it deletes
        protocol, scope = KVDEV_PROTO, RT_SCOPE_NOWHERE
    return codec.route_request(
        seq,
        add=add,
        network=network,
        oif=step.ifindex,
        gateway=gateway,
        metric=step.metric,
        protocol=protocol,
        scope=scope,
    )


def _request(seq: int, step: st.Step) -> _Request | None:  # noqa: PLR0911 - one per kind
    """The request for ``step``; None when it is not a netlink step (ValueError if malformed)."""
    index, name = step.ifindex, step.ifname
    match step:
        case st.AddAltname(altname=altname):
            message = codec.altname_request(seq, index, altname, add=True)
            return _Request(f"add altname {altname} to {name}", message, _ALREADY_THERE, altname)
        case st.RemoveAltname(altname=altname):
            message = codec.altname_request(seq, index, altname, add=False)
            return _Request(f"remove altname {altname} from {name}", message, _ALREADY_GONE)
        case st.SetDown() | st.SetUp():
            up = isinstance(step, st.SetUp)
            message = codec.link_request(seq, index, up=up)
            return _Request(f"set {name} {'up' if up else 'down'}", message)
        case st.Rename(new_name=new):
            return _Request(f"rename {name} to {new}", codec.link_request(seq, index, name=new))
        case st.SetMtu(mtu=mtu):
            return _Request(f"set mtu {mtu} on {name}", codec.link_request(seq, index, mtu=mtu))
        case st.AddAddress(address=address, protocol=protocol):
            interface = ipaddress.ip_interface(address)
            message = codec.address_request(seq, index, interface, add=True, protocol=protocol)
            return _Request(f"add address {address} to {name}", message, _ALREADY_THERE)
        case st.RemoveAddress(address=address):
            interface = ipaddress.ip_interface(address)
            message = codec.address_request(seq, index, interface, add=False)
            return _Request(f"remove address {address} from {name}", message, _ALREADY_GONE)
        case st.AddRoute():
            return _Request(_route_text("add", step), _route(seq, step), _ALREADY_THERE)
        case st.RemoveRoute():
            return _Request(_route_text("remove", step), _route(seq, step), _ALREADY_GONE)
    return None


class Netlink(Socket):
    """An rtnetlink socket with its event-fed cache, in the current or a named namespace.

    ``Netlink(netns="blue")`` works in ``/var/run/netns/blue`` (as ``ip netns`` names it; an
    absolute path such as ``/proc/<pid>/ns/net`` works too). Opening raises ``UsageError``
    when the namespace does not exist (none is created) and ``RetryableError`` when a socket
    cannot be opened. Not thread-safe: one thread uses it.
    """

    def __init__(self, netns: str | None = None) -> None:
        super().__init__(netns)
        self._cache = Cache()
        try:
            self._feed = open_socket(netns)  # the cache's own subscription
        except BaseException:
            super().close()
            raise
        try:
            subscribe(self._feed)
            self._feed.setblocking(False)  # noqa: FBT003 - stdlib signature
        except OSError as e:
            self.close()
            raise RetryableError(f"cannot subscribe to rtnetlink events: {e}") from e

    def close(self) -> None:
        """Close both sockets (idempotent)."""
        if self._sock is not None:
            self._feed.close()
        super().close()

    def read_state(self) -> NetState:
        """All links, IPv4/IPv6 addresses and main-table unicast routes, as of now.

        Raises:
            RetryableError: a dump failed, or kept being interrupted by concurrent changes.
        """
        sock = self.sock
        del sock  # closed: UsageError before anything else
        for _ in range(_DUMP_ATTEMPTS):
            try:
                if not self._cache.valid:
                    self._cache.clear()
                    for kind, body in codec.DUMPS:
                        self._dump(kind, body)
                    self._cache.valid = True
                self._drain()
                if self._cache.routes_stale and self._cache.valid:
                    self._cache.clear_ipv4_routes()
                    self._dump(RTM_GETROUTE, RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0))
                    self._drain()
            except _Interrupted:
                self._cache.valid = False
                continue
            except OSError as e:
                self._cache.valid = False
                raise RetryableError(f"reading rtnetlink state failed: {e}") from e
            if self._cache.valid:
                return self._cache.state()
        raise RetryableError("rtnetlink dumps kept being interrupted by concurrent changes")

    def _dump(self, kind: int, body: bytes) -> None:
        """Run one dump into the cache (raises _Interrupted, OSError)."""
        seq = self.next_seq()
        interrupted = False

        def on_reply(reply: int, flags: int, _seq: int, payload: memoryview) -> bool:
            nonlocal interrupted
            interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
            if reply == NLMSG_ERROR:
                code, text = codec.ack_error(payload)
                raise OSError(code, text or os.strerror(code))
            if reply == NLMSG_DONE:
                return True
            self._cache.feed(reply, flags, payload)
            return False

        self.exchange([(seq, codec.dump_request(seq, kind, body))], on_reply)
        if interrupted:
            raise _Interrupted

    def _drain(self) -> None:
        """Feed every pending event to the cache; an overflow (ENOBUFS) invalidates it."""
        for _ in range(_DRAIN_LIMIT):
            try:
                data = self._feed.recv(_RECV_SIZE)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                self._cache.valid = False  # events were lost: dump again
                continue
            for kind, flags, _seq, payload in messages(data):
                self._cache.feed(kind, flags, payload)

    def apply(self, steps: Sequence[st.Step]) -> list[st.StepResult]:
        """Apply the steps in order, in one batch; one result per step, whatever the others did."""
        results: list[st.StepResult | None] = [None] * len(steps)
        requests: dict[int, tuple[int, _Request]] = {}
        for i, step in enumerate(steps):
            seq = self.next_seq()
            try:
                request = _request(seq, step)
            except ValueError as e:
                error = f"{type(step).__name__} on {step.ifname}: {e}"  # a malformed step
                results[i] = st.StepResult(step=step, ok=False, error=error, retryable=False)
                continue
            if request is None:
                results[i] = st.StepResult(step=step, ok=False, error=_NOT_NETLINK)
                continue
            requests[seq] = (i, request)
        errors: dict[int, tuple[int, str]] = {}

        def on_reply(reply: int, _flags: int, seq: int, payload: memoryview) -> bool:
            if reply != NLMSG_ERROR:
                return False
            errors[seq] = codec.ack_error(payload)
            return True

        if requests:
            try:
                self.exchange([(seq, r.message) for seq, (_, r) in requests.items()], on_reply)
            except OSError as e:  # the socket itself failed: every unanswered step may pass
                code = e.errno or errno.EIO
                for seq in requests:
                    errors.setdefault(seq, (code, ""))
        for seq, (i, request) in requests.items():
            results[i] = self._result(steps[i], request, *errors[seq])
        return [r for r in results if r is not None]

    def _result(self, step: st.Step, request: _Request, code: int, message: str) -> st.StepResult:
        if code == 0:
            return st.StepResult(step=step, ok=True)
        if code in request.done_if and (
            request.altname is None or self._has_name(step.ifindex, request.altname)
        ):
            return st.StepResult(step=step, ok=True)
        error = _error_text(request.what, code, message)
        return st.StepResult(step=step, ok=False, error=error, retryable=code in _RETRYABLE)

    def _has_name(self, ifindex: int, name: str) -> bool:
        """Whether ``name`` (ifname or altname) belongs to the link ``ifindex``, as of now."""
        try:
            link = self.read_state().link(ifindex)
        except RetryableError:
            return False
        return link is not None and name in {link.ifname, *link.altnames}
