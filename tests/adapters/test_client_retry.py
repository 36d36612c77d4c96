"""kvdev's client against a real API server whose connections are all taken: it asks again."""

import socket
import threading
import time

import pytest

from kvdev.guest.api.server import Limits, Request, Response, Server
from kvdev.guest.cli.client import AgentBusyError, Client

ONE = Limits(max_connections=1, request_timeout=30.0)  # one slot, no reserve (a quarter of 1)


def handler(request: Request) -> Response:
    return Response(200, {"path": request.path})


@pytest.fixture
def server(tmp_path):
    server = Server(handler, path=tmp_path / "agent.sock", limits=ONE)
    server.start()
    yield server
    server.stop()


def hold(address):
    """Take the server's one slot: a connection that asks nothing (it is admitted at once)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    sock.sendall(b"GET /held HTTP/1.1\r\nHost: k\r\n")  # a head begun: the slot is taken
    time.sleep(0.1)  # accepted before the client under test connects
    return sock


def test_a_busy_503_is_asked_again_until_a_slot_frees(server):
    held = hold(server.address)
    attempts = []
    client = Client(server.address, timeout=10.0)
    once = client._once

    def counted(*args):
        attempts.append(time.monotonic())
        if len(attempts) == 3:  # free the slot after two refusals
            held.close()
        return once(*args)

    client._once = counted
    assert client.get("/x") == {"path": "/x"}
    assert len(attempts) >= 3  # two 503s (or one more, if the close is seen late), the answer
    print(f"answered on attempt {len(attempts)}")


def test_a_busy_503_past_the_timeout_is_reported_busy(server):
    held = hold(server.address)
    try:
        started = time.monotonic()
        with pytest.raises(AgentBusyError) as raised:
            Client(server.address, timeout=0.5).get("/x")
        took = time.monotonic() - started
        assert raised.value.status == 503
        assert "too many connections" in str(raised.value)
        assert took >= 0.2  # it did wait and ask again (0.02 + 0.04 + 0.08 + ... s)
        print(f"gave up after {took:.2f} s")
    finally:
        held.close()


def test_a_503_without_retry_after_is_returned_at_once(tmp_path):
    def not_ready(_request: Request) -> Response:
        return Response(503, {"message": "no first pass yet"})

    server = Server(not_ready, path=tmp_path / "agent.sock", limits=ONE)
    server.start()
    try:
        calls = []
        client = Client(server.address, timeout=10.0)
        once = client._once
        client._once = lambda *a: calls.append(1) or once(*a)
        assert client.request("GET", "/v1/status").status == 503
        assert calls == [1]
    finally:
        server.stop()


def test_the_busy_answer_is_not_retried_by_another_thread_storm(server):
    # Many clients at once for one slot: each gets its answer within its timeout.
    results = []

    def ask():
        results.append(Client(server.address, timeout=20.0).get("/x")["path"])

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["/x"] * 20
