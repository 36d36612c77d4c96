"""``LinkEvents``: a socket subscribed to link, address and route changes.

It only says *that* something changed (how many messages arrived); callers re-observe.
"""

from __future__ import annotations

import errno
import os
import struct

from pyroute2.netlink.exceptions import NetlinkError

from kvdev.errors import RetryableError, UsageError
from kvdev.guest.adapters.netlink._rtnl import EVENT_GROUPS, NLMSG_HDRLEN, Socket

_DRAIN_LIMIT = 10_000  # datagrams per drain(), so an event storm cannot hold the caller
_RECV_SIZE = 1 << 18


def _count_messages(datagram: bytes) -> int:
    count, offset = 0, 0
    while offset + NLMSG_HDRLEN <= len(datagram):
        (length,) = struct.unpack_from("=I", datagram, offset)
        count += 1
        if length < NLMSG_HDRLEN:
            break
        offset += (length + 3) & ~3
    return count


class LinkEvents(Socket):
    """A non-blocking socket subscribed to link, address and route changes (IPv4 and IPv6).

    Register ``fileno()`` with a selector; when it is readable, call ``drain()``. Events are
    hints: they say that something changed, and the caller re-reads the state. Opening
    raises like ``Netlink``.
    """

    def __init__(self, netns: str | None = None) -> None:
        super().__init__(netns)
        try:
            self._rtnl.bind(groups=EVENT_GROUPS)
            self._fd = self._rtnl.fileno()
            os.set_blocking(self._fd, False)
        except (NetlinkError, OSError) as e:
            self.close()
            raise RetryableError(f"cannot subscribe to rtnetlink events: {e}") from e

    def fileno(self) -> int:
        """The socket's descriptor, readable when events are pending."""
        if self._ipr is None:
            raise UsageError("this LinkEvents is closed")
        return self._fd

    def drain(self) -> int:
        """Read every pending message without blocking; how many there were (0 if none).

        A receive-buffer overflow (ENOBUFS: events were lost) counts as one message, so the
        caller still learns that the state changed.

        Raises:
            RetryableError: the socket failed in another way.
        """
        fd, count = self.fileno(), 0
        for _ in range(_DRAIN_LIMIT):
            try:
                datagram = os.read(fd, _RECV_SIZE)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    count += 1
                    continue
                raise RetryableError(f"reading rtnetlink events failed: {e}") from e
            if not datagram:
                break
            count += _count_messages(datagram)
        return count
