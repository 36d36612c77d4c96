"""kube.errors: every API answer and transport failure maps to one typed error, once.

The answers and urllib3's exceptions come from a stand-in for the client's REST layer, under
the client's own code: no server is needed.
"""

from __future__ import annotations

import errno
import io
import json

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse
from urllib3 import HTTPResponse
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


class Rest:
    """The client's REST layer: each request raises what it is given, or answers with a status.

    It stands in for ``rest_client.request``, the one call both of ``KubeApi``'s paths (the
    client's API methods, and ``send``) go through: the client's own code runs above it.
    """

    def __init__(self, raised=None, data=b"{}", status=200):
        self.raised, self.data, self.status, self.sent = raised, data, status, []

    def request(self, method, url, headers=None, body=None, **_):
        self.sent.append((method, url, headers, body))
        if self.raised is not None:
            raise self.raised
        answer = HTTPResponse(
            body=io.BytesIO(self.data), status=self.status, reason=REASONS.get(self.status, "OK")
        )
        return RESTResponse(answer)


REASONS = {404: "NotFound", 409: "Conflict"}


def api_raising(monkeypatch, raised=None, data=b"{}", status=200):
    rest = Rest(raised, data, status)
    client = ApiClient(Configuration(host="https://api.test:6443"))
    monkeypatch.setattr(client.rest_client, "request", rest.request)
    return KubeApi(client=client), rest


def refusal(status):
    return {"status": status, "data": status_body(status, 'configmaps "x" not found').encode()}


def test_a_404_on_delete_is_not_found_naming_the_object(monkeypatch):
    api, rest = api_raising(monkeypatch, **refusal(404))
    with pytest.raises(NotFoundError) as raised:
        api.delete_configmap("kvdev-system", "x")
    assert raised.value.status == 404
    assert raised.value.what == "delete ConfigMap kvdev-system/x"
    assert str(raised.value).endswith('answered 404 NotFound: configmaps "x" not found')
    method, url, _, body = rest.sent[0]
    assert (method, url, body) == (
        "DELETE",
        "https://api.test:6443/api/v1/namespaces/kvdev-system/configmaps/x",
        None,
    )
    assert api.calls["delete"] == 1


def test_a_404_on_a_read_is_no_object(monkeypatch):
    api, _ = api_raising(monkeypatch, **refusal(404))
    assert api.get_configmap("vms", "x") is None
    assert api.get_lease("kvdev-system", "x") is None


def test_a_409_on_create_is_a_conflict(monkeypatch):
    api, rest = api_raising(monkeypatch, **refusal(409))
    body = {"metadata": {"name": "x"}, "data": {"a": "b"}}
    with pytest.raises(ConflictError, match=r"create ConfigMap vms/x: API server answered 409"):
        api.create_configmap("vms", body)
    method, url, headers, sent = rest.sent[0]
    assert (method, url) == ("POST", "https://api.test:6443/api/v1/namespaces/vms/configmaps")
    assert (sent, headers["Content-Type"]) == (body, "application/json")


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
    calls = {  # through the client's API methods, and through ``send``
        "list ConfigMaps in kvdev-system (a=b)": lambda: api.list_configmaps("kvdev-system", "a=b"),
        "update ConfigMap vms/x": lambda: api.replace_configmap("vms", {"metadata": {"name": "x"}}),
    }
    for what, call in calls.items():
        with pytest.raises(KubeRetryableError) as raised:
            call()
        assert raised.value.status is None
        assert str(raised.value).startswith(f"{what}: API server https://api.test:6443 ")
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


def test_a_refused_list_maps_like_a_refused_write(monkeypatch):
    api, _ = api_raising(monkeypatch, **refusal(409) | {"status": 503})
    with pytest.raises(KubeRetryableError, match=r"list ConfigMaps in vms \(a=b\): .* 503"):
        api.list_configmaps("vms", "a=b")


def test_a_patch_and_an_apply_say_what_their_body_is(monkeypatch):
    api, rest = api_raising(monkeypatch, data=b'{"kind": "Event"}')
    api.patch_event("vms", "e.1", {"count": 2})
    api.apply_resource_claim_status("vms", "c", {"status": {}}, manager="kvdev")
    (patch, purl, pheaders, pbody), (apply, aurl, aheaders, abody) = rest.sent
    assert (patch, pbody) == ("PATCH", {"count": 2})
    assert purl == "https://api.test:6443/api/v1/namespaces/vms/events/e.1"
    assert pheaders["Content-Type"] == "application/strategic-merge-patch+json"
    assert (apply, abody) == ("PATCH", {"status": {}})
    assert aurl == (
        "https://api.test:6443/apis/resource.k8s.io/v1/namespaces/vms/resourceclaims/c/status"
        "?fieldManager=kvdev&force=true"
    )
    assert aheaders["Content-Type"] == "application/apply-patch+yaml"
    assert (api.calls["event"], api.calls["apply"]) == (1, 1)
