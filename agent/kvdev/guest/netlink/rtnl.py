"""The rtnetlink plumbing: kernel constants, the slice of pyroute2 used, and the socket itself.

``_Msg`` and ``_Rtnl`` name the parts of pyroute2's messages and ``IPRoute`` the package uses;
``_open`` opens a socket (in a network namespace when asked) and ``_Socket`` owns one, closing it
once and refusing use after that.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

from pyroute2 import IPRoute

from kvdev.errors import RetryableError, UsageError

# Kernel ABI constants (linux/rtnetlink.h, linux/if.h, linux/netlink.h).
_MAIN_TABLE = 254
_RTN_UNICAST = 1
_RT_SCOPE_UNIVERSE = 0
_RT_SCOPE_LINK = 253
_RT_SCOPE_NOWHERE = 255  # in a delete request: match a route of any scope
_IFF_UP = 0x1
_NLM_F_DUMP_INTR = 0x10
_NLMSG_HDRLEN = 16
# RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
_EVENT_GROUPS = 0x1 | 0x10 | 0x40 | 0x100 | 0x400
_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_NETNS_DIR = "/var/run/netns"  # where `ip netns` (and pyroute2) find a namespace by name


@runtime_checkable
class _Msg(Protocol):
    """The part of a pyroute2 message (or nested attribute set) this package reads."""

    def get_attr(self, attr: str, default: object = None) -> object: ...
    def get_attrs(self, attr: str) -> list[object]: ...
    def __getitem__(self, key: str) -> object: ...


class _Rtnl(Protocol):
    """The part of ``pyroute2.IPRoute`` this package calls."""

    def link(self, command: str, **kwargs: object) -> Iterable[_Msg]: ...
    def addr(self, command: str, **kwargs: object) -> Iterable[_Msg]: ...
    def route(self, command: str, **kwargs: object) -> Iterable[_Msg]: ...
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
        ipr: _Rtnl = IPRoute(netns=netns, flags=0, groups=0, ext_ack=True)
    except FileNotFoundError as e:
        raise UsageError(f"no network namespace named {netns!r}") from e
    except OSError as e:
        raise RetryableError(f"cannot open rtnetlink{where}: {e.strerror or e}") from e
    return ipr


class _Socket:
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
