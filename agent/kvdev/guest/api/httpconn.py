"""One side of the agent's API socket: HTTP/1.1 connections, their limits and access policy.

It owns the request and response values the handler sees, the parsing (h11), keep-alive, the
size and time limits, the connection caps (503: a bound set by the fd limit, a share per uid,
a reserve kept for root; see ``Limits``), the peer's credentials (SO_PEERCRED plus /proc
groups), the read-for-the-group / write-for-root policy, and the handler call (500 on a
crash; a ``Deferred`` answer is cancelled when the client hangs up). ``Connections`` is one
epoll loop over the listener and every connection, each a small state machine (reading,
waiting for a deferred answer, writing, lingering after an error): no task, coroutine or
thread per connection, so an idle or slow client costs a few KB. ``server`` runs ``poll`` in
its thread. A peer's groups come from the kernel (SO_PEERGROUPS), else from ``/proc``.

It must not bind, adopt or remove the listening socket (``server`` does) nor know what it
serves: routes and payloads belong to the handler. Of kvdev it imports nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import errno
import heapq
import http
import itertools
import json
import logging
import os
import resource
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import h11

from kvdev._records import compared

logger = logging.getLogger(__name__)

API_VERSION = "kvdev.io/v1alpha1"
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_READ_METHODS = frozenset({"GET", "HEAD"})
_FRAMING = frozenset({"content-type", "content-length", "transfer-encoding", "connection"})
_CHUNK = 65536
_REASONS = {status.value: status.phrase.encode() for status in http.HTTPStatus}


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Peer:
    """The client process, from SO_PEERCRED; ``groups`` = primary gid + supplementary groups."""

    uid: int
    gid: int
    pid: int
    groups: frozenset[int]


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Request:
    """One complete request; ``path`` is raw (still percent-encoded) and without the query."""

    method: str
    path: str
    query: dict[str, str]
    peer: Peer
    body: bytes


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Response:
    """The handler's answer; ``body`` goes through ``json.dumps`` (plus a newline).

    A ``bytes`` body is sent as it is, with ``content_type``. Framing headers given in
    ``headers`` (Content-Type, Content-Length, Transfer-Encoding, Connection) are dropped.
    """

    status: int
    body: object
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Deferred:
    """An answer that comes later, from ``finish(future)`` once ``future`` is done.

    ``future`` may be resolved in any thread; ``finish`` runs in the server's. After
    ``timeout`` seconds without it, ``on_timeout()`` answers instead and ``future`` is
    cancelled (a no-op once whoever resolves it has marked it running); when the client hangs
    up first, ``future`` is cancelled too.
    """

    future: concurrent.futures.Future[Any]
    finish: Callable[[concurrent.futures.Future[Any]], Response]
    timeout: float
    on_timeout: Callable[[], Response]


Handler = Callable[[Request], "Response | Deferred"]


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
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


class _State(enum.Enum):
    READING = "reading"  # a request (its head not yet, or part of it)
    WAITING = "waiting"  # for a Deferred answer
    WRITING = "writing"  # an answer the socket did not take at once
    LINGERING = "lingering"  # after an error answer: draining input, then closing


_IN, _OUT = select.EPOLLIN, select.EPOLLOUT
_GONE = select.EPOLLHUP | select.EPOLLERR  # always reported, even with no event asked for
_ACCEPTS_PER_WAKE = 64  # then the connections already held get their turn
_LINGER_READS = 16


class _Conn:
    """One connection's state; every field is the loop's (one thread)."""

    __slots__ = (
        "body",
        "close_after",
        "cycle",
        "deadline",
        "deferred",
        "h11",
        "head",
        "head_only",
        "linger_reads",
        "out",
        "peer",
        "sock",
        "started",
        "state",
        "uid",
    )

    def __init__(self, sock: socket.socket, uid: int, limits: Limits) -> None:
        self.sock, self.uid = sock, uid
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self.peer: Peer | None = None
        self.state = _State.READING
        self.started = False  # a byte of the current request has arrived
        self.deadline = 0.0
        self.cycle = 0  # requests begun on this connection: stale timers and answers are ignored
        self.head: h11.Request | None = None
        self.head_only = False  # the request being answered is a HEAD: status and headers only
        self.body = bytearray()
        self.out = b""
        self.close_after = False  # close once ``out`` is sent (after an error: linger first)
        self.deferred: Deferred | None = None
        self.linger_reads = 0


class Connections:
    """Accepts and serves one listener's connections: one epoll set, driven by ``poll``.

    ``poll`` runs in one thread (the server's); ``wake`` may be called from any thread.
    """

    def __init__(
        self,
        handler: Handler,
        limits: Limits,
        group_gid: Callable[[], int | None],
        listener: socket.socket,
    ) -> None:
        self._handler, self._limits, self._group_gid = handler, limits, group_gid
        self._listener = listener
        listener.setblocking(False)  # noqa: FBT003 - stdlib signature
        self.bound = connection_bound(limits)
        self._conns: dict[int, _Conn] = {}
        self._held: dict[int, int] = {}  # uid other than root -> connections it holds
        self._others = 0  # connections of uids other than root
        self._timers: list[tuple[float, int, int, int]] = []  # (deadline, tiebreak, fd, cycle)
        self._tiebreak = itertools.count()
        self._cycles = itertools.count(1)  # request cycles, unique across connections
        self._done: deque[tuple[int, int]] = deque()  # (fd, cycle) whose Deferred is done
        self._next: deque[tuple[int, int]] = deque()  # (fd, cycle) to read on from its buffer
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # wake() comes from any thread (a Deferred done, Server.stop); close() from the loop's.
        # Under this lock, a wake after close is a no-op: never a write to a closed fd (EBADF)
        # or, worse, to whatever file reused its number.
        self._wake_lock = threading.Lock()
        self._closed = False
        self._epoll = select.epoll()
        self._epoll.register(listener.fileno(), _IN)
        self._epoll.register(self._wake_r, _IN)
        self._accept_paused_until: float | None = None  # after EMFILE and friends

    # ------------------------------------------------------------------ the loop

    def wake(self) -> None:
        """Make a ``poll`` in progress return soon (thread-safe; nothing once closed)."""
        with self._wake_lock:
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):  # a full pipe: it is awake already
                os.write(self._wake_w, b"!")

    def poll(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` (never past the next connection deadline); serve what is due."""
        now = time.monotonic()
        due = self._next_deadline()
        if due is not None:
            wait = max(0.0, due - now)
            timeout = wait if timeout is None else min(timeout, wait)
        try:
            events = self._epoll.poll(-1 if timeout is None else timeout)
        except InterruptedError:
            events = []
        for fd, mask in events:
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._wake_r, 4096):
                        pass
            elif fd == self._listener.fileno():
                self._accept()
            else:
                self._on_event(fd, mask)
        self._finish_done()
        self._expire(time.monotonic())
        self._read_on()

    def _read_on(self) -> None:
        """Requests a client sent ahead (pipelined), one per connection and turn: no recursion."""
        for _ in range(len(self._next)):
            fd, cycle = self._next.popleft()
            c = self._conns.get(fd)
            if c is not None and c.cycle == cycle and c.state is _State.READING:
                self._guarded(fd, self._advance, c)
        if self._next:
            self.wake()  # more answers of pipelined requests: the next poll returns at once

    def close(self) -> None:
        """Close every connection (cancelling what they wait for) and the epoll set."""
        for fd in list(self._conns):
            self._close(fd)
        self._epoll.close()
        with self._wake_lock:
            self._closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    # ------------------------------------------------------------------ accepting

    def _accept(self) -> None:
        """Accept what is queued (a batch per wake-up); past the limits answer 503 and close.

        At most ``bound`` connections at a time; other uids than root may hold all but the
        reserve (``root_reserve``, at most a quarter), and each of them ``per_uid``: a local
        user holding connections open locks out neither root nor another user.
        """
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as e:  # EMFILE and friends: let connections end, then retry
                logger.warning("accepting a connection failed: %s", e)
                self._pause_accepting()
                return
            sock.setblocking(False)  # noqa: FBT003 - stdlib signature; also for _refuse
            uid = _uid_of(sock)
            if uid is None:  # gone before we looked
                sock.close()
                continue
            if not self._admits(uid):
                _refuse(sock)
                continue
            self._admit(sock, uid)

    def _pause_accepting(self) -> None:
        self._epoll.unregister(self._listener.fileno())
        self._accept_paused_until = time.monotonic() + 0.1

    def _admits(self, uid: int) -> bool:
        """Whether a new connection of ``uid`` fits the limits (see ``_accept``)."""
        if len(self._conns) >= self.bound:
            return False
        if uid == 0:
            return True
        others_max = self.bound - min(self._limits.root_reserve, self.bound // 4)
        return self._others < others_max and self._held.get(uid, 0) < self._limits.per_uid

    def _admit(self, sock: socket.socket, uid: int) -> None:
        c = _Conn(sock, uid, self._limits)
        try:
            c.peer = _peer_of(sock)
        except OSError as e:
            logger.debug("connection ended: %s", e)
            sock.close()
            return
        fd = sock.fileno()
        self._conns[fd] = c
        if uid != 0:
            self._held[uid] = self._held.get(uid, 0) + 1
            self._others += 1
        self._epoll.register(fd, _IN)
        self._await_request(fd, c, self._limits.request_timeout)  # begin one soon

    # ------------------------------------------------------------------ timers

    def _arm(self, fd: int, c: _Conn, seconds: float) -> None:
        c.deadline = time.monotonic() + seconds
        heapq.heappush(self._timers, (c.deadline, next(self._tiebreak), fd, c.cycle))
        if len(self._timers) > 4 * len(self._conns) + 64:  # mostly replaced timers: rebuild
            self._timers = [
                (conn.deadline, next(self._tiebreak), key, conn.cycle)
                for key, conn in self._conns.items()
            ]
            heapq.heapify(self._timers)

    def _next_deadline(self) -> float | None:
        due = [self._accept_paused_until] if self._accept_paused_until is not None else []
        while self._timers:
            deadline, _, fd, cycle = self._timers[0]
            c = self._conns.get(fd)
            if c is not None and c.cycle == cycle and c.deadline == deadline:
                due.append(deadline)
                break
            heapq.heappop(self._timers)  # a connection gone, or a timer replaced
        return min(due) if due else None

    def _expire(self, now: float) -> None:
        if self._accept_paused_until is not None and self._accept_paused_until <= now:
            self._accept_paused_until = None
            self._epoll.register(self._listener.fileno(), _IN)
        while self._timers and self._timers[0][0] <= now:
            deadline, _, fd, cycle = heapq.heappop(self._timers)
            c = self._conns.get(fd)
            if c is None or c.cycle != cycle or c.deadline != deadline:
                continue
            self._guarded(fd, self._timed_out, c)

    def _guarded(self, fd: int, step: Callable[[int, _Conn], object], c: _Conn) -> None:
        """``step(fd, c)``; a connection that fails on the way is closed, never the loop."""
        try:
            step(fd, c)
        except (OSError, h11.LocalProtocolError) as e:
            logger.debug("connection ended: %s", e)
            self._close(fd)
        except Exception:
            logger.exception("connection failed")
            self._close(fd)

    def _timed_out(self, fd: int, c: _Conn) -> None:
        if c.state is _State.READING and c.started:
            self._reject(fd, c, 408, "request not complete in time")
        elif c.state is _State.WAITING and c.deferred is not None:
            deferred, c.deferred = c.deferred, None
            deferred.future.cancel()
            self._answer(fd, c, _safely(deferred.on_timeout, c))
        else:  # idle, a send that did not finish, a linger that ran out
            self._close(fd)

    # ------------------------------------------------------------------ events

    def _on_event(self, fd: int, mask: int) -> None:
        c = self._conns.get(fd)
        if c is None:
            return
        if c.state is _State.WAITING or (mask & _GONE and not mask & _IN):
            if mask & _GONE:  # the client hung up completely: nobody waits for an answer
                self._close(fd)
            return
        if c.state is _State.WRITING:
            self._guarded(fd, self._flush, c)
        elif c.state is _State.LINGERING:
            self._guarded(fd, self._linger, c)
        else:
            self._guarded(fd, self._receive, c)

    def _receive(self, fd: int, c: _Conn) -> None:
        try:
            data = c.sock.recv(_CHUNK)
        except BlockingIOError:
            return
        if data and not c.started:
            c.started = True
            self._arm(fd, c, self._limits.request_timeout)
        c.h11.receive_data(data)
        self._advance(fd, c)

    def _advance(self, fd: int, c: _Conn) -> None:
        """Feed h11's events on until it needs more data or a request is complete."""
        while c.state is _State.READING:
            try:
                event = c.h11.next_event()
            except h11.RemoteProtocolError as e:
                if e.error_status_hint == 431:
                    self._reject(fd, c, 431, "request head too large")
                else:
                    self._reject(fd, c, 400, f"malformed HTTP request: {e}"[:200])
                return
            if event is h11.NEED_DATA:
                return
            try:
                if not self._take(fd, c, event):
                    return
            except _Reject as e:
                self._reject(fd, c, *e.args)
                return

    def _take(self, fd: int, c: _Conn, event: object) -> bool:
        """One h11 event of the request being read; False once the connection moved on."""
        if isinstance(event, h11.Request):
            c.head_only = event.method == b"HEAD"  # every answer from here on, however made
            c.head = self._on_head(c, event)
        elif isinstance(event, h11.Data):
            c.body += event.data
            if len(c.body) > self._limits.max_body_bytes:
                raise _Reject(413, f"body larger than {self._limits.max_body_bytes} bytes")
        elif isinstance(event, h11.EndOfMessage) and c.head is not None:
            assert c.peer is not None
            self._dispatch(fd, c, _request(c.head, bytes(c.body), c.peer))
        else:  # ConnectionClosed
            self._close(fd)
            return False
        return True

    def _on_head(self, c: _Conn, head: h11.Request) -> h11.Request:
        limit = self._limits
        size = sum(len(k) + len(v) + 4 for k, v in head.headers)
        if size + len(head.target) > limit.max_header_bytes:  # h11 bounds only an incomplete head
            raise _Reject(431, "request head too large")
        headers = dict(head.headers)
        length = headers.get(b"content-length")  # h11 checked: digits, one value
        if length is not None and b"transfer-encoding" in headers:
            # Two framings: which one a proxy in front used is unknowable (request smuggling).
            raise _Reject(400, "both Content-Length and Transfer-Encoding: ambiguous framing")
        if length is not None and int(length) > limit.max_body_bytes:
            raise _Reject(413, f"body larger than {limit.max_body_bytes} bytes")
        if c.h11.they_are_waiting_for_100_continue:
            go_on = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            c.sock.send(c.h11.send(go_on) or b"")  # 25 bytes into an empty buffer
        return head

    # ------------------------------------------------------------------ answering

    def _dispatch(self, fd: int, c: _Conn, request: Request) -> None:
        """The handler's answer (or a 403 or 500), now or, for a Deferred, when it is done."""
        c.head, c.body = None, bytearray()
        peer = request.peer
        if not _permitted(request.method, peer, self._group_gid):
            logger.warning(
                "denied %s %s to uid %d pid %d", request.method, request.path, peer.uid, peer.pid
            )
            self._answer(
                fd,
                c,
                error_response(
                    403,
                    f"{request.method} is not permitted to uid {peer.uid}: reading needs root or"
                    " the socket's group, anything else needs root",
                ),
            )
            return
        try:
            answer = self._handler(request)
        except Exception:
            logger.exception("handler failed on %s %s", request.method, request.path)
            answer = _FAILED
        if isinstance(answer, Deferred):
            c.state, c.deferred = _State.WAITING, answer
            self._epoll.modify(fd, 0)  # only a hang-up (EPOLLHUP) is of interest now
            self._arm(fd, c, answer.timeout)
            cycle = c.cycle
            answer.future.add_done_callback(lambda _f: self._completed(fd, cycle))
            return
        self._answer(fd, c, answer)

    def _completed(self, fd: int, cycle: int) -> None:
        """A Deferred's future is done (in whatever thread did it): answer in the loop's."""
        self._done.append((fd, cycle))
        self.wake()

    def _finish_done(self) -> None:
        while self._done:
            fd, cycle = self._done.popleft()
            c = self._conns.get(fd)
            if c is None or c.cycle != cycle or c.state is not _State.WAITING:
                continue  # answered by its timeout already, or the client left
            self._guarded(fd, self._finish, c)

    def _finish(self, fd: int, c: _Conn) -> None:
        deferred = c.deferred
        if deferred is None or not deferred.future.done() or deferred.future.cancelled():
            return
        c.deferred = None
        self._answer(fd, c, _safely(lambda: deferred.finish(deferred.future), c))

    def _answer(self, fd: int, c: _Conn, response: Response) -> None:
        """Encode and send ``response``; keep the connection for the next request if we may.

        The answer to a HEAD (``c.head_only``), direct or deferred, is its status and headers,
        with the Content-Length the GET would have, and no body.
        """
        try:
            payload = _encode(response)
            if response.headers:  # a bad header becomes a 500 now, not a broken answer
                _render(h11.Connection(h11.SERVER), response, payload=payload)
        except Exception:
            logger.exception("the handler's answer cannot be sent")
            response, payload = _FAILED, _encode(_FAILED)
        data = _render(c.h11, response, payload=payload, close=False, head=c.head_only)
        keep = c.h11.our_state is h11.DONE and c.h11.their_state is h11.DONE
        self._send(fd, c, data, close=not keep)

    def _reject(self, fd: int, c: _Conn, status: int, message: str) -> None:
        """Answer an error with ``Connection: close``, then linger: the client can read it."""
        try:
            data = _render(c.h11, error_response(status, message), head=c.head_only)
        except h11.LocalProtocolError as e:
            logger.debug("connection ended: %s", e)
            self._close(fd)
            return
        c.linger_reads = _LINGER_READS
        self._send(fd, c, data, close=True)

    def _send(self, fd: int, c: _Conn, data: bytes, *, close: bool) -> None:
        c.out, c.close_after = data, close
        c.state = _State.WRITING
        if self._flush(fd, c) is not None:  # the socket did not take it all: wait to write
            self._epoll.modify(fd, _OUT)
            self._arm(fd, c, self._limits.request_timeout)  # for the whole rest

    def _flush(self, fd: int, c: _Conn) -> bool | None:
        """Send what is left; then go on (None), or True when the socket is full."""
        while c.out:
            try:
                sent = c.sock.send(c.out)
            except BlockingIOError:
                return True
            c.out = c.out[sent:]
        if c.close_after:
            if c.linger_reads:
                self._start_linger(fd, c)
            else:
                self._close(fd)
            return None
        c.h11.start_next_cycle()
        self._epoll.modify(fd, _IN)
        self._await_request(fd, c, self._limits.keepalive_timeout)
        if c.h11.trailing_data[0] or c.h11.trailing_data[1]:  # sent ahead, or closed: read on
            self._next.append((fd, c.cycle))
        return None

    def _await_request(self, fd: int, c: _Conn, idle: float) -> None:
        """Read the next request: within ``idle`` its first byte, then all of it in time."""
        c.state, c.cycle = _State.READING, next(self._cycles)
        c.head_only = False
        c.started = bool(c.h11.trailing_data[0])
        self._arm(fd, c, self._limits.request_timeout if c.started else idle)

    def _start_linger(self, fd: int, c: _Conn) -> None:
        """After an error answer: stop writing and drain a little, so the client can read it."""
        c.sock.shutdown(socket.SHUT_WR)
        c.state = _State.LINGERING
        self._epoll.modify(fd, _IN)
        self._arm(fd, c, min(1.0, self._limits.request_timeout))

    def _linger(self, fd: int, c: _Conn) -> None:
        try:
            data = c.sock.recv(_CHUNK)
        except BlockingIOError:
            return
        c.linger_reads -= 1
        if not data or c.linger_reads <= 0:
            self._close(fd)

    def _close(self, fd: int) -> None:
        c = self._conns.pop(fd, None)
        if c is None:
            return
        if c.deferred is not None:
            c.deferred.future.cancel()
            c.deferred = None
        if c.uid != 0:
            left = self._held.pop(c.uid) - 1
            if left:
                self._held[c.uid] = left
            self._others -= 1
        with contextlib.suppress(OSError):
            self._epoll.unregister(fd)
        c.sock.close()


_FAILED = error_response(500, "internal error; the agent's log has the details")


def _safely(make: Callable[[], Response], c: _Conn) -> Response:
    """``make()``, or a 500 (logged) when it fails."""
    try:
        return make()
    except Exception:
        logger.exception("a deferred answer failed (uid %d)", c.uid)
        return _FAILED


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
    if isinstance(response.body, bytes):
        return response.body
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
        ("Content-Type", response.content_type),
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
