"""One side of the agent's API socket: HTTP/1.1 connections, their limits and access policy.

It owns the request and response values the handler sees, the parsing (h11), keep-alive, the
size and time limits, the connection caps (503: a bound set by the fd limit, a share per uid,
a reserve kept for root; see ``Limits``), the peer's credentials
(SO_PEERCRED plus /proc groups), the read-for-the-group / write-for-root policy, and the
handler call (500 on a crash, cancelled when the client hangs up). It runs inside the asyncio
loop ``server`` starts. A peer's groups come from the kernel (SO_PEERGROUPS), else from
``/proc``.

It must not bind, adopt or remove the listening socket (``server`` does) nor know what it
serves: routes and payloads belong to the handler. Of kvdev it imports nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import http
import json
import logging
import resource
import select
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import h11

logger = logging.getLogger(__name__)

API_VERSION = "kvdev.io/v1alpha1"
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_READ_METHODS = frozenset({"GET", "HEAD"})
_FRAMING = frozenset({"content-type", "content-length", "transfer-encoding", "connection"})
_CHUNK = 65536
_REASONS = {status.value: status.phrase.encode() for status in http.HTTPStatus}


@dataclass(frozen=True, slots=True)
class Peer:
    """The client process, from SO_PEERCRED; ``groups`` = primary gid + supplementary groups."""

    uid: int
    gid: int
    pid: int
    groups: frozenset[int]


@dataclass(frozen=True, slots=True)
class Request:
    """One complete request; ``path`` is raw (still percent-encoded) and without the query."""

    method: str
    path: str
    query: dict[str, str]
    peer: Peer
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    """The handler's answer; ``body`` goes through ``json.dumps`` (plus a newline).

    Framing headers (Content-Type, Content-Length, Transfer-Encoding, Connection) are dropped.
    """

    status: int
    body: object
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may make the server hold (sizes in bytes, times in seconds).

    Connections: at most ``max_connections`` at once, lowered to what the open-file limit
    leaves (``connection_bound``); of those, the last ``root_reserve`` are root's alone, and
    one other uid may hold at most ``per_uid``. An idle or slow connection costs a few KB (its
    task, coroutine frames and h11 state: measured by tests/bench/bench_api.py) and is cut after
    ``request_timeout`` (no complete request head and body: 408) or ``keepalive_timeout``
    (nothing asked after an answer: closed): no uid can take the slots another needs.
    """

    max_connections: int = 2048
    root_reserve: int = 64  # of those, root's alone (at most a quarter): no uid locks root out
    per_uid: int = 512  # what one uid other than root may hold at once
    max_header_bytes: int = 8192
    max_body_bytes: int = 4096
    request_timeout: float = 5.0
    keepalive_timeout: float = 10.0


FD_RESERVE = 64  # descriptors kept for everything but API connections (netlink, inotify, ...)


def connection_bound(limits: Limits) -> int:
    """``limits.max_connections``, lowered to the open-file limit less ``FD_RESERVE``.

    The soft limit is first raised toward the hard one when it is lower than needed (a
    seccomp filter or a container may refuse: then the soft limit is what we have).
    """
    want = limits.max_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(1, min(limits.max_connections, soft - FD_RESERVE))


def error_response(
    status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
) -> Response:
    """The shape of every error answer: apiVersion, kind Error, code, message."""
    body = {"apiVersion": API_VERSION, "kind": "Error", "code": status, "message": message}
    return Response(status, body, headers)


class _Reject(Exception):  # noqa: N818 - a signal: answer (status, message) and close
    """Raised with ``(status, message)``."""


def _peer_of(sock: socket.socket) -> Peer:
    pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    groups = _peer_groups(sock)
    if groups is None:
        groups = _groups_of(pid, uid, gid)
    return Peer(uid=uid, gid=gid, pid=pid, groups=groups | {gid})


_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux 4.13; not named by Python 3.11
_GID = struct.Struct("I")


def _peer_groups(sock: socket.socket) -> frozenset[int] | None:
    """The peer's supplementary groups as the kernel recorded them at connect (SO_PEERGROUPS).

    Needs no ``/proc``: an agent under ``ProtectProc=invisible`` that is not root cannot read
    another user's ``/proc/<pid>/status``. None when the kernel cannot say.
    """
    for size in (_GID.size * 64, _GID.size * 65536):  # NGROUPS_MAX is 65536
        try:
            data = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, size)
        except OSError as e:
            if e.errno == errno.ERANGE:
                continue
            return None
        return frozenset(g for (g,) in _GID.iter_unpack(data[: len(data) // 4 * 4]))
    return None


def _uid_of(sock: socket.socket) -> int | None:
    """The peer's uid (SO_PEERCRED); None when the peer is gone already."""
    try:
        cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    except OSError:
        return None
    uid: int = _CRED.unpack(cred)[1]
    return uid


def _groups_of(pid: int, uid: int, gid: int) -> frozenset[int]:
    """Supplementary groups of ``pid`` if it still runs as ``uid``; else the primary gid only."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="latin-1") if pid > 0 else ""
    except OSError:
        text = ""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    uids = fields.get("Uid", "").split()
    if len(uids) < 2 or uids[1] != str(uid):  # gone, or pid reused: trust only SO_PEERCRED
        return frozenset({gid})
    return frozenset({gid, *(int(g) for g in fields.get("Groups", "").split() if g.isdigit())})


def _permitted(method: str, peer: Peer, group_gid: Callable[[], int | None]) -> bool:
    if peer.uid == 0:
        return True  # root needs no look-up of the socket's group (a stat per request)
    if method not in _READ_METHODS:
        return False
    gid = group_gid()
    return gid is not None and gid in peer.groups


class Connections:
    """Accepts and serves connections for one listener, inside the running asyncio loop."""

    def __init__(
        self, handler: Handler, limits: Limits, group_gid: Callable[[], int | None]
    ) -> None:
        self._handler, self._limits, self._group_gid = handler, limits, group_gid
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: dict[int, int] = {}  # uid other than root -> connections it holds
        self.bound = connection_bound(limits)
        # A peer that closed completely raises EPOLLHUP; one that only shut down writing
        # (and still waits for its answer) does not. Both look like EOF to recv().
        self._epoll = select.epoll()
        self._hangups: dict[int, asyncio.Future[None]] = {}
        self._loop.add_reader(self._epoll.fileno(), self._hung_up)

    async def close(self, accepting: asyncio.Task[None]) -> None:
        """Cancel ``accepting`` and every connection (and its handler call); wait for them."""
        accepting.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(accepting, *self._tasks, return_exceptions=True)
        self._loop.remove_reader(self._epoll.fileno())
        self._epoll.close()

    def _watch(self, fd: int) -> asyncio.Future[None]:
        self._hangups[fd] = future = self._loop.create_future()
        self._epoll.register(fd, 0)  # EPOLLHUP and EPOLLERR are always reported
        return future

    def _forget(self, fd: int) -> None:
        if self._hangups.pop(fd, None) is not None:
            self._epoll.unregister(fd)

    def _hung_up(self) -> None:
        for fd, _ in self._epoll.poll(0):
            future = self._hangups.get(fd)
            self._forget(fd)
            if future is not None and not future.done():
                future.set_result(None)

    async def accept(self, listener: socket.socket) -> None:
        """Accept forever; past the limits answer 503 and close at once.

        At most ``bound`` connections at a time; other uids than root may hold all but the
        reserve (``root_reserve``, at most a quarter), and each of them ``per_uid``: a local
        user holding connections open locks out neither root nor another user.
        """
        while True:
            try:
                conn, _ = await self._loop.sock_accept(listener)
            except OSError as e:  # EMFILE and friends: let connections end, then retry
                logger.warning("accepting a connection failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            uid = _uid_of(conn)
            if uid is None:  # gone before we looked
                conn.close()
                continue
            if not self._admits(uid):
                _refuse(conn)
                continue
            task = self._loop.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if uid != 0:
                self._held[uid] = self._held.get(uid, 0) + 1
                task.add_done_callback(functools.partial(self._release, uid))

    def _admits(self, uid: int) -> bool:
        """Whether a new connection of ``uid`` fits the limits (see ``accept``)."""
        if len(self._tasks) >= self.bound:
            return False
        if uid == 0:
            return True
        limits = self._limits
        others_max = self.bound - min(limits.root_reserve, self.bound // 4)
        others = sum(self._held.values())
        return others < others_max and self._held.get(uid, 0) < limits.per_uid

    def _release(self, uid: int, _task: object) -> None:
        left = self._held.pop(uid) - 1
        if left:
            self._held[uid] = left

    async def _serve(self, sock: socket.socket) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self._limits.max_header_bytes)
        idle = self._limits.request_timeout  # a new connection must start a request soon
        try:
            peer = _peer_of(sock)
            while True:
                try:
                    request = await self._read(sock, conn, peer, idle)
                except _Reject as e:
                    await self._send(sock, _render(conn, error_response(*e.args)))
                    await self._linger(sock)
                    return
                if request is None:
                    return
                answer = await self._respond(sock, request)
                if answer is None:  # the client hung up while the handler ran
                    return
                response, payload = answer
                head = request.method == "HEAD"
                data = _render(conn, response, payload=payload, close=False, head=head)
                await self._send(sock, data)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # Connection: close (either side), HTTP/1.0, ...
                conn.start_next_cycle()
                idle = self._limits.keepalive_timeout
        except (OSError, h11.LocalProtocolError) as e:
            logger.debug("connection ended: %s", e)
        except Exception:
            logger.exception("connection failed")
        finally:
            sock.close()

    async def _read(
        self, sock: socket.socket, conn: h11.Connection, peer: Peer, idle: float
    ) -> Request | None:
        """The next complete request; None when the client closed or stayed idle too long."""
        limit, loop = self._limits, self._loop
        deadline = loop.time() + limit.request_timeout if conn.trailing_data[0] else None
        head: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                if e.error_status_hint == 431:
                    raise _Reject(431, "request head too large") from e
                raise _Reject(400, f"malformed HTTP request: {e}"[:200]) from e
            if event is h11.NEED_DATA:
                deadline = await self._receive(sock, conn, idle, deadline)
                if deadline is None:
                    return None
            elif isinstance(event, h11.Request):
                head = await self._on_head(sock, conn, event)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > limit.max_body_bytes:
                    raise _Reject(413, f"body larger than {limit.max_body_bytes} bytes")
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                return _request(head, bytes(body), peer)
            else:  # ConnectionClosed
                return None

    async def _receive(
        self, sock: socket.socket, conn: h11.Connection, idle: float, deadline: float | None
    ) -> float | None:
        """Feed ``conn`` more input; the request's deadline, or None after an idle wait."""
        loop = self._loop
        wait = idle if deadline is None else deadline - loop.time()
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, _CHUNK), max(wait, 0))
        except TimeoutError as e:
            if deadline is None:
                return None
            raise _Reject(408, "request not complete in time") from e
        conn.receive_data(data)
        return deadline or loop.time() + self._limits.request_timeout

    async def _on_head(
        self, sock: socket.socket, conn: h11.Connection, head: h11.Request
    ) -> h11.Request:
        limit = self._limits
        size = sum(len(k) + len(v) + 4 for k, v in head.headers)
        if (
            size + len(head.target) > limit.max_header_bytes
        ):  # h11 bounds only a head still incomplete
            raise _Reject(431, "request head too large")
        headers = dict(head.headers)
        length = headers.get(b"content-length")  # h11 checked: digits, one value
        if length is not None and b"transfer-encoding" in headers:
            # Two framings: which one a proxy in front used is unknowable (request smuggling).
            raise _Reject(400, "both Content-Length and Transfer-Encoding: ambiguous framing")
        if length is not None and int(length) > limit.max_body_bytes:
            raise _Reject(413, f"body larger than {limit.max_body_bytes} bytes")
        if conn.they_are_waiting_for_100_continue:
            go_on = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            await self._loop.sock_sendall(sock, conn.send(go_on) or b"")
        return head

    async def _respond(
        self, sock: socket.socket, request: Request
    ) -> tuple[Response, bytes] | None:
        """The handler's response (or a 403 or 500) with its encoded body.

        None when the client went away meanwhile.
        """
        peer = request.peer
        if not _permitted(request.method, peer, self._group_gid):
            logger.warning(
                "denied %s %s to uid %d pid %d", request.method, request.path, peer.uid, peer.pid
            )
            denied = error_response(
                403,
                f"{request.method} is not permitted to uid {peer.uid}: reading needs root or"
                " the socket's group, anything else needs root",
            )
            return denied, _encode(denied)
        handling = asyncio.ensure_future(self._handle(request))
        hangup = self._watch(sock.fileno())
        try:
            either: tuple[asyncio.Future[Any], ...] = (handling, hangup)
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._forget(sock.fileno())
            if not handling.done():
                handling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await handling
        return None if handling.cancelled() else handling.result()

    async def _handle(self, request: Request) -> tuple[Response, bytes]:
        """The handler's response and its body, encoded once.

        Checked here, so that a bad response becomes a 500 now, not a broken connection mid-send.
        """
        try:
            response = await self._handler(request)
            payload = _encode(response)
            _render(h11.Connection(h11.SERVER), response, payload=payload)
        except Exception:
            logger.exception("handler failed on %s %s", request.method, request.path)
            failed = error_response(500, "internal error; the agent's log has the details")
            return failed, _encode(failed)
        return response, payload

    async def _send(self, sock: socket.socket, data: bytes) -> None:
        await asyncio.wait_for(self._loop.sock_sendall(sock, data), self._limits.request_timeout)

    async def _linger(self, sock: socket.socket) -> None:
        """After an error answer: stop writing and drain a little, so the client can read it."""
        sock.shutdown(socket.SHUT_WR)
        deadline = self._loop.time() + min(1.0, self._limits.request_timeout)
        for _ in range(16):
            wait = deadline - self._loop.time()
            if wait <= 0 or not await asyncio.wait_for(self._loop.sock_recv(sock, _CHUNK), wait):
                return


_BUSY = error_response(503, "too many connections; try again", (("Retry-After", "1"),))


def _refuse(conn: socket.socket) -> None:
    """503 and close at once; input already queued is read so the client gets no reset.

    The answer says ``Retry-After``: ``kvdev`` asks again within its timeout.
    """
    answer = _render(h11.Connection(h11.SERVER), _BUSY)
    with conn, contextlib.suppress(OSError):
        conn.send(answer)
        for _ in range(4):
            if not conn.recv(_CHUNK):
                break


def _request(head: h11.Request, body: bytes, peer: Peer) -> Request:
    target = head.target.decode("ascii")  # h11 admits only visible ASCII here
    if not target.startswith("/"):
        raise _Reject(400, "the request target must be a path starting with /")
    path, _, query = target.partition("?")
    values = dict(parse_qsl(query, keep_blank_values=True))
    return Request(head.method.decode("ascii"), path, values, peer, body)


def _encode(response: Response) -> bytes:
    return (json.dumps(response.body) + "\n").encode()


def _render(
    conn: h11.Connection,
    response: Response,
    *,
    payload: bytes | None = None,
    close: bool = True,
    head: bool = False,
) -> bytes:
    """The response's bytes through ``conn``, which checks status, headers and framing."""
    if payload is None:
        payload = _encode(response)
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(payload))),
        *((k, v) for k, v in response.headers if k.lower() not in _FRAMING),
    ]
    if close:
        headers.append(("Connection", "close"))
    reason = _REASONS.get(response.status, b"")
    out = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
    out = out or b""
    if not head:
        out += conn.send(h11.Data(data=payload)) or b""
    return out + (conn.send(h11.EndOfMessage()) or b"")
