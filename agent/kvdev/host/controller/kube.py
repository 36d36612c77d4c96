"""The controller's calls to the Kubernetes API, through the official ``kubernetes`` client.

Owns: building the client (in-cluster service account, a kubeconfig file, or the default
kubeconfig), the six watched resources (list with paging, watch with ``resourceVersion``,
``allowWatchBookmarks`` and ``timeoutSeconds``), ConfigMap GET/POST/PUT, Lease GET/POST/PUT
and core/v1 Event POST/PATCH, all as raw JSON (kvdev's own models validate it, never the
client's), and the one map from what the API server answers to kvdev's errors:

* 409 (AlreadyExists on create, Conflict on a stale ``resourceVersion``) and 404 on a write:
  ``ConflictError`` (re-read, decide again);
* 410 Gone, on a list's ``continue`` or as a watch's ERROR event: ``ExpiredError`` (re-list);
* 408, 429, 5xx, a connection error, invalid JSON: ``RetryableError``;
* any other 4xx (401, 403: RBAC): ``PermanentError``, naming the call.

Counts every call by verb (``calls``), for the measured API calls per reconcile (Event writes
under ``event``, apart from the ConfigMap's). The watch
machinery (reading the chunked stream line by line, ERROR events as exceptions) is the
client's ``kubernetes.watch.Watch``; what to do with the events is ``reflector``'s.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kvdev.errors import PermanentError, RetryableError
from kvdev.host import kubeclient
from kvdev.host.controller.index import Kind
from kvdev.host.controller.render import MANAGED_BY, MANAGER
from kvdev.host.k8s.kubevirt import GROUP, PLURAL
from kvdev.host.publish.relayed import RELAY_MANAGER
from kvdev.host.ratelimit import TokenBucket

_CONFLICT: Final = 409
_GONE: Final = 410
_NOT_FOUND: Final = 404
_RETRYABLE_CLIENT_ERRORS: Final = (408, 429)
LAUNCHER_SELECTOR: Final = "kubevirt.io=virt-launcher"
OWN_SELECTOR: Final = f"{MANAGED_BY}={MANAGER}"  # the controller's own ConfigMaps, anywhere
RELAY_SELECTOR: Final = f"{MANAGED_BY}={RELAY_MANAGER}"  # records: in the relay's namespace only


class ConflictError(RetryableError):
    """A write lost a race (409, or 404 on an update): read the object again and decide again."""


class ExpiredError(RetryableError):
    """The resourceVersion or continue token is too old (410 Gone): list again."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: its items, the list's resourceVersion and the next page's token."""

    items: list[dict[str, Any]]
    resource_version: str
    token: str | None


@dataclass
class Watching:
    """An open watch; ``stop()`` (from any thread) ends the stream."""

    events: Iterator[dict[str, Any]]
    stop: Callable[[], None]


@dataclass
class KubeApi:
    """Raw-JSON calls on one ``kubernetes.client.ApiClient``."""

    client: Any  # kubernetes.client.ApiClient: the client is untyped
    timeout: float = 30.0
    bucket: TokenBucket | None = None  # the client-side rate limit its requests wait on
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def connect(
        cls,
        kubeconfig: Path | None = None,
        bucket: TokenBucket | None = None,
        timeout: float = 30.0,
        connections: int | None = None,
    ) -> KubeApi:
        """A client for the in-cluster service account, ``kubeconfig``, or the default one.

        With ``bucket``, every request waits for its token (the client-side rate limit);
        ``timeout``: seconds a request may take; ``connections``: at least that many kept open
        (one per watch, worker and the Event sender: none opened and dropped per request).

        Raises:
            PermanentError: no configuration can be loaded.
        """
        client = kubeclient.api_client(kubeconfig, bucket, connections)
        return cls(client, timeout=timeout, bucket=bucket)

    # ------------------------------------------------------------------ the APIs

    def _core(self) -> Any:  # noqa: ANN401 - the client is untyped
        from kubernetes import client  # noqa: PLC0415

        return client.CoreV1Api(self.client)

    def _list_call(
        self, kind: Kind, namespace: str | None = None
    ) -> tuple[Callable[..., Any], dict[str, Any]]:
        from kubernetes import client  # noqa: PLC0415

        if kind is Kind.RECORD:  # never across namespaces: a tenant's ConfigMaps are not seen
            if not namespace:
                raise PermanentError("relay records are listed in the relay's namespace only")
            args = {"namespace": namespace, "label_selector": RELAY_SELECTOR}
            return self._core().list_namespaced_config_map, args

        if kind is Kind.VMI:
            api = client.CustomObjectsApi(self.client)
            args = {"group": GROUP, "version": "v1", "plural": PLURAL}
            return api.list_cluster_custom_object, args
        if kind is Kind.POD:
            return self._core().list_pod_for_all_namespaces, {"label_selector": LAUNCHER_SELECTOR}
        if kind is Kind.CONFIGMAP:
            call = self._core().list_config_map_for_all_namespaces
            return call, {"label_selector": OWN_SELECTOR}
        resource = client.ResourceV1Api(self.client)
        if kind is Kind.CLAIM:
            return resource.list_resource_claim_for_all_namespaces, {}
        return resource.list_resource_slice, {}

    def _count(self, verb: str) -> None:
        with self._lock:
            self.calls[verb] += 1

    def call(self, verb: str, what: str, method: Callable[..., Any], **kwargs: object) -> Any:  # noqa: ANN401 - JSON
        """One API call's JSON body, with the API server's answer mapped to kvdev's errors."""
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
        from urllib3.exceptions import HTTPError  # noqa: PLC0415 - the client's transport

        self._count(verb)
        try:
            response = method(**kwargs, _preload_content=False, _request_timeout=self.timeout)
            body = response.data
        except ApiException as e:
            raise api_error(what, e.status, e.reason, e.body) from e
        except (HTTPError, OSError) as e:
            raise RetryableError(f"{what}: {self._unreachable(e)}") from e
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise RetryableError(f"{what}: API server sent invalid JSON: {e}") from e

    def _unreachable(self, error: BaseException) -> str:
        host = getattr(getattr(self.client, "configuration", None), "host", "")
        return kubeclient.unreachable(str(host or "?"), error)

    # ------------------------------------------------------------------ list + watch

    def list_page(
        self, kind: Kind, *, limit: int, token: str | None, namespace: str | None = None
    ) -> Page:
        """One page of the resource's list (``token``: the previous page's ``continue``).

        ``namespace``: the one namespace of a namespaced listing (``Kind.RECORD``).
        """
        method, args = self._list_call(kind, namespace)
        extra: dict[str, Any] = {"limit": limit}
        if token:
            extra["_continue"] = token
        data = self.call("list", f"list {kind.kind}", method, **args, **extra)
        if not isinstance(data, dict) or not isinstance(data.get("items", []), list):
            raise RetryableError(f"list {kind.kind}: the API server sent no list")
        meta = data.get("metadata") or {}
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        return Page(items, str(meta.get("resourceVersion") or ""), meta.get("continue") or None)

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
    ) -> Watching:
        """Watch events after ``resource_version`` (bookmarks asked for), raw JSON each.

        The iterator raises ``ExpiredError`` on 410 Gone, and the errors of ``call``.
        """
        from kubernetes import watch  # noqa: PLC0415
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
        from urllib3.exceptions import HTTPError  # noqa: PLC0415

        method, args = self._list_call(kind, namespace)
        watches: Any = watch  # untyped
        stream = watches.Watch()
        what = f"watch {kind.kind}"

        def listing(**kwargs: object) -> Any:  # noqa: ANN401 - the client's response
            # No docstring and no annotation the client reads: it then parses each line as
            # JSON and leaves the object raw (``deserialize=False`` would lose ERROR events'
            # status: the client looks for ``raw_object``, which that path never sets).
            return method(**args, **kwargs)

        def events() -> Iterator[dict[str, Any]]:
            self._count("watch")
            try:
                for event in stream.stream(
                    listing,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout_seconds,
                    _request_timeout=(self.timeout, timeout_seconds + self.timeout),
                ):
                    if isinstance(event, dict):
                        yield {"type": event.get("type"), "object": event.get("raw_object")}
            except ApiException as e:
                raise api_error(what, e.status, e.reason, e.body) from e
            except (HTTPError, OSError) as e:
                reason = kubeclient.short_reason(e)
                raise RetryableError(f"{what}: the stream broke: {reason}") from e
            except ValueError as e:  # a line that is not JSON
                raise RetryableError(f"{what}: the API server sent invalid JSON: {e}") from e

        return Watching(events(), stream.stop)

    # ------------------------------------------------------------------ objects

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap's JSON, or None when there is none."""
        what = f"get ConfigMap {namespace}/{name}"
        try:
            data = self.call(
                "get", what, self._core().read_namespaced_config_map, name=name, namespace=namespace
            )
        except ConflictError:  # a 404 on a read: simply not there
            return None
        return data if isinstance(data, dict) else None

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST the ConfigMap; its stored JSON."""
        name = body["metadata"]["name"]
        what = f"create ConfigMap {namespace}/{name}"
        method = self._core().create_namespaced_config_map
        return _object(self.call("create", what, method, namespace=namespace, body=dict(body)))

    def replace_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the ConfigMap (its ``resourceVersion`` makes a stale write a 409)."""
        name = body["metadata"]["name"]
        what = f"update ConfigMap {namespace}/{name}"
        method = self._core().replace_namespaced_config_map
        return _object(
            self.call("update", what, method, name=name, namespace=namespace, body=dict(body))
        )

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a core/v1 Event."""
        what = f"create Event {namespace}/{body['metadata']['name']}"
        method = self._core().create_namespaced_event
        return _object(self.call("event", what, method, namespace=namespace, body=dict(body)))

    def patch_event(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PATCH (strategic merge) a core/v1 Event: its count and last time."""
        what = f"patch Event {namespace}/{name}"
        method = self._core().patch_namespaced_event
        return _object(
            self.call("event", what, method, name=name, namespace=namespace, body=dict(body))
        )

    def _coordination(self) -> Any:  # noqa: ANN401 - the client is untyped
        from kubernetes import client  # noqa: PLC0415

        return client.CoordinationV1Api(self.client)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease's JSON, or None when there is none."""
        method = self._coordination().read_namespaced_lease
        try:
            data = self.call(
                "get", f"get Lease {namespace}/{name}", method, name=name, namespace=namespace
            )
        except ConflictError:
            return None
        return data if isinstance(data, dict) else None

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST the Lease."""
        method = self._coordination().create_namespaced_lease
        what = f"create Lease {namespace}/{body['metadata']['name']}"
        return _object(self.call("create", what, method, namespace=namespace, body=dict(body)))

    def replace_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the Lease (a stale ``resourceVersion`` is a 409)."""
        name = body["metadata"]["name"]
        method = self._coordination().replace_namespaced_lease
        what = f"update Lease {namespace}/{name}"
        return _object(
            self.call("update", what, method, name=name, namespace=namespace, body=dict(body))
        )


def api_error(
    what: str, status: int | None, reason: str | None, body: object
) -> RetryableError | PermanentError:
    """The kvdev error for an API server answer ``status`` to ``what``."""
    detail = reason or ""
    if isinstance(body, bytes | str):
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            detail = f"{detail}: {message}" if detail else str(message)
    text = f"{what}: API server answered {status} {detail}".rstrip()
    if status in (_CONFLICT, _NOT_FOUND):
        return ConflictError(text)
    if status == _GONE:
        return ExpiredError(text)
    if status is not None and 400 <= status < 500 and status not in _RETRYABLE_CLIENT_ERRORS:
        return PermanentError(text)
    return RetryableError(text)


def _object(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RetryableError("the API server answered a write with no object")
    return data
