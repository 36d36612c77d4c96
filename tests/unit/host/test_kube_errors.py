"""kube.errors: every API answer and transport failure maps to one typed error, once.

The client's own exceptions (``ApiException``, urllib3's) are raised by a stand-in for the
client's API object: no server is needed.
"""

from __future__ import annotations

import errno
import json

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

from kvdev.errors import PermanentError, RetryableError
from kvdev.host.kube.errors import (
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    KubeError,
    KubePermanentError,
    KubeRetryableError,
    NotFoundError,
    answered,
    status_message,
)
from kvdev.host.kube.wire import KubeApi
from kvdev.host.plugin.claimstatus import reason

WHAT = "update ConfigMap vms/kvdev-vm1"


def status_body(code, message):
    return json.dumps({"kind": "Status", "code": code, "message": message})


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, KubePermanentError, False),
        (401, KubePermanentError, False),
        (403, ForbiddenError, False),
        (404, NotFoundError, False),
        (408, KubeRetryableError, True),
        (409, ConflictError, True),
        (410, GoneError, True),
        (422, InvalidError, False),
        (429, KubeRetryableError, True),
        (500, KubeRetryableError, True),
        (503, KubeRetryableError, True),
        (None, KubeRetryableError, True),
    ],
)
def test_each_status_maps_to_one_type(status, kind, retryable):
    e = ApiException(status=status, reason="Why")
    e.body = status_body(status, "the server's words")
    error = answered(WHAT, e.status, e.reason, e.body)
    assert type(error) is kind
    assert isinstance(error, RetryableError if retryable else PermanentError)
    assert error.retryable is retryable
    assert (error.status, error.what) == (status, WHAT)
    assert str(error) == f"{WHAT}: API server answered {status} Why: the server's words"


class Calls:
    """The client's API object: each method raises what it is given, or answers ``data``."""

    def __init__(self, raised=None, data=b"{}"):
        self.raised, self.data, self.sent = raised, data, []

    def __getattr__(self, method):
        def call(**kwargs):
            self.sent.append((method, kwargs))
            if self.raised is not None:
                raise self.raised
            return type("Response", (), {"data": self.data})()

        return call


def api_raising(monkeypatch, raised=None, data=b"{}"):
    calls = Calls(raised, data)
    api = KubeApi(client=None)
    monkeypatch.setattr(api, "_api", lambda _group: calls)
    return api, calls


def refusal(status):
    e = ApiException(status=status, reason="NotFound" if status == 404 else "Conflict")
    e.body = status_body(status, 'configmaps "x" not found')
    return e


def test_a_404_on_delete_is_not_found_naming_the_object(monkeypatch):
    api, calls = api_raising(monkeypatch, refusal(404))
    with pytest.raises(NotFoundError) as raised:
        api.delete_configmap("kvdev-system", "x")
    assert raised.value.status == 404
    assert raised.value.what == "delete ConfigMap kvdev-system/x"
    assert calls.sent[0][0] == "delete_namespaced_config_map"
    assert api.calls["delete"] == 1


def test_a_404_on_a_read_is_no_object(monkeypatch):
    api, _ = api_raising(monkeypatch, refusal(404))
    assert api.get_configmap("vms", "x") is None
    assert api.get_lease("kvdev-system", "x") is None


def test_a_409_on_create_is_a_conflict(monkeypatch):
    api, _ = api_raising(monkeypatch, refusal(409))
    body = {"metadata": {"name": "x"}}
    with pytest.raises(ConflictError, match=r"create ConfigMap vms/x: API server answered 409"):
        api.create_configmap("vms", body)


@pytest.mark.parametrize(
    "failure",
    [
        MaxRetryError(None, "/api/v1", ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
        ProtocolError("Connection aborted.", ConnectionResetError(errno.ECONNRESET, "reset")),
        ReadTimeoutError(None, "/api/v1", "Read timed out."),
        ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
    ],
)
def test_network_errors_are_retryable_and_name_the_call(monkeypatch, failure):
    api, _ = api_raising(monkeypatch, failure)
    with pytest.raises(KubeRetryableError) as raised:
        api.list_configmaps("kvdev-system", "a=b")
    assert raised.value.status is None
    assert str(raised.value).startswith("list ConfigMaps in kvdev-system (a=b): API server ? ")
    assert "unreachable: " in str(raised.value)
    assert "Retry(" not in str(raised.value)  # the reason, not urllib3's reprs


def test_a_body_that_is_not_json_is_retryable(monkeypatch):
    api, _ = api_raising(monkeypatch, data=b"<html>")
    with pytest.raises(KubeRetryableError, match="get Lease ns/l: API server sent invalid JSON"):
        api.get_lease("ns", "l")


def test_a_write_answered_with_no_object_is_retryable(monkeypatch):
    api, _ = api_raising(monkeypatch, data=b"[]")
    with pytest.raises(KubeRetryableError, match="not an object"):
        api.replace_lease("ns", {"metadata": {"name": "l"}})


@pytest.mark.parametrize(
    ("status", "label"),
    [
        (403, "forbidden"),
        (404, "not_found"),
        (409, "conflict"),
        (422, "invalid"),
        (410, "other"),
        (400, "other"),
        (408, "unavailable"),
        (429, "unavailable"),
        (503, "unavailable"),
        (None, "unavailable"),
    ],
)
def test_the_device_status_reason_follows_the_type(status, label):
    error = answered(WHAT, status, "", None)
    assert isinstance(error, KubeError)
    assert reason(error) == label


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"kind": "Status", "message": "changing status.devices requires"}',
            "changing status.devices requires",
        ),
        (b'{"message": "x"}', "x"),
        ("not json", ""),
        ('["a list"]', ""),
        (b"\xff", ""),
        (None, ""),
    ],
)
def test_the_api_servers_message_is_taken_from_its_status_body(body, message):
    assert status_message(body) == message
