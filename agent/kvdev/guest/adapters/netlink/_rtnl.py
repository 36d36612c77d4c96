"""The rtnetlink plumbing: kernel constants, the socket, and one round trip of requests.

``open_socket`` opens a NETLINK_ROUTE socket (in a network namespace when asked: the calling
thread enters it for the ``socket()`` call only; a netlink socket stays in the namespace it was
created in) with extended acknowledgements on and acknowledgements capped to their header.
``Socket`` owns one, closes it once and refuses use after that; ``exchange`` sends a batch of
encoded requests in as few ``send`` calls as the socket buffer allows and reads their replies
together, each by its sequence number.

The numbers are the kernel's ABI (linux/netlink.h, linux/rtnetlink.h, linux/if_link.h,
linux/if_addr.h, linux/if.h): they never change meaning.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from kvdev.errors import RetryableError, UsageError

# linux/netlink.h
NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 2, 3, 4
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK = 0x1, 0x2, 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE, NLM_F_APPEND = 0x100, 0x200, 0x400, 0x800
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200  # in an NLMSG_ERROR's header
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
NLA_F_NESTED = 0x8000
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
NLMSG_HDRLEN = HEADER.size
ATTR = struct.Struct("=HH")  # rtattr / nlattr: length, type

# linux/rtnetlink.h: message types
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWLINKPROP, RTM_DELLINKPROP = 108, 109
# rtnetlink multicast groups (numbers, as NETLINK_ADD_MEMBERSHIP takes them)
RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV4_ROUTE = 1, 5, 7
RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV6_ROUTE = 9, 11
EVENT_GROUPS = (
    RTNLGRP_LINK,
    RTNLGRP_IPV4_IFADDR,
    RTNLGRP_IPV6_IFADDR,
    RTNLGRP_IPV4_ROUTE,
    RTNLGRP_IPV6_ROUTE,
)

# struct ifinfomsg, ifaddrmsg, rtmsg
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBi")  # family, prefixlen, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope,
# type, flags

# linux/if_link.h
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_LINK_NETNSID = 16, 18, 37
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_VXLAN_LINK = 3  # in IFLA_INFO_DATA of a vxlan: the link it sends through
IFLA_MIN_MTU, IFLA_MAX_MTU, IFLA_PROP_LIST, IFLA_ALT_IFNAME, IFLA_PERM_ADDRESS = 50, 51, 52, 53, 54
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
IFF_UP = 0x1

# linux/if_addr.h
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST, IFA_PROTO = 1, 2, 4, 11

# linux/rtnetlink.h: routes
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
MAIN_TABLE = 254
RTN_UNICAST = 1
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255  # in a delete request: match a route of any scope

FAMILIES = (socket.AF_INET, socket.AF_INET6)
_NETNS_DIR = "/var/run/netns"  # where `ip netns` finds a namespace by name
_THREAD_NETNS = "/proc/thread-self/ns/net"
_CLONE_NEWNET = 0x40000000
_SO_RCVBUFFORCE = 33  # asm-generic/socket.h (the socket module lacks it)
_RCVBUF = 1 << 22  # 4 MiB: a burst of events from thousands of links fits before ENOBUFS
_SNDBUF_SHARE = 1 << 16  # bytes of requests per send(): well inside the default buffer
_RECV_SIZE = 1 << 16


def _setns(fd: int) -> None:
    """``setns(fd, CLONE_NEWNET)`` for the calling thread (os.setns is Python 3.12+)."""
    if hasattr(os, "setns"):
        os.setns(fd, _CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@contextmanager
def _inside(netns_path: Path) -> Iterator[None]:
    """Run the body with the calling thread in the network namespace at ``netns_path``.

    Raises:
        FileNotFoundError: there is no such namespace file.
        OSError: entering it (or returning) failed.
    """
    home = os.open(_THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def _new_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
    try:
        sock.bind((0, 0))
        for option in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
            with _ignored_errnos(errno.ENOPROTOOPT):  # kernels before 4.12 (ext ack)
                sock.setsockopt(SOL_NETLINK, option, 1)
    except OSError:
        sock.close()
        raise
    return sock


@contextmanager
def _ignored_errnos(*codes: int) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if e.errno not in codes:
            raise


def open_socket(netns: str | None) -> socket.socket:
    """An rtnetlink socket (no multicast groups), in ``netns`` when given.

    ``netns`` is a name under ``/var/run/netns`` (as ``ip netns`` names it) or an absolute
    path such as ``/proc/<pid>/ns/net``; none is created.

    Raises:
        UsageError: there is no network namespace of that name.
        RetryableError: the socket could not be opened.
    """
    where = f" in network namespace {netns!r}" if netns else ""
    path = Path(_NETNS_DIR) / netns if netns is not None else None
    if path is not None and not path.exists():
        raise UsageError(f"no network namespace named {netns!r}")
    try:
        if path is None:
            return _new_socket()
        with _inside(path):
            return _new_socket()
    except FileNotFoundError as e:
        raise UsageError(f"no network namespace named {netns!r}") from e
    except OSError as e:
        raise RetryableError(f"cannot open rtnetlink{where}: {e.strerror or e}") from e


def subscribe(sock: socket.socket) -> None:
    """Join the link, address and route groups (IPv4 and IPv6); a large receive buffer.

    Raises:
        OSError: joining failed.
    """
    for group in EVENT_GROUPS:
        sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
    try:  # CAP_NET_ADMIN may exceed rmem_max; without it the kernel's cap applies
        sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, _RCVBUF)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)


def messages(data: bytes | memoryview) -> Iterator[tuple[int, int, int, memoryview]]:
    """Each netlink message of a datagram: (type, flags, seq, payload)."""
    view = memoryview(data)
    offset, end = 0, len(view)
    while offset + NLMSG_HDRLEN <= end:
        length, kind, flags, seq, _pid = HEADER.unpack_from(view, offset)
        if length < NLMSG_HDRLEN or offset + length > end:
            return  # a truncated datagram: what follows cannot be read
        yield kind, flags, seq, view[offset + NLMSG_HDRLEN : offset + length]
        offset += (length + 3) & ~3


def header(kind: int, flags: int, seq: int, body_length: int) -> bytes:
    """An nlmsghdr for a message of ``body_length`` bytes after it (already padded)."""
    return HEADER.pack(NLMSG_HDRLEN + body_length, kind, flags, seq, 0)


class Socket:
    """An rtnetlink socket that closes once and refuses use after that."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._sock: socket.socket | None = open_socket(netns)
        self._seq = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()

    @property
    def sock(self) -> socket.socket:
        """The open socket (UsageError once closed)."""
        if self._sock is None:
            raise UsageError(f"this {type(self).__name__} is closed")
        return self._sock

    def next_seq(self) -> int:
        """A sequence number no request of this socket has used (wraps at 2**32)."""
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        return self._seq

    def exchange(
        self,
        requests: list[tuple[int, bytes]],
        on_reply: Callable[[int, int, int, memoryview], bool],
    ) -> None:
        """Send ``(seq, message)`` requests in batches and feed every reply to ``on_reply``.

        ``on_reply(type, flags, seq, payload)`` returns True when that reply ends its request
        (an acknowledgement, an error, a dump's NLMSG_DONE). Batches are at most 64 KiB, so
        the kernel's replies to one batch fit the receive buffer.

        Raises:
            OSError: the socket failed.
        """
        sock = self.sock
        start = 0
        while start < len(requests):
            end, size = start, 0
            while end < len(requests) and (
                end == start or size + len(requests[end][1]) <= _SNDBUF_SHARE
            ):
                size += len(requests[end][1])
                end += 1
            pending = {seq for seq, _ in requests[start:end]}
            sock.send(b"".join(message for _, message in requests[start:end]))
            while pending:
                data = sock.recv(_RECV_SIZE)
                for kind, flags, seq, payload in messages(data):
                    if seq in pending and on_reply(kind, flags, seq, payload):
                        pending.discard(seq)
            start = end
