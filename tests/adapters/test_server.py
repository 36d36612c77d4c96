"""guest.server over real Unix sockets: HTTP, access policy, limits, lifecycle."""

import concurrent.futures
import contextlib
import http.client
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from kvdev.errors import UsageError
from kvdev.guest.api.httpconn import Connections
from kvdev.guest.api.server import Deferred, Limits, Request, Response, Server

NOBODY = 65534
SHORT = Limits(max_connections=8, request_timeout=1.0, keepalive_timeout=2.0)


def resolve(future):
    """What a loop does: answer unless the asker left (the server cancelled the future)."""
    if future.set_running_or_notify_cancel():
        future.set_result(None)


class App:
    """The test handler: echoes the request, and has a few special routes."""

    def __init__(self):
        self.entered = threading.Event()
        self.cancelled = threading.Event()
        self._waiting: concurrent.futures.Future | None = None

    def release(self):
        assert self._waiting is not None
        resolve(self._waiting)

    def echo(self, request: Request) -> Response:
        body = {"method": request.method, "path": request.path, "query": request.query}
        body |= {"uid": request.peer.uid, "body": request.body.decode()}
        return Response(200, body, (("X-Test", "yes"),))

    def __call__(self, request: Request) -> Response | Deferred:
        if request.path == "/boom":
            raise RuntimeError("handler bug")
        if request.path == "/slow":  # answered 0.2 s later, from another thread
            later: concurrent.futures.Future = concurrent.futures.Future()
            threading.Timer(0.2, resolve, (later,)).start()
            return Deferred(later, lambda _f: self.echo(request), 30.0, lambda: self.echo(request))
        if request.path == "/wait":  # a long poll
            self._waiting = waiting = concurrent.futures.Future()
            waiting.add_done_callback(lambda f: f.cancelled() and self.cancelled.set())
            self.entered.set()
            return Deferred(
                waiting, lambda _f: self.echo(request), 60.0, lambda: self.echo(request)
            )
        if request.path == "/big":  # more than a socket buffer holds
            return Response(200, {"data": "x" * (4 << 20)})
        if request.path == "/late":  # nobody answers: its timeout does
            never: concurrent.futures.Future = concurrent.futures.Future()
            return Deferred(never, lambda _f: self.echo(request), 0.3, lambda: Response(504, {}))
        return self.echo(request)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=5.0):
        super().__init__("kvdev", timeout=timeout)
        self.unix_path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def call(path, method="GET", target="/x", body=None, headers=None):
    conn = UnixHTTPConnection(path)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp
    finally:
        conn.close()


def raw(path, data, *, half_close=False):
    """Send bytes, read the whole answer; the status code (0 when nothing came back)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return (int(answer.split()[1]) if answer else 0), answer


CLOSE = b"GET /x HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n"


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def app():
    return App()


@pytest.fixture
def serve(tmp_path, app):
    started = []

    def start(path=None, **kwargs):
        kwargs.setdefault("limits", SHORT)
        if "listen_fd" not in kwargs:
            kwargs["path"] = path or tmp_path / "run" / "agent.sock"
        server = Server(app, **kwargs)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_get_via_http_client_echoes_method_path_query_and_peer(serve):
    server = serve()
    status, body, resp = call(server.address, target="/a/b%2Fc?x=1&x=2&y=&z=%20")
    assert (status, body["method"], body["path"], body["body"]) == (200, "GET", "/a/b%2Fc", "")
    assert body["uid"] == os.geteuid()
    assert body["query"] == {"x": "2", "y": "", "z": " "}
    assert resp.getheader("Content-Type") == "application/json"
    assert resp.getheader("X-Test") == "yes"


def test_get_via_curl(serve):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    server = serve()
    out = run("curl", "-sS", "--unix-socket", server.address, "http://kvdev/x")
    assert out.endswith("}\n")
    assert json.loads(out)["path"] == "/x"


def test_keep_alive_serves_two_requests_on_one_connection_and_honours_close(serve):
    server = serve()
    conn = UnixHTTPConnection(server.address)
    try:
        conn.request("GET", "/one")
        first = conn.getresponse()
        assert json.loads(first.read())["path"] == "/one"
        assert not first.will_close
        sock = conn.sock
        conn.request("HEAD", "/two")
        second = conn.getresponse()
        assert second.status == 200
        assert second.read() == b""
        assert int(second.getheader("Content-Length")) > 0
        assert conn.sock is sock
    finally:
        conn.close()
    status, answer = raw(server.address, CLOSE)
    assert status == 200  # and raw() returned: the server closed after answering
    assert b"Connection: close" in answer


def test_post_as_root_reaches_the_handler(serve):
    server = serve()
    status, body, _ = call(server.address, "POST", "/do", body=b'{"a": 1}')
    assert (status, body["method"], body["body"]) == (200, "POST", '{"a": 1}')


NOBODY_CLIENT = """
import json, socket, sys
out = []
for method in ("GET", "POST"):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sys.argv[1])
        s.sendall(f"{method} /x HTTP/1.1\\r\\nHost: k\\r\\nContent-Length: 0\\r\\n"
                  "Connection: close\\r\\n\\r\\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    out.append([int(data.split()[1]), json.loads(data.split(b"\\r\\n\\r\\n", 1)[1])])
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    ("socket_gid", "groups", "get_status"),
    [
        (None, ["--regid=nogroup", "--clear-groups"], 403),
        (NOBODY, ["--regid=nogroup", "--clear-groups"], 200),  # primary group
        (NOBODY, ["--regid=1", f"--groups={NOBODY}"], 200),  # supplementary group
    ],
)
def test_access_policy_for_nobody(serve, caplog, socket_gid, groups, get_status):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    directory = Path(tempfile.mkdtemp(prefix="kvdev-server-"))
    try:
        directory.chmod(0o755)
        server = serve(directory / "agent.sock", group="kvdev-no-such-group", mode=0o666)
        if socket_gid is not None:
            os.chown(server.address, -1, socket_gid)
        cmd = ["setpriv", "--reuid=nobody", *groups, python]
        out = run(*cmd, "-c", NOBODY_CLIENT, server.address)
    finally:
        shutil.rmtree(directory)
    (got_get, get_body), (got_post, post_body) = json.loads(out)
    assert (got_get, got_post) == (get_status, 403)
    assert (post_body["kind"], post_body["code"]) == ("Error", 403)
    assert get_body["uid" if got_get == 200 else "code"] == (NOBODY if got_get == 200 else 403)
    denied = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("POST /x" in m and f"uid {NOBODY}" in m and "pid" in m for m in denied)


def test_oversized_headers_get_431(serve):
    server = serve()
    status, body, _ = call(server.address, headers={"X-Big": "a" * 9000})
    assert (status, body["code"], body["apiVersion"]) == (431, 431, "kvdev.io/v1alpha1")
    # many headers that fit in one read are counted too
    many = {f"X-H{i}": "b" * 100 for i in range(100)}
    assert call(server.address, headers=many)[0] == 431


def test_oversized_body_gets_413(serve):
    server = serve()
    assert call(server.address, "POST", body=b"x" * 5000)[0] == 413
    chunked = (
        b"POST /x HTTP/1.1\r\nHost: k\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"1000\r\n" + b"y" * 4096 + b"\r\n" + b"10\r\n" + b"z" * 16 + b"\r\n0\r\n\r\n"
    )
    assert raw(server.address, chunked)[0] == 413


def test_garbage_gets_400_and_the_server_serves_the_next_client(serve):
    server = serve()
    status, answer = raw(server.address, b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
    assert status == 400
    assert b'"kind": "Error"' in answer
    assert call(server.address)[0] == 200


def test_slowloris_gets_408_and_does_not_block_others(serve):
    server = serve()  # request_timeout = 1.0
    result = {}

    def slowloris():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(server.address)
            sock.settimeout(0.5)
            began = time.monotonic()
            for byte in b"GET /x HTTP/1.1\r\nHost: kvdev\r\nX-Slow: " + b"s" * 100:
                sock.send(bytes([byte]))
                try:
                    result["answer"] = sock.recv(65536)
                except TimeoutError:
                    continue
                result["after"] = time.monotonic() - began
                return

    thread = threading.Thread(target=slowloris)
    thread.start()
    time.sleep(0.2)
    assert call(server.address)[0] == 200
    assert "after" not in result  # served while the slow client still held its connection
    thread.join(timeout=5)
    assert result["answer"].startswith(b"HTTP/1.1 408")
    assert result["after"] > 0.9  # not before its header time-out
    print(f"slow client answered 408 after {result['after']:.2f} s")


STORM = """
import collections, json, socket, sys, threading
counts, lock = collections.Counter(), threading.Lock()
def one():
    status = "no answer"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sys.argv[1])  # blocking: waits while the listen backlog is full
        s.settimeout(10)
        try:
            s.sendall(b"GET /slow HTTP/1.1\\r\\nHost: k\\r\\nConnection: close\\r\\n\\r\\n")
        except BrokenPipeError:  # refused before we wrote: the 503 is still there to read
            pass
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
        if data:
            status = int(data.split()[1])
    with lock:
        counts[status] += 1
threads = [threading.Thread(target=one) for _ in range(500)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(counts))
"""


def test_connection_storm_gets_200_or_503_and_leaks_nothing(serve):
    server = serve()  # max_connections = 8, /slow holds each served one 0.2 s
    assert raw(server.address, CLOSE)[0] == 200  # returns once the server closed its end
    baseline = open_fds()
    counts = json.loads(run(sys.executable, "-c", STORM, server.address))
    assert set(counts) <= {"200", "503"}
    assert sum(counts.values()) == 500
    assert counts.get("200", 0) >= 8
    assert counts.get("503", 0) > 0
    assert raw(server.address, CLOSE)[0] == 200
    deadline = time.monotonic() + 3
    while open_fds() != baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_fds() == baseline


def test_half_closed_client_still_gets_its_answer(serve):
    server = serve()
    request = b"GET /half HTTP/1.1\r\nHost: k\r\n\r\n"
    status, answer = raw(server.address, request, half_close=True)
    assert status == 200
    assert b'"path": "/half"' in answer


def test_long_poll_waits_and_a_client_that_leaves_cancels_it(serve, app):
    server = serve()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(server.address)
        sock.sendall(b"GET /wait HTTP/1.1\r\nHost: k\r\n\r\n")
        assert app.entered.wait(5)
    assert app.cancelled.wait(5)

    app.entered.clear()
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(status=call(server.address, "GET", "/wait")[0])
    )
    thread.start()
    assert app.entered.wait(5)
    time.sleep(SHORT.request_timeout + 0.2)  # no server timeout on the handler
    app.release()
    thread.join(timeout=5)
    assert result == {"status": 200}

    app.entered.clear()
    app.cancelled.clear()
    waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with waiting:
        waiting.connect(server.address)
        waiting.sendall(b"GET /wait HTTP/1.1\r\nHost: k\r\n\r\n")
        assert app.entered.wait(5)
        server.stop()  # does not wait for the long poll: it cancels it and closes
        assert app.cancelled.is_set()
        assert waiting.recv(100) == b""


def test_handler_exception_gives_500_and_the_server_keeps_working(serve, caplog):
    server = serve()
    status, body, _ = call(server.address, target="/boom")
    assert (status, body["kind"], body["code"]) == (500, "Error", 500)
    assert "handler bug" not in body["message"]
    assert any(r.exc_info and "GET /boom" in r.getMessage() for r in caplog.records)
    assert call(server.address)[0] == 200


def test_bind_creates_the_directory_and_stop_removes_the_socket_idempotently(serve, tmp_path):
    path = tmp_path / "new" / "dir" / "agent.sock"
    server = serve(path, mode=0o660)
    assert (path.parent.stat().st_mode & 0o777) == 0o755
    assert (path.stat().st_mode & 0o777) == 0o660
    server.stop()
    assert not path.exists()
    server.stop()
    with pytest.raises(OSError, match=r"No such file|Connection refused"):
        call(path)


def test_a_stale_socket_file_is_replaced(serve, tmp_path):
    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # bound, never listening: what a crashed agent leaves
    server = serve(path)
    assert call(server.address)[0] == 200


def test_a_live_server_on_the_same_path_is_a_usage_error(serve, app, tmp_path):
    path = tmp_path / "agent.sock"
    serve(path)
    with pytest.raises(UsageError, match=re.escape(str(path))):
        Server(app, path=path).start()
    assert call(path)[0] == 200


def test_socket_activation_serves_a_listening_fd(serve, tmp_path):
    path = tmp_path / "activated.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(16)
        server = serve(listen_fd=listener.fileno())
        assert server.address == str(path)
        assert call(path)[0] == 200
        server.stop()
        assert path.exists()  # the socket file belongs to whoever bound it
        assert listener.fileno() >= 0


def test_a_non_listening_fd_is_refused(app):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, pytest.raises(UsageError):
        Server(app, listen_fd=sock.fileno()).start()


def test_both_content_length_and_transfer_encoding_is_a_400_and_the_end_of_the_connection(
    serve,
):
    # Regression (finding 6): such a request kept the connection open (RFC 9112 6.3: a
    # server that answers it must close the connection afterwards).
    server = serve()
    request = (
        b"POST /x HTTP/1.1\r\nHost: k\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET /x HTTP/1.1\r\nHost: k\r\n\r\n"
    )
    status, answer = raw(server.address, request)  # reads to EOF: the server must close
    assert status == 400
    assert b"ambiguous framing" in answer
    assert answer.count(b"HTTP/1.1 ") == 1  # the smuggled second request was not served
    assert call(server.address)[0] == 200


def test_a_supplementary_group_is_known_without_proc(serve, monkeypatch):
    # The agent runs as its own user under ProtectProc=invisible: another user's
    # /proc/<pid>/status is hidden from it, so the groups come from SO_PEERGROUPS.
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    from kvdev.guest.api import httpconn  # noqa: PLC0415

    monkeypatch.setattr(httpconn, "_groups_of", lambda _pid, _uid, gid: frozenset({gid}))
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    directory = Path(tempfile.mkdtemp(prefix="kvdev-server-"))
    try:
        directory.chmod(0o755)
        server = serve(directory / "agent.sock", group="kvdev-no-such-group", mode=0o666)
        os.chown(server.address, -1, 4711)
        cmd = ["setpriv", "--reuid=65534", "--regid=1", "--groups=4711", python]
        out = run(*cmd, "-c", NOBODY_CLIENT, server.address)
    finally:
        shutil.rmtree(directory)
    (got_get, _), (got_post, _) = json.loads(out)
    assert (got_get, got_post) == (200, 403)


HOLDER = """
import json, socket, sys
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    held.append(s)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:  # a full server answers 503 at once and closes: the request may meet a closed socket
    s.sendall(b"GET /x HTTP/1.1\\r\\nHost: k\\r\\nConnection: close\\r\\n\\r\\n")
except BrokenPipeError:
    pass
data = b""
while chunk := s.recv(65536):
    data += chunk
print(json.dumps({"status": int(data.split()[1]), "retry": b"retry-after: 1" in data.lower()}))
sys.stdout.flush()
sys.stdin.read()  # hold them until the test is done
"""


AS = ["setpriv", "--regid=nogroup", "--clear-groups"]


@contextlib.contextmanager
def held_by_nobody(serve, limits, count):
    """A server anyone may connect to, and user nobody holding ``count`` connections to it
    (and one more, whose answer is the holder's first line of output)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    directory = Path(tempfile.mkdtemp(prefix="kvdev-server-"))
    holder = None
    try:
        directory.chmod(0o755)
        server = serve(directory / "agent.sock", limits=limits, group="nogroup", mode=0o666)
        holder = subprocess.Popen(
            [*AS, "--reuid=nobody", PYTHON, "-c", HOLDER, server.address, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None
        yield server, json.loads(holder.stdout.readline())
    finally:
        if holder is not None:
            holder.communicate("", timeout=10)
        shutil.rmtree(directory)


PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def test_one_uid_holds_at_most_its_share_and_neither_another_uid_nor_root_is_locked_out(serve):
    limits = Limits(max_connections=16, root_reserve=4, per_uid=5, request_timeout=30.0)
    with held_by_nobody(serve, limits, 5) as (server, sixth):
        # nobody holds its 5: its sixth is refused, busy, with Retry-After
        assert sixth == {"status": 503, "retry": True}
        other = [*AS, "--reuid=65533", PYTHON]
        answer = json.loads(run(*other, "-c", HOLDER, server.address, "0"))
        assert answer["status"] == 200  # another uid still gets in (then its script returns)
        assert call(server.address)[0] == 200  # and root


def test_other_uids_leave_root_its_reserve(serve):
    limits = Limits(max_connections=8, root_reserve=2, per_uid=100, request_timeout=30.0)
    with held_by_nobody(serve, limits, 6) as (server, seventh):
        assert seventh["status"] == 503  # 8 - 2 for root: full
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as held:
            held.connect(server.address)  # root takes one reserved slot
            assert call(server.address)[0] == 200  # and the other, for this request


BOUND = """
import json, resource, sys
from kvdev.guest.api.httpconn import FD_RESERVE, Limits, connection_bound
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
bound = connection_bound(Limits(max_connections=int(sys.argv[3])))
print(json.dumps([bound, resource.getrlimit(resource.RLIMIT_NOFILE)[0], FD_RESERVE]))
"""


@pytest.mark.parametrize(
    ("soft", "hard", "wanted", "bound", "soft_after"),
    [
        (200, 200, 4096, 200 - 64, 200),  # cannot raise: what the fd limit leaves
        (200, 1000, 4096, 1000 - 64, 1000),  # raised as far as the hard limit allows
        (200, 10000, 300, 300, 364),  # raised just enough
        (10000, 10000, 300, 300, 10000),  # never lowered
    ],
)
def test_the_connection_bound_follows_the_open_file_limit(soft, hard, wanted, bound, soft_after):
    out = run(sys.executable, "-c", BOUND, str(soft), str(hard), str(wanted))
    assert json.loads(out) == [bound, soft_after, 64]


def test_many_idle_connections_are_held_and_all_answered(serve):
    server = serve(limits=Limits(max_connections=300, request_timeout=30.0))
    idle = []
    try:
        for _ in range(250):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(server.address)
            idle.append(s)
        assert raw(server.address, CLOSE)[0] == 200  # the 251st is served at once
        for s in idle:  # and each idle one, when it asks
            s.sendall(CLOSE)
        statuses = set()
        for s in idle:
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            statuses.add(int(data.split()[1]))
        assert statuses == {200}
    finally:
        for s in idle:
            s.close()


def read_answers(sock, count):
    """``count`` answers from a keep-alive connection: their statuses and X-Test paths."""
    buf, out = b"", []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {len(out)} answers"
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))
        while len(buf) < length:
            buf += sock.recv(65536)
        body, buf = buf[:length], buf[length:]
        out.append((int(head.split()[1]), json.loads(body)["path"]))
    return out


def test_thousands_of_pipelined_requests_in_one_write_are_answered_in_order(serve):
    server = serve()
    requests = b"".join(f"GET /p{i} HTTP/1.1\r\nHost: k\r\n\r\n".encode() for i in range(3000))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(server.address)
        writer = threading.Thread(target=sock.sendall, args=(requests,))
        writer.start()  # the server answers while we still write: read at the same time
        answers = read_answers(sock, 3000)
        writer.join()
    assert answers == [(200, f"/p{i}") for i in range(3000)]
    assert raw(server.address, CLOSE)[0] == 200


def test_a_deferred_answer_that_never_comes_gets_its_timeout_answer(serve):
    server = serve()
    started = time.monotonic()
    assert (
        raw(server.address, b"GET /late HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n")[0] == 504
    )
    assert time.monotonic() - started >= 0.25  # its own timeout (0.3 s), not at once


def test_a_client_that_does_not_read_its_answer_is_cut_and_others_are_served(serve):
    server = serve()  # request_timeout = 1.0: the whole answer must be taken within it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(server.address)
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: k\r\n\r\n")
        time.sleep(0.2)
        assert call(server.address)[0] == 200  # while the big answer waits for its reader
        time.sleep(1.5)
        sock.settimeout(5)
        got = 0
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 20):
                got += len(chunk)
    assert 0 < got < 4 << 20  # what fitted in the buffers, then the server closed it
    print(f"a reader that stalled got {got} bytes of {4 << 20}")


def test_an_idle_connection_costs_a_few_kb(serve):
    server = serve(limits=Limits(max_connections=1000, request_timeout=30.0))
    assert raw(server.address, CLOSE)[0] == 200  # warm: what every connection shares
    idle = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(500):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(server.address)
            idle.append(s)
        assert raw(server.address, CLOSE)[0] == 200  # accepted after all 500: they are held
        per = (tracemalloc.get_traced_memory()[0] - before) / 500
    finally:
        tracemalloc.stop()
        for s in idle:
            s.close()
    print(f"one idle connection: {per:.0f} bytes of Python objects (both ends)")
    assert per < 8192


def test_a_wake_after_the_loop_closed_writes_to_no_file(tmp_path):
    """Issue 23 §6: ``Server.stop()`` (or a Deferred finishing in another thread) woke a loop
    that had already closed its wake pipe: EBADF, or a byte written into whatever file had
    reused the pipe's fd number. Deterministic: close, let new pipes take the freed numbers,
    then wake."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(tmp_path / "s"))
        listener.listen()
        service = Connections(App(), SHORT, lambda: None, listener)
        old = {service._wake_r, service._wake_w}
        service.close()
        pipes = [os.pipe2(os.O_NONBLOCK) for _ in range(4)]  # the lowest free numbers first
        try:
            assert old <= {fd for pipe in pipes for fd in pipe}  # the numbers were reused
            service.wake()  # was: OSError(EBADF), or "!" into someone else's pipe
            for r, _w in pipes:
                with pytest.raises(BlockingIOError):
                    os.read(r, 1)
        finally:
            for pipe in pipes:
                for fd in pipe:
                    os.close(fd)


def head_then_get(address, target):
    """HEAD then GET of ``target`` on one connection: (HEAD's status, headers, body), GET's body.

    http.client reads a HEAD's answer as status and headers only; a server that sent no status
    line (or a body) breaks the GET that follows on the same connection.
    """
    conn = UnixHTTPConnection(address)
    try:
        conn.request("HEAD", target)
        head = conn.getresponse()
        answer = (head.status, dict(head.getheaders()), head.read())
        conn.request("GET", target)
        return answer, conn.getresponse().read()
    finally:
        conn.close()


@pytest.mark.parametrize("target", ["/x", "/slow", "/late", "/boom"])
def test_head_answers_status_and_headers_without_a_body_direct_or_deferred(serve, target):
    # Regression (issue 23 §5): HEAD of a deferred answer (/v1/plan, /v1/events?wait=1) closed
    # the connection without a status line; the direct answers were right.
    server = serve()
    (status, headers, body), got = head_then_get(server.address, target)
    assert status == {"/late": 504, "/boom": 500}.get(target, 200)
    assert body == b""
    assert headers["Content-Type"] == "application/json"
    if target in {"/x", "/slow"}:  # the same answer as the GET's, less its body
        assert int(headers["Content-Length"]) == len(got.replace(b'"GET"', b'"HEAD"'))
    assert got.endswith(b"}\n")  # the connection went on: the GET got its whole answer
