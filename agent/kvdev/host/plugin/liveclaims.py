"""``KubeClaimSource``: a claim and the driver's ResourceSlices, fetched from the API server.

GET the ResourceClaim by namespace/name, LIST the driver's ResourceSlices (paged), through
``kvdev.host.kube``. Given the node's name (``--node-name``, ``$NODE_NAME`` from the Downward
API), only those this node can see: two lists, ``spec.driver=<driver>,spec.nodeName=<node>``
(the node's own slices) and ``spec.driver=<driver>,spec.nodeName=`` (slices with no node name:
network-attached and per-device pools), never the other nodes' slices. Without it, every slice
of the driver. The raw JSON is validated by kvdev's own models (``kvdev.host.k8s``). The client
is built on first use, so constructing the source needs no cluster. This module only reads
(``claimstatus`` writes a claim's device status, through the client ``wire`` gives it).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from kvdev.errors import Problem, SchemaError
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.k8s.model import problems_from
from kvdev.host.k8s.resource import API_VERSION
from kvdev.host.kube import wire
from kvdev.host.kube.errors import NotFoundError
from kvdev.host.kube.wire import KubeApi
from kvdev.host.plugin.claimsource import ClaimNotFoundError, Fetched
from kvdev.host.ratelimit import TokenBucket

PAGE_SIZE = 500
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
        self._api: KubeApi | None = None

    def fetch(self, namespace: str, name: str) -> Fetched:
        """See ``kvdev.host.plugin.claimsource.ClaimSource.fetch``."""
        what = f"ResourceClaim {namespace}/{name}"
        api = self.wire()
        try:
            raw = api.get_resource_claim(namespace, name)
        except NotFoundError as e:
            raise ClaimNotFoundError(f"{what} not found on the API server") from e
        claim = _validate(ResourceClaim, "ResourceClaim", raw, f"apiserver: {what}")
        driver = f"spec.driver={self.driver}"
        if self.node is None:
            return Fetched(claim, tuple(self._slices(api, driver)))
        own = self._slices(api, f"{driver},spec.nodeName={self.node}")
        return Fetched(claim, (*own, *self._slices(api, f"{driver},spec.nodeName=")))

    def _slices(self, api: KubeApi, selector: str) -> list[ResourceSlice]:
        """The slices ``selector`` selects; a 404 here means resource.k8s.io/v1 is not served."""
        try:
            items = api.list_all(wire.resource_slices(selector), limit=PAGE_SIZE)
        except NotFoundError as e:
            message = f"{e.what}: API server answered 404: is resource.k8s.io/v1 served?"
            raise NotFoundError(message, what=e.what, status=e.status) from e
        source = f"apiserver: ResourceSlices of {self.driver}"
        return [_validate(ResourceSlice, "ResourceSlice", i, source) for i in items]

    def wire(self) -> KubeApi:
        """The client, built on first use and shared (thread-safe).

        Raises:
            PermanentError: no configuration can be loaded.
        """
        with self._lock:
            if self._api is None:
                self._api = KubeApi.connect(self.kubeconfig, self.bucket, timeout=self.timeout)
            return self._api


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
