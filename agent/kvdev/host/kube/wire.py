"""``KubeApi``: every call kvdev-host makes to the API server, as raw JSON, errors mapped once.

Lists (paged) and watches (``resourceVersion``, bookmarks, ``timeoutSeconds``) of a
``Collection``; the object verbs: ConfigMaps (get, list, create, replace, delete), Leases (get,
create, replace), core/v1 Events (create, patch), ResourceClaims (get, server-side apply of
``status``) and ResourceSlices (list). Bodies stay raw JSON: kvdev's own models validate them,
never the client's. The object verbs (``send``) go to their path through the client's
``call_api`` (its auth, connection pool and rate limit): the body is encoded once, by its REST
layer's ``json.dumps``, and the answer parsed once, with no model and no per-call validation
in between. Every failure is one of ``kube.errors``'s types. Each call is counted by
verb (``calls``: the measured API calls per reconcile; Event writes under ``event``). The watch
machinery (the chunked stream read line by line, ERROR events as exceptions) is the client's
``kubernetes.watch.Watch``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kvdev.host.kube import client as kubeclient
from kvdev.host.kube.errors import (
    KubeRetryableError,
    NotFoundError,
    answered,
    broken,
    not_json,
    unreachable,
)
from kvdev.host.ratelimit import TokenBucket

APPLY: Final = "application/apply-patch+yaml"  # a server-side apply's content type
JSON: Final = "application/json"
MERGE: Final = "application/strategic-merge-patch+json"  # a core/v1 object's PATCH
_CONFIGMAPS: Final = "/api/v1/namespaces/{namespace}/configmaps"
_EVENTS: Final = "/api/v1/namespaces/{namespace}/events"
_LEASES: Final = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_CLAIMS: Final = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
_NAMED: Final = "/{name}"


@dataclass(frozen=True, slots=True)
class Collection:
    """What a list or a watch reads: ``kind`` (for messages), the client's call and its args."""

    kind: str
    group: str  # "core", "custom" (CustomObjectsApi) or "resource" (resource.k8s.io/v1)
    method: str
    args: Mapping[str, object] = field(default_factory=dict)


def pods(label_selector: str) -> Collection:
    """The Pods of every namespace that ``label_selector`` selects."""
    args = {"label_selector": label_selector}
    return Collection("Pod", "core", "list_pod_for_all_namespaces", args)


def configmaps(label_selector: str, namespace: str | None = None) -> Collection:
    """The ConfigMaps ``label_selector`` selects: in ``namespace``, or in every namespace."""
    if namespace is None:
        args = {"label_selector": label_selector}
        return Collection("ConfigMap", "core", "list_config_map_for_all_namespaces", args)
    args = {"namespace": namespace, "label_selector": label_selector}
    return Collection("ConfigMap", "core", "list_namespaced_config_map", args)


def custom_objects(kind: str, group: str, version: str, plural: str) -> Collection:
    """A custom resource's objects in every namespace."""
    args = {"group": group, "version": version, "plural": plural}
    return Collection(kind, "custom", "list_cluster_custom_object", args)


def resource_claims() -> Collection:
    """The ResourceClaims of every namespace."""
    return Collection("ResourceClaim", "resource", "list_resource_claim_for_all_namespaces")


def resource_slices(field_selector: str = "") -> Collection:
    """The ResourceSlices ``field_selector`` selects (empty: all)."""
    args = {"field_selector": field_selector} if field_selector else {}
    return Collection("ResourceSlice", "resource", "list_resource_slice", args)


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
        ``timeout``: seconds a request may take; ``connections``: at least that many kept open.

        Raises:
            PermanentError: no configuration can be loaded.
        """
        client = kubeclient.api_client(kubeconfig, bucket, connections)
        return cls(client, timeout=timeout, bucket=bucket)

    # ------------------------------------------------------------------ the calls

    def _api(self, group: str) -> Any:  # noqa: ANN401 - the client is untyped
        from kubernetes import client  # noqa: PLC0415 - the host extra, needed only live

        apis = {
            "core": client.CoreV1Api,
            "custom": client.CustomObjectsApi,
            "resource": client.ResourceV1Api,
            "coordination": client.CoordinationV1Api,
        }
        return apis[group](self.client)

    def _count(self, verb: str) -> None:
        with self._lock:
            self.calls[verb] += 1

    def _endpoint(self) -> str:
        host = getattr(getattr(self.client, "configuration", None), "host", "")
        return str(host or "?")

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        """The client's and its transport's failures inside, as ``kube.errors`` maps them."""
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
        from urllib3.exceptions import HTTPError  # noqa: PLC0415 - the client's transport

        try:
            yield
        except ApiException as e:  # the client's own (an SSL failure is its status 0)
            raise answered(what, e.status, e.reason, e.body) from e
        except (HTTPError, OSError) as e:
            raise unreachable(what, self._endpoint(), e) from e

    def call(self, verb: str, what: str, group: str, method: str, /, **kwargs: object) -> Any:  # noqa: ANN401 - JSON
        """One API call's JSON body (None for an empty one), failures mapped by ``kube.errors``."""
        self._count(verb)
        send = getattr(self._api(group), method)
        with self._mapped(what):
            response = send(**kwargs, _preload_content=False, _request_timeout=self.timeout)
            body = response.data
        return _parsed(what, body)

    def send(  # noqa: PLR0913 - an HTTP request's parts
        self,
        verb: str,
        what: str,
        method: str,
        path: str,
        params: Mapping[str, str],
        /,
        *,
        body: Mapping[str, Any] | None = None,
        query: tuple[tuple[str, str], ...] = (),
        content_type: str = JSON,
    ) -> Any:  # noqa: ANN401 - JSON
        """One object call's JSON body (None for an empty one), failures mapped as ``call``'s.

        ``path``: the API path, ``{namespace}`` and ``{name}`` filled from ``params`` (quoted by
        the client); ``body``: sent as ``content_type``, encoded once by the client's REST layer.
        """
        self._count(verb)
        headers = (
            {"Accept": JSON} if body is None else {"Accept": JSON, "Content-Type": content_type}
        )
        with self._mapped(what):
            _, url, headers, _, _ = self.client.param_serialize(
                method,
                path,
                path_params=dict(params),
                query_params=list(query),
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            response = self.client.call_api(
                method,
                url,
                headers,
                None if body is None else dict(body),
                _request_timeout=self.timeout,
            )
            data = response.read()
        if not 200 <= response.status <= 299:
            raise answered(what, response.status, response.reason, data)
        return _parsed(what, data)

    # ------------------------------------------------------------------ list + watch

    def list_page(self, collection: Collection, *, limit: int, token: str | None) -> Page:
        """One page of ``collection`` (``token``: the previous page's ``continue``)."""
        extra: dict[str, Any] = {"limit": limit}
        if token:
            extra["_continue"] = token
        what = f"list {collection.kind}"
        data = self.call(
            "list", what, collection.group, collection.method, **collection.args, **extra
        )
        if not isinstance(data, dict) or not isinstance(data.get("items", []), list):
            raise KubeRetryableError(f"{what}: the API server sent no list", what=what)
        meta = data.get("metadata") or {}
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        return Page(items, str(meta.get("resourceVersion") or ""), meta.get("continue") or None)

    def list_all(self, collection: Collection, *, limit: int) -> list[dict[str, Any]]:
        """Every item of ``collection``, page after page."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.list_page(collection, limit=limit, token=token)
            items.extend(page.items)
            token = page.token
            if token is None:
                return items

    def watch(
        self, collection: Collection, resource_version: str, timeout_seconds: int
    ) -> Watching:
        """Watch events after ``resource_version`` (bookmarks asked for), raw JSON each.

        The iterator raises ``GoneError`` on 410 Gone, and the errors of ``call``.
        """
        from kubernetes import watch  # noqa: PLC0415
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
        from urllib3.exceptions import HTTPError  # noqa: PLC0415

        method = getattr(self._api(collection.group), collection.method)
        watches: Any = watch  # untyped
        stream = watches.Watch()
        what = f"watch {collection.kind}"

        def listing(**kwargs: object) -> Any:  # noqa: ANN401 - the client's response
            # No docstring and no annotation the client reads: it then parses each line as
            # JSON and leaves the object raw (``deserialize=False`` would lose ERROR events'
            # status: the client looks for ``raw_object``, which that path never sets).
            return method(**collection.args, **kwargs)

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
                raise answered(what, e.status, e.reason, e.body) from e
            except (HTTPError, OSError) as e:
                raise broken(what, e) from e
            except ValueError as e:  # a line that is not JSON
                raise not_json(what, e) from e

        return Watching(events(), stream.stop)

    # ------------------------------------------------------------------ ConfigMaps

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap's JSON, or None when there is none."""
        return self._get(f"get ConfigMap {namespace}/{name}", _CONFIGMAPS, namespace, name)

    def _get(self, what: str, path: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A read's object; None when the API server has none (``NotFoundError``)."""
        try:
            data = self.send("get", what, "GET", path + _NAMED, _names(namespace, name))
        except NotFoundError:
            return None
        return data if isinstance(data, dict) else None

    def list_configmaps(
        self, namespace: str, selector: str, fields: str = ""
    ) -> list[dict[str, Any]]:
        """The ConfigMaps of ``namespace`` that ``selector`` (and ``fields``) select."""
        found = self.call(
            "list",
            f"list ConfigMaps in {namespace} ({selector or fields})",
            "core",
            "list_namespaced_config_map",
            namespace=namespace,
            label_selector=selector,
            field_selector=fields,
        )
        items = found.get("items") if isinstance(found, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST the ConfigMap; its stored JSON (``ConflictError``: it exists)."""
        return self._create("ConfigMap", _CONFIGMAPS, namespace, body)

    def replace_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the ConfigMap (its ``resourceVersion`` makes a stale write a ``ConflictError``)."""
        return self._replace("ConfigMap", _CONFIGMAPS, namespace, body)

    def delete_configmap(self, namespace: str, name: str) -> None:
        """DELETE the ConfigMap (``NotFoundError``: it was gone already)."""
        what = f"delete ConfigMap {namespace}/{name}"
        self.send("delete", what, "DELETE", _CONFIGMAPS + _NAMED, _names(namespace, name))

    # ------------------------------------------------------------------ Leases

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease's JSON, or None when there is none."""
        return self._get(f"get Lease {namespace}/{name}", _LEASES, namespace, name)

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST the Lease."""
        return self._create("Lease", _LEASES, namespace, body)

    def replace_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the Lease (a stale ``resourceVersion`` is a ``ConflictError``)."""
        return self._replace("Lease", _LEASES, namespace, body)

    def _create(
        self, kind: str, path: str, namespace: str, body: Mapping[str, Any], verb: str = "create"
    ) -> dict[str, Any]:
        """POST ``body``; the stored object."""
        what = f"create {kind} {namespace}/{body['metadata']['name']}"
        made = self.send(verb, what, "POST", path, {"namespace": namespace}, body=body)
        return _object(what, made)

    def _replace(
        self, kind: str, path: str, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT ``body`` (its ``resourceVersion`` makes a stale write a ``ConflictError``)."""
        name = body["metadata"]["name"]
        what = f"update {kind} {namespace}/{name}"
        names = _names(namespace, name)
        stored = self.send("update", what, "PUT", path + _NAMED, names, body=body)
        return _object(what, stored)

    # ------------------------------------------------------------------ Events

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a core/v1 Event."""
        return self._create("Event", _EVENTS, namespace, body, verb="event")

    def patch_event(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PATCH (strategic merge) a core/v1 Event: its count and last time."""
        what = f"patch Event {namespace}/{name}"
        names = _names(namespace, name)
        stored = self.send(
            "event", what, "PATCH", _EVENTS + _NAMED, names, body=body, content_type=MERGE
        )
        return _object(what, stored)

    # ------------------------------------------------------------------ DRA objects

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim's JSON (``NotFoundError``: there is none)."""
        what = f"get ResourceClaim {namespace}/{name}"
        got = self.send("get", what, "GET", _CLAIMS + _NAMED, _names(namespace, name))
        return _object(what, got)

    def apply_resource_claim_status(
        self, namespace: str, name: str, body: Mapping[str, Any], *, manager: str
    ) -> None:
        """Server-side apply ``body`` to the claim's ``status``, as ``manager``, forced."""
        what = f"apply ResourceClaim {namespace}/{name} status as {manager}"
        self.send(
            "apply",
            what,
            "PATCH",
            _CLAIMS + _NAMED + "/status",
            _names(namespace, name),
            body=body,
            query=(("fieldManager", manager), ("force", "true")),
            content_type=APPLY,
        )


def _names(namespace: str, name: str) -> dict[str, str]:
    return {"namespace": namespace, "name": name}


def _parsed(what: str, body: bytes | None) -> Any:  # noqa: ANN401 - JSON
    """An answer's JSON (None for an empty body)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise not_json(what, e) from e


def _object(what: str, data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        msg = f"{what}: API server sent {type(data).__name__}, not an object"
        raise KubeRetryableError(msg, what=what)
    return data
