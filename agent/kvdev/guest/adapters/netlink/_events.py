"""``LinkEvents``: a socket subscribed to link, address and route changes.

It only says *that* something changed (how many messages arrived), to wake the loop; the
``Netlink`` cache reads the same events on its own socket and applies them.
"""

from __future__ import annotations

import errno

from kvdev.errors import RetryableError
from kvdev.guest.adapters.netlink._rtnl import HEADER, NLMSG_HDRLEN, Socket, subscribe

_DRAIN_LIMIT = 10_000  # datagrams per drain(), so an event storm cannot hold the caller
_RECV_SIZE = 1 << 16


def _count_messages(datagram: bytes) -> int:
    count, offset = 0, 0
    while offset + NLMSG_HDRLEN <= len(datagram):
        length = HEADER.unpack_from(datagram, offset)[0]
        count += 1
        if length < NLMSG_HDRLEN:
            break
        offset += (length + 3) & ~3
    return count


class LinkEvents(Socket):
    """A non-blocking socket subscribed to link, address and route changes (IPv4 and IPv6).

    Register ``fileno()`` with a selector; when it is readable, call ``drain()``. Events are
    hints: they say that something changed. Opening raises like ``Netlink``.
    """

    def __init__(self, netns: str | None = None) -> None:
        super().__init__(netns)
        try:
            subscribe(self.sock)
            self.sock.setblocking(False)  # noqa: FBT003 - stdlib signature
        except OSError as e:
            self.close()
            raise RetryableError(f"cannot subscribe to rtnetlink events: {e}") from e

    def fileno(self) -> int:
        """The socket's descriptor, readable when events are pending."""
        return self.sock.fileno()

    def drain(self) -> int:
        """Read every pending message without blocking; how many there were (0 if none).

        A receive-buffer overflow (ENOBUFS: events were lost) counts as one message, so the
        caller still learns that the state changed.

        Raises:
            RetryableError: the socket failed in another way.
        """
        sock, count = self.sock, 0
        for _ in range(_DRAIN_LIMIT):
            try:
                datagram = sock.recv(_RECV_SIZE)
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
