"""guest.systemd against real sockets and a real environment: notify, watchdog, log handler."""

import logging
import os
import socket
import uuid

import pytest

from kvdev.guest.adapters import systemd

SYSTEMD_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "INVOCATION_ID")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in SYSTEMD_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)  # noqa: FBT003 - stdlib signature
    yield sock
    sock.close()


def pending(sock):
    """Datagrams already queued on ``sock`` (a local datagram is queued when send returns)."""
    out = []
    while True:
        try:
            out.append(sock.recv(4096))
        except BlockingIOError:
            return out


def test_notify_to_a_path_socket_sends_one_datagram(tmp_path, monkeypatch, listener):
    path = tmp_path / "notify"
    listener.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    assert systemd.notify("READY=1", "STATUS=x") is True
    assert pending(listener) == [b"READY=1\nSTATUS=x"]


def test_notify_to_an_abstract_socket(monkeypatch, listener):
    name = f"kvdev-test-{uuid.uuid4().hex}"
    listener.bind("\0" + name)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    assert systemd.notify("WATCHDOG=1") is True
    assert systemd.notify("STOPPING=1") is True
    assert pending(listener) == [b"WATCHDOG=1", b"STOPPING=1"]


def test_notify_sends_utf8(tmp_path, monkeypatch, listener):
    listener.bind(str(tmp_path / "n"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "n"))
    assert systemd.notify("STATUS=réseau prêt") is True
    assert pending(listener) == ["STATUS=réseau prêt".encode()]


def test_no_notify_socket_is_false():
    assert systemd.notify("READY=1") is False


def test_empty_notify_socket_is_false(monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", "")
    assert systemd.notify("READY=1") is False


def test_nothing_to_send_sends_nothing(tmp_path, monkeypatch, listener):
    listener.bind(str(tmp_path / "n"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "n"))
    assert systemd.notify() is False
    assert pending(listener) == []


def test_socket_path_that_does_not_exist_is_false(tmp_path, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "absent"))
    assert systemd.notify("READY=1") is False


def test_socket_nobody_listens_on_is_false(tmp_path, monkeypatch):
    path = tmp_path / "stale"
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    gone.bind(str(path))
    gone.close()  # the file stays; connecting is refused
    assert path.exists()
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    assert systemd.notify("READY=1") is False


def test_abstract_socket_nobody_listens_on_is_false(monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", f"@kvdev-test-absent-{uuid.uuid4().hex}")
    assert systemd.notify("READY=1") is False


def test_regular_file_as_socket_is_false(tmp_path, monkeypatch):
    path = tmp_path / "plain"
    path.write_text("")
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    assert systemd.notify("READY=1") is False


@pytest.mark.parametrize(
    ("usec", "pid", "interval"),
    [
        ("2000000", None, 1.0),
        ("2000000", "self", 1.0),
        ("500000", None, 0.25),
        ("1", None, 5e-7),
        ("2000000", "other", None),
        ("2000000", "1", None),
        ("0", None, None),
        ("-2000000", None, None),
        ("", None, None),
        ("2s", None, None),
        ("garbage", "self", None),
        (None, None, None),
        (None, "self", None),
    ],
)
def test_watchdog_interval(monkeypatch, usec, pid, interval):
    if usec is not None:
        monkeypatch.setenv("WATCHDOG_USEC", usec)
    if pid == "self":
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    elif pid == "other":
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    elif pid is not None:
        monkeypatch.setenv("WATCHDOG_PID", pid)
    assert systemd.watchdog_interval() == interval


def record(**extra):
    rec = logging.LogRecord("kvdev.agent", logging.WARNING, __file__, 1, "%s failed", ("x",), None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_log_handler_outside_systemd_is_a_stream_handler():
    handler = systemd.log_handler()
    assert type(handler) is logging.StreamHandler


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        ({}, "WARNING x failed"),
        ({"DEVICE": "x", "STEP": "y"}, "WARNING x failed (DEVICE=x, STEP=y)"),
        (
            {"STEP": "y", "CLAIM": "c", "DEVICE": "x"},
            "WARNING x failed (DEVICE=x, CLAIM=c, STEP=y)",
        ),
        ({"DEVICE": "", "STEP": None}, "WARNING x failed"),
        ({"OTHER": "z"}, "WARNING x failed"),
    ],
)
def test_log_handler_appends_structured_fields(extra, text):
    assert systemd.log_handler().format(record(**extra)) == text
