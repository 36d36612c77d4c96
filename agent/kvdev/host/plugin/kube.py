"""``KubeClaimSource``: fetch a claim and the driver's ResourceSlices from the Kubernetes API.

Built on the official ``kubernetes`` client (host extra): GET the ResourceClaim by
namespace/name, LIST the ResourceSlices with ``fieldSelector=spec.driver=<driver>`` (paged).
The raw JSON is validated by kvdev's own models (``kvdev.host.k8s``), never by the client's.
The client is built on first use, so constructing the source needs no cluster. This module
must not write files; it only reads from the API server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from kvdev.errors import PermanentError, Problem, RetryableError, SchemaError
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.k8s.resource import API_VERSION
from kvdev.host.plugin.claimsource import ClaimNotFoundError, Fetched
from kvdev.schema.stream import problems_from

PAGE_SIZE = 500
_NOT_FOUND = 404
_CLIENT_ERRORS = range(400, 500)
_RETRYABLE_CLIENT_ERRORS = (408, 429)
_M = TypeVar("_M", ResourceClaim, ResourceSlice)


class KubeClaimSource:
    """Claims and slices from the API server (in-cluster config, or a kubeconfig file).

    Args:
        driver: the plugin's driver name; only its slices are listed.
        kubeconfig: a kubeconfig file; None: the in-cluster service account, falling back
            to the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
        timeout: seconds for each API request.
    """

    def __init__(
        self, driver: str, *, kubeconfig: Path | None = None, timeout: float = 10.0
    ) -> None:
        self.driver = driver
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self._lock = threading.Lock()
        self._api: Any = None

    def fetch(self, namespace: str, name: str) -> Fetched:
        """See ``kvdev.host.plugin.claimsource.ClaimSource.fetch``."""
        what = f"ResourceClaim {namespace}/{name}"
        api = self._resource_api()
        raw = self._call(what, api.read_namespaced_resource_claim, name, namespace)
        claim = _validate(ResourceClaim, "ResourceClaim", raw, f"apiserver: {what}")
        return Fetched(claim, tuple(self._slices(api)))

    def _slices(self, api: Any) -> list[ResourceSlice]:  # noqa: ANN401 - see _resource_api
        slices: list[ResourceSlice] = []
        token: str | None = None
        selector = f"spec.driver={self.driver}"
        while True:
            page = self._call(
                f"ResourceSlices of {self.driver}",
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
        self, what: str, method: Callable[..., Any], *args: object, **kwargs: object
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - lazy import
        from urllib3.exceptions import HTTPError  # noqa: PLC0415 - the client's transport

        try:
            response = method(
                *args, **kwargs, _preload_content=False, _request_timeout=self.timeout
            )
            body = response.data
        except ApiException as e:
            if e.status == _NOT_FOUND:
                raise ClaimNotFoundError(f"{what} not found on the API server") from e
            message = f"{what}: API server answered {e.status} {e.reason}"
            if e.status in _CLIENT_ERRORS and e.status not in _RETRYABLE_CLIENT_ERRORS:
                raise PermanentError(message) from e
            raise RetryableError(message) from e
        except (HTTPError, OSError) as e:
            raise RetryableError(f"{what}: API server unreachable: {e}") from e
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise RetryableError(f"{what}: API server sent invalid JSON: {e}") from e
        if not isinstance(data, dict):
            raise RetryableError(f"{what}: API server sent {type(data).__name__}, not an object")
        return data

    def _resource_api(self) -> Any:  # noqa: ANN401 - used untyped: we read raw responses
        with self._lock:
            if self._api is None:
                self._api = self._build()
            return self._api

    def _build(self) -> Any:  # noqa: ANN401 - see _resource_api
        from kubernetes import client  # noqa: PLC0415 - needs the host extra only here
        from kubernetes import config as kube_config  # noqa: PLC0415

        config: Any = kube_config  # its loaders are untyped

        configuration = client.Configuration()
        try:
            if self.kubeconfig is not None:
                config.load_kube_config(
                    config_file=str(self.kubeconfig), client_configuration=configuration
                )
            else:
                try:
                    config.load_incluster_config(client_configuration=configuration)
                except config.ConfigException:
                    config.load_kube_config(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as e:
            where = self.kubeconfig or "in-cluster config or the default kubeconfig"
            raise PermanentError(f"{where}: cannot configure the Kubernetes client: {e}") from e
        return client.ResourceV1Api(client.ApiClient(configuration))


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
