"""kvdev-agent on a socket systemd holds (socket activation): the API starts after READY=1.

The agent imports and starts its API only after the first pass when systemd passes the socket
(kvdev-agent.socket); a client that connected before then waits in the socket's backlog and is
answered. Real process, real namespace, the socket passed as systemd passes it.
"""

import json
import os
import socket

import pytest

from agentlab import activation_socket, make_guest, serving

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


def _get_status(client: socket.socket) -> dict:
    client.sendall(b"GET /v1/status HTTP/1.1\r\nHost: kvdev\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b"\r\n", 1)[0] == b"HTTP/1.1 200 OK", head
    return json.loads(body)


def test_a_client_that_connects_before_ready_is_answered(netns, tmp_path):
    tree = make_guest(netns, tmp_path)
    path = tmp_path / "held.sock"
    with activation_socket(path) as listener:
        early = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        early.settimeout(60)
        with early, serving(netns, tree, tmp_path, listener=listener) as (proc, notify):
            early.connect(str(path))  # before READY=1 may have been sent: the backlog holds it
            status = _get_status(early)
            assert "READY=1" in notify.collect()
            assert proc.poll() is None
        assert status["devices"], status
        assert not (tmp_path / "agent.sock").exists()  # the passed socket, not --socket's
