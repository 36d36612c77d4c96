"""The rtnetlink plumbing: kernel constants, the slice of pyroute2 used, and the socket itself.

``Msg`` and ``_Rtnl`` name the parts of pyroute2's messages and ``IPRoute`` the package uses;
``_open`` opens a socket (in a network namespace when asked) and ``Socket`` owns one, closing it
once and refusing use after that.

Works with pyroute2 0.7 (Debian 13 ships 0.7.7) and 0.9: only 0.9's ``IPRoute`` takes ``netns=``.
On 0.7 a socket for a named namespace is created with the calling thread briefly moved into it
(``setns``; a netlink socket stays in the namespace it was created in), then moved back. Without
a namespace both versions get the same plain ``IPRoute``. 0.7 also does not know the address
attributes after ``IFA_FLAGS`` (kernel 5.18's ``IFA_PROTO`` marks kvdev's addresses): they are
appended to its ``ifaddrmsg`` map at import. Nothing else here may differ by version.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

import pyroute2
from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netns import setns

from kvdev.errors import RetryableError, UsageError

# Kernel ABI constants (linux/rtnetlink.h, linux/if.h, linux/netlink.h).
MAIN_TABLE = 254
RTN_UNICAST = 1
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255  # in a delete request: match a route of any scope
IFF_UP = 0x1
NLM_F_DUMP_INTR_FLAG = 0x10
NLMSG_HDRLEN = 16
# RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
EVENT_GROUPS = 0x1 | 0x10 | 0x40 | 0x100 | 0x400
FAMILIES = (socket.AF_INET, socket.AF_INET6)
_NETNS_DIR = "/var/run/netns"  # where `ip netns` (and pyroute2) find a namespace by name
_THREAD_NETNS = "/proc/thread-self/ns/net"


def _takes_netns(version: str) -> bool:
    """Whether this pyroute2 version's ``IPRoute`` accepts ``netns=`` (0.9 and later)."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return True  # an unparsable (development) version: assume the current API
    return (major, minor) >= (0, 9)


_IPROUTE_TAKES_NETNS = _takes_netns(str(getattr(pyroute2, "__version__", "")))
# linux/if_addr.h, after IFA_FLAGS (8): what pyroute2 0.7 lacks, in kernel order.
_IFA_AFTER_FLAGS = (
    ("IFA_RT_PRIORITY", "uint32"),
    ("IFA_TARGET_NETNSID", "hex"),
    ("IFA_PROTO", "uint8"),
)


def _teach_ifa_proto() -> None:
    """Append the attributes after ``IFA_FLAGS`` to pyroute2's address map when it stops there.

    pyroute2 compiles a message class's map when the first message of it is made, so this runs at
    import, before any socket exists; a map that already goes further is left alone.
    """
    names = [entry[0] for entry in ifaddrmsg.nla_map]
    if names and names[-1] == "IFA_FLAGS" and len(names) == 9:
        ifaddrmsg.nla_map = (*ifaddrmsg.nla_map, *_IFA_AFTER_FLAGS)


_teach_ifa_proto()


@runtime_checkable
class Msg(Protocol):
    """The part of a pyroute2 message (or nested attribute set) this package reads."""

    def get_attr(self, attr: str, default: object = None) -> object: ...
    def get_attrs(self, attr: str) -> list[object]: ...
    def __getitem__(self, key: str) -> object: ...


class _Rtnl(Protocol):
    """The part of ``pyroute2.IPRoute`` this package calls."""

    def link(self, command: str, **kwargs: object) -> Iterable[Msg]: ...
    def addr(self, command: str, **kwargs: object) -> Iterable[Msg]: ...
    def route(self, command: str, **kwargs: object) -> Iterable[Msg]: ...
    def bind(self, *, groups: int) -> None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


def _open(netns: str | None) -> _Rtnl:
    """An rtnetlink socket (no multicast groups), in ``netns`` when given.

    Raises:
        UsageError: there is no network namespace of that name.
        RetryableError: the socket could not be opened.
    """
    where = f" in network namespace {netns!r}" if netns else ""
    # Checked here because pyroute2 leaks its event loop when IPRoute() itself fails.
    if netns is not None and not (Path(_NETNS_DIR) / netns).exists():
        raise UsageError(f"no network namespace named {netns!r}")
    try:
        ipr: _Rtnl
        if netns is None:
            ipr = IPRoute(groups=0, ext_ack=True)
        elif _IPROUTE_TAKES_NETNS:
            ipr = IPRoute(netns=netns, flags=0, groups=0, ext_ack=True)
        else:
            with _inside(Path(_NETNS_DIR) / netns):
                ipr = IPRoute(groups=0, ext_ack=True)
    except FileNotFoundError as e:
        raise UsageError(f"no network namespace named {netns!r}") from e
    except OSError as e:
        raise RetryableError(f"cannot open rtnetlink{where}: {e.strerror or e}") from e
    return ipr


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
            setns(target, flags=0)
        finally:
            os.close(target)
        try:
            yield
        finally:
            setns(home, flags=0)
    finally:
        os.close(home)


class Socket:
    """An rtnetlink socket that closes once and refuses use after that."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._ipr: _Rtnl | None = _open(netns)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._ipr is not None:
            ipr, self._ipr = self._ipr, None
            ipr.close()

    @property
    def _rtnl(self) -> _Rtnl:
        if self._ipr is None:
            raise UsageError(f"this {type(self).__name__} is closed")
        return self._ipr
