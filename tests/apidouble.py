"""A local Kubernetes API server double that speaks real list/watch semantics (a test fake).

``ApiDouble`` serves, on 127.0.0.1, the paths the controller (and the ``kubernetes`` client
it uses) calls: ``/api/v1/...`` (pods, configmaps), ``/apis/resource.k8s.io/v1/...``
(resourceclaims, resourceslices), ``/apis/kubevirt.io/v1/...`` (virtualmachineinstances) and
``/apis/coordination.k8s.io/v1/...`` (leases), cluster-wide and per namespace. Behaviour the
controller depends on, as the real API server has it:

* one cluster-wide ``resourceVersion`` counter, bumped by every write; lists carry it in
  ``metadata.resourceVersion``; list items come without apiVersion/kind for built-in kinds
  (with them for the custom resource), as the real server encodes them;
* ``limit`` + ``continue`` paging; a ``continue`` token older than the compaction point is
  410 Gone (``reason: Expired``);
* ``watch=true``: an HTTP/1.1 chunked stream of JSON lines, one event each (ADDED,
  MODIFIED, DELETED) for every change after the given ``resourceVersion``, replayed from a
  history; ``resourceVersion`` older than the compaction point: HTTP 200 with one ERROR event
  (a v1 Status, code 410, reason Expired) and the end of the stream, as the real server does;
  ``allowWatchBookmarks``: BOOKMARK events (only ``metadata.resourceVersion``) every
  ``bookmark_seconds``; ``timeoutSeconds`` ends the stream; ``labelSelector`` (``k=v``,
  comma-separated) filters lists and watches, and an object that stops matching is DELETED
  for that watch;
* POST (create: uid, resourceVersion, creationTimestamp set; 409 AlreadyExists), PUT
  (replace: 409 Conflict when ``metadata.resourceVersion`` is not the stored one; 404 when
  absent), GET, DELETE; ``metadata.ownerReferences`` are stored as given.

What the test drives directly (as another client would): ``put``, ``delete``, ``compact``
(forget the history: older resourceVersions become 410), ``fail`` (answer the next matching
requests with a status, e.g. a 409 or a 500), ``close_watches`` (end every open stream, as an
API server restart would). ``requests`` records every request (method, path, query).

Limits (what it does not do): no authentication or authorization (RBAC is not checked);
no admission, defaulting or validation of objects (it stores what it is sent); no garbage
collection (deleting a VMI leaves its ConfigMap: tests check the ownerReference instead); no
field selectors, set-based label selectors, ``resourceVersionMatch``, server-side apply,
PATCH, subresources, protobuf or watch-list streaming; lists are always the latest state
(a ``resourceVersion`` on a list is ignored) and a continued list reads the current objects,
not a consistent snapshot; the history is unbounded until ``compact``; one process, objects
in memory. Test-only: it lives under tests/, outside the package.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

_RESOURCES: Final[Mapping[str, tuple[str, str, bool]]] = {
    # plural -> (apiVersion, kind, namespaced)
    "pods": ("v1", "Pod", True),
    "configmaps": ("v1", "ConfigMap", True),
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim", True),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice", False),
    "virtualmachineinstances": ("kubevirt.io/v1", "VirtualMachineInstance", True),
    "leases": ("coordination.k8s.io/v1", "Lease", True),
}
_CUSTOM: Final = frozenset({"virtualmachineinstances"})
_PLURALS: Final = {(v[0], v[1]): k for k, v in _RESOURCES.items()}


@dataclass(frozen=True, slots=True)
class Request:
    """One request the double answered."""

    method: str
    path: str
    query: dict[str, str]


@dataclass
class _Failure:
    method: str
    path_part: str
    status: int
    count: int


@dataclass
class _Event:
    version: int
    plural: str
    type: str
    old: dict[str, Any] | None
    new: dict[str, Any]


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A v1 Status, as the API server answers errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class ApiDouble:
    """The double; ``start()`` it, point a kubeconfig at ``url``, ``stop()`` it."""

    bookmark_seconds: float = 0.2
    version: int = 100
    requests: list[Request] = field(default_factory=list)
    _objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    _history: list[_Event] = field(default_factory=list)
    _compacted: int = 0
    _failures: list[_Failure] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _epoch: int = 0  # bumped by close_watches
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _closing: bool = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        """Serve on an ephemeral 127.0.0.1 port; the base URL."""
        double = self

        class Handler(_Handler):
            api = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        """End every stream and stop serving."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ------------------------------------------------------------------ test side

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj`` as another client would (no version check)."""
        plural = _PLURALS[(obj["apiVersion"], obj["kind"])]
        with self._cond:
            return self._store(plural, copy.deepcopy(dict(obj)))

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete an object as another client would; False if there was none."""
        plural = _PLURALS[(api_version, kind)]
        with self._cond:
            return self._remove(plural, namespace, name) is not None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object (a copy)."""
        plural = _PLURALS[(api_version, kind)]
        with self._cond:
            found = self._objects.get(plural, {}).get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def compact(self) -> int:
        """Forget the history up to now: older resourceVersions are 410 Gone from now on."""
        with self._cond:
            self._compacted = self.version
            self._history.clear()
            return self._compacted

    def fail(self, method: str, path_part: str, status: int, count: int = 1) -> None:
        """Answer the next ``count`` ``method`` requests whose path contains ``path_part``."""
        with self._cond:
            self._failures.append(_Failure(method, path_part, status, count))

    def close_watches(self) -> None:
        """End every open watch stream (as a restarting API server would)."""
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()

    def count(self, method: str, path_part: str = "", *, watch: bool | None = None) -> int:
        """How many ``method`` requests had ``path_part`` in their path."""
        with self._cond:
            return sum(
                1
                for r in self.requests
                if r.method == method
                and path_part in r.path
                and (watch is None or (r.query.get("watch") == "true") is watch)
            )

    # ------------------------------------------------------------------ the store

    def _store(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        namespace = meta.get("namespace", "") if _RESOURCES[plural][2] else ""
        key = (namespace, meta["name"])
        objects = self._objects.setdefault(plural, {})
        old = objects.get(key)
        self.version += 1
        if old is None:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", "2026-11-30T03:00:00Z")
        else:
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
        meta["resourceVersion"] = str(self.version)
        obj["apiVersion"], obj["kind"] = _RESOURCES[plural][:2]
        objects[key] = obj
        event = "ADDED" if old is None else "MODIFIED"
        self._history.append(_Event(self.version, plural, event, old, copy.deepcopy(obj)))
        self._cond.notify_all()
        return copy.deepcopy(obj)

    def _remove(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        old = self._objects.get(plural, {}).pop((namespace, name), None)
        if old is None:
            return None
        self.version += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.version)
        self._history.append(_Event(self.version, plural, "DELETED", old, gone))
        self._cond.notify_all()
        return gone

    def _failure(self, method: str, path: str) -> int | None:
        with self._cond:
            for failure in self._failures:
                if failure.method == method and failure.path_part in path and failure.count > 0:
                    failure.count -= 1
                    return failure.status
        return None


def _matches(
    obj: Mapping[str, Any] | None, namespace: str, selector: dict[str, frozenset[str]]
) -> bool:
    if obj is None:
        return False
    meta = obj.get("metadata") or {}
    if namespace and meta.get("namespace") != namespace:
        return False
    labels = meta.get("labels") or {}
    return all(labels.get(k) in v for k, v in selector.items())


def _seen_as(event: _Event, namespace: str, selector: dict[str, frozenset[str]]) -> str | None:
    """The event a watch with this namespace and selector sees, if any."""
    was = _matches(event.old, namespace, selector)
    if event.type == "DELETED" or not _matches(event.new, namespace, selector):
        return "DELETED" if was else None
    return "MODIFIED" if was else "ADDED"


_TERM = re.compile(r"\s*([^,=\s]+)\s*(?:=\s*([^,]*)|\s+in\s*\(([^)]*)\))\s*(?:,|\Z)")


def _selector(text: str) -> dict[str, frozenset[str]]:
    """``k=v`` and ``k in (a,b)`` terms, comma-separated (what the controller and relay send)."""
    out = {}
    for m in _TERM.finditer(text):
        key, value, values = m.groups()
        chosen = [value] if values is None else values.split(",")
        out[key] = frozenset(v.strip() for v in chosen)
    return out


class _Handler(BaseHTTPRequestHandler):
    """Routes ``/api/v1/...`` and ``/apis/<group>/<version>/...`` to the double."""

    api: ApiDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        del format, args  # quiet: tests read ``requests`` instead

    # ------------------------------------------------------------------ parsing

    def _route(self) -> tuple[str, str, str | None, dict[str, str]] | None:
        """(plural, namespace, name, query) of the request, or None."""
        parsed = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        parts = [p for p in parsed.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            rest = parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in _RESOURCES:
            return None
        name = rest[1] if len(rest) > 1 else None
        with self.api._cond:
            self.api.requests.append(Request(self.command, parsed.path, query))
        return rest[0], namespace, name, query

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            value = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _send(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, reason: str, message: str) -> None:
        self._send(code, status_body(code, reason, message))

    def _start(self, method: str) -> tuple[str, str, str | None, dict[str, str]] | None:
        route = self._route()
        if route is None:
            self._body()  # read, so the kept-alive connection's next request starts where it should
            self._error(404, "NotFound", f"the double does not serve {self.path}")
            return None
        injected = self.api._failure(method, urllib.parse.urlsplit(self.path).path)
        if injected is not None:
            if method in ("POST", "PUT"):
                self._body()
            reason = {409: "Conflict", 410: "Expired", 429: "TooManyRequests"}.get(
                injected, "InternalError"
            )
            self._error(injected, reason, f"injected {injected}")
            return None
        return route

    # ------------------------------------------------------------------ verbs

    def do_GET(self) -> None:
        route = self._start("GET")
        if route is None:
            return
        plural, namespace, name, query = route
        if name is not None:
            with self.api._cond:
                found = self.api._objects.get(plural, {}).get((namespace, name))
                found = copy.deepcopy(found)
            if found is None:
                self._error(404, "NotFound", f'{plural} "{name}" not found')
            else:
                self._send(200, found)
        elif query.get("watch") in ("true", "1"):
            self._watch(plural, namespace, query)
        else:
            self._list(plural, namespace, query)

    def _list(self, plural: str, namespace: str, query: dict[str, str]) -> None:
        api = self.api
        selector = _selector(query.get("labelSelector", ""))
        limit = int(query.get("limit") or 0)
        offset = 0
        with api._cond:
            version = api.version
            if query.get("continue"):
                at, _, start = query["continue"].partition(":")
                if int(at) < api._compacted:
                    self._error(410, "Expired", "the continue token is too old")
                    return
                offset = int(start)
            items = [
                copy.deepcopy(o)
                for _, o in sorted(api._objects.get(plural, {}).items())
                if _matches(o, namespace, selector)
            ]
        page = items[offset : offset + limit] if limit else items[offset:]
        if plural not in _CUSTOM:
            for item in page:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        meta: dict[str, Any] = {"resourceVersion": str(version)}
        if limit and offset + limit < len(items):
            meta["continue"] = f"{version}:{offset + limit}"
        api_version, kind, _ = _RESOURCES[plural]
        self._send(
            200, {"apiVersion": api_version, "kind": f"{kind}List", "metadata": meta, "items": page}
        )

    def _chunk(self, value: Mapping[str, Any]) -> None:
        line = json.dumps(value).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    def _watch(self, plural: str, namespace: str, query: dict[str, str]) -> None:
        api = self.api
        selector = _selector(query.get("labelSelector", ""))
        api_version, kind, _ = _RESOURCES[plural]
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or 1800)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        since = int(query.get("resourceVersion") or 0)
        with api._cond:
            epoch = api._epoch
            if since and since < api._compacted:
                gone = status_body(410, "Expired", f"too old resource version: {since}")
                self._chunk({"type": "ERROR", "object": gone})
                self.wfile.write(b"0\r\n\r\n")
                return
            if not since:  # "any": the current state first, as synthetic ADDED events
                pending = [
                    {"type": "ADDED", "object": copy.deepcopy(o)}
                    for _, o in sorted(api._objects.get(plural, {}).items())
                    if _matches(o, namespace, selector)
                ]
                since = api.version
            else:
                pending = []
        try:
            for event in pending:
                self._chunk(event)
            self._stream(
                plural, namespace, selector, since, epoch, timeout, bookmarks, kind, api_version
            )
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream(  # noqa: PLR0917 - the state of one stream
        self,
        plural: str,
        namespace: str,
        selector: dict[str, frozenset[str]],
        since: int,
        epoch: int,
        timeout: float,
        bookmarks: bool,
        kind: str,
        api_version: str,
    ) -> None:
        api = self.api
        end = time.monotonic() + timeout
        next_bookmark = time.monotonic() + api.bookmark_seconds
        while True:
            with api._cond:
                while True:
                    if api._closing or api._epoch != epoch:
                        return
                    events = [e for e in api._history if e.version > since and e.plural == plural]
                    now = time.monotonic()
                    if events or now >= end or (bookmarks and now >= next_bookmark):
                        break
                    api._cond.wait(min(end, next_bookmark) - now)
                version = api.version
            for e in events:
                since = e.version
                seen_as = _seen_as(e, namespace, selector)
                if seen_as is not None:
                    self._chunk({"type": seen_as, "object": e.new})
            if time.monotonic() >= end:
                return
            if bookmarks and time.monotonic() >= next_bookmark:
                since = max(since, version)
                mark = {
                    "kind": kind,
                    "apiVersion": api_version,
                    "metadata": {"resourceVersion": str(since)},
                }
                self._chunk({"type": "BOOKMARK", "object": mark})
                next_bookmark = time.monotonic() + api.bookmark_seconds

    def do_POST(self) -> None:
        route = self._start("POST")
        if route is None:
            return
        plural, namespace, _, _ = route
        body = self._body()
        if body is None or not isinstance(body.get("metadata"), dict):
            self._error(400, "BadRequest", "the body is no object with metadata")
            return
        body["metadata"]["namespace"] = namespace or body["metadata"].get("namespace", "")
        name = body["metadata"].get("name")
        with self.api._cond:
            if (namespace, name) in self.api._objects.get(plural, {}):
                self._error(409, "AlreadyExists", f'{plural} "{name}" already exists')
                return
            body["metadata"].pop("resourceVersion", None)
            stored = self.api._store(plural, body)
        self._send(201, stored)

    def do_PUT(self) -> None:
        route = self._start("PUT")
        if route is None:
            return
        plural, namespace, name, _ = route
        body = self._body()
        if body is None or not isinstance(body.get("metadata"), dict) or name is None:
            self._error(400, "BadRequest", "the body is no object with metadata")
            return
        with self.api._cond:
            old = self.api._objects.get(plural, {}).get((namespace, name))
            if old is None:
                self._error(404, "NotFound", f'{plural} "{name}" not found')
                return
            sent = body["metadata"].get("resourceVersion")
            if sent and sent != old["metadata"]["resourceVersion"]:
                message = (
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again"
                )
                self._error(409, "Conflict", message)
                return
            body["metadata"]["namespace"] = namespace
            stored = self.api._store(plural, body)
        self._send(200, stored)

    def do_PATCH(self) -> None:
        """Not served (e.g. an Event's count): answered 404 after reading the body."""
        self._body()
        self._error(404, "NotFound", f"the double does not serve PATCH {self.path}")

    def do_DELETE(self) -> None:
        route = self._start("DELETE")
        if route is None:
            return
        plural, namespace, name, _ = route
        with self.api._cond:
            gone = self.api._remove(plural, namespace, name or "")
        if gone is None:
            self._error(404, "NotFound", f'{plural} "{name}" not found')
        else:
            self._send(200, gone)
