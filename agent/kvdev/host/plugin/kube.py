"""``KubeClaimSource``: fetch a claim and the driver's ResourceSlices from the Kubernetes API.

Built on the official ``kubernetes`` client (host extra): GET the ResourceClaim by
namespace/name, LIST the driver's ResourceSlices (paged). Given the node's name (``--node-name``,
``$NODE_NAME`` from the Downward API), only those this node can see: two lists,
``spec.driver=<driver>,spec.nodeName=<node>`` (the node's own slices) and
``spec.driver=<driver>,spec.nodeName=`` (slices with no node name: network-attached and
per-device pools), never the other nodes' slices. Without it, every slice of the driver.
The raw JSON is validated by kvdev's own models (``kvdev.host.k8s``), never by the client's.
The client is built on first use, so constructing the source needs no cluster. This module
must not write files; it only reads from the API server (``claimstatus`` writes a claim's
device status, through the client ``resource_api`` gives it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from kvdev.errors import PermanentError, Problem, RetryableError, SchemaError
from kvdev.host import kubeclient
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.k8s.model import problems_from
from kvdev.host.k8s.resource import API_VERSION
from kvdev.host.plugin.claimsource import ClaimNotFoundError, Fetched
from kvdev.host.ratelimit import TokenBucket

PAGE_SIZE = 500
_NOT_FOUND = 404
_CLIENT_ERRORS = range(400, 500)
_RETRYABLE_CLIENT_ERRORS = (408, 429)
_M = TypeVar("_M", ResourceClaim, ResourceSlice)


class KubeClaimSource:
    """Claims and slices from the API server (in-cluster config, or a kubeconfig file).

    Args:
        driver: the plugin's driver name; only its slices are listed.
        node: this node's name; only the slices it can see are listed (None: all).
        kubeconfig: a kubeconfig file; None: the in-cluster service account, falling back
            to the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
        timeout: seconds for each API request.
        bucket: a client-side rate limit every request waits on (None: none).
    """

    def __init__(
        self,
        driver: str,
        *,
        node: str | None = None,
        kubeconfig: Path | None = None,
        timeout: float = 10.0,
        bucket: TokenBucket | None = None,
    ) -> None:
        self.driver = driver
        self.bucket = bucket
        self.node = node
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self._lock = threading.Lock()
        self._api: Any = None

    def fetch(self, namespace: str, name: str) -> Fetched:
        """See ``kvdev.host.plugin.claimsource.ClaimSource.fetch``."""
        what = f"ResourceClaim {namespace}/{name}"
        api = self.resource_api()
        raw = self._call(
            what, api.read_namespaced_resource_claim, name, namespace, missing_is_gone=True
        )
        claim = _validate(ResourceClaim, "ResourceClaim", raw, f"apiserver: {what}")
        driver = f"spec.driver={self.driver}"
        if self.node is None:
            return Fetched(claim, tuple(self._slices(api, driver)))
        own = self._slices(api, f"{driver},spec.nodeName={self.node}")
        return Fetched(claim, (*own, *self._slices(api, f"{driver},spec.nodeName=")))

    def _slices(self, api: Any, selector: str) -> list[ResourceSlice]:  # noqa: ANN401 - see resource_api
        slices: list[ResourceSlice] = []
        token: str | None = None
        while True:
            page = self._call(
                f"ResourceSlices of {self.driver} ({selector})",
                api.list_resource_slice,
                field_selector=selector,
                limit=PAGE_SIZE,
                _continue=token,
            )
            items = page.get("items") or []
            source = f"apiserver: ResourceSlices of {self.driver}"
            slices.extend(_validate(ResourceSlice, "ResourceSlice", i, source) for i in items)
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return slices

    def _call(
        self,
        what: str,
        method: Callable[..., Any],
        *args: object,
        missing_is_gone: bool = False,
        **kwargs: object,
    ) -> dict[str, Any]:
        """One API call's JSON body.

        A 404 means the object is gone only when ``missing_is_gone``; on a list it means the
        API itself is not served (resource.k8s.io/v1 is off).
        """
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - lazy import
        from urllib3.exceptions import HTTPError  # noqa: PLC0415 - the client's transport

        try:
            response = method(
                *args, **kwargs, _preload_content=False, _request_timeout=self.timeout
            )
            body = response.data
        except ApiException as e:
            if e.status == _NOT_FOUND and missing_is_gone:
                raise ClaimNotFoundError(f"{what} not found on the API server") from e
            if e.status == _NOT_FOUND:
                message = f"{what}: API server answered 404: is resource.k8s.io/v1 served?"
                raise PermanentError(message) from e
            message = f"{what}: API server answered {e.status} {e.reason}"
            if e.status in _CLIENT_ERRORS and e.status not in _RETRYABLE_CLIENT_ERRORS:
                raise PermanentError(message) from e
            raise RetryableError(message) from e
        except (HTTPError, OSError) as e:
            host = getattr(getattr(self._api, "api_client", None), "configuration", None)
            where = str(getattr(host, "host", "") or "?")
            raise RetryableError(f"{what}: {kubeclient.unreachable(where, e)}") from e
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise RetryableError(f"{what}: API server sent invalid JSON: {e}") from e
        if not isinstance(data, dict):
            raise RetryableError(f"{what}: API server sent {type(data).__name__}, not an object")
        return data

    def resource_api(self) -> Any:  # noqa: ANN401 - used untyped: we read raw responses
        """The ``ResourceV1Api``, built on first use and shared (thread-safe)."""
        with self._lock:
            if self._api is None:
                self._api = self._build()
            return self._api

    def _build(self) -> Any:  # noqa: ANN401 - see resource_api
        from kubernetes import client  # noqa: PLC0415 - needs the host extra only here

        return client.ResourceV1Api(kubeclient.api_client(self.kubeconfig, self.bucket))


def _validate(model: type[_M], kind: str, raw: dict[str, Any], source: str) -> _M:
    # List items come without apiVersion and kind; a GET carries them.
    value = {"apiVersion": API_VERSION, "kind": kind, **raw}
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as e:
        name = (raw.get("metadata") or {}).get("name", "?")
        raise SchemaError(
            [
                Problem(f"{kind}/{name}: {p.message}", p.source, None, p.path)
                for p in problems_from(e, source=source, index=None)
            ]
        ) from e
