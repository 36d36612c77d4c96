"""The node relay's wire: its records (ConfigMaps) in the API server, through the kubernetes client.

Only this module of the relay imports ``kubernetes``; the loop (``live``) sees raw JSON and
kvdev errors. Every request waits for the client's rate-limit token (``kubeclient``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvdev.errors import PermanentError, RetryableError
from kvdev.host import kubeclient
from kvdev.host.ratelimit import TokenBucket

_RETRYABLE = frozenset({408, 409, 429})


class RelayApi:
    """List, create, replace and delete one namespace's ConfigMaps (the relay's records)."""

    def __init__(self, client: Any, timeout: float = 30.0) -> None:  # noqa: ANN401 - untyped
        from kubernetes import client as k8s  # noqa: PLC0415

        self._core = k8s.CoreV1Api(client)
        self.timeout = timeout

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, bucket: TokenBucket | None = None) -> RelayApi:
        """A client for the in-cluster service account, ``kubeconfig``, or the default one.

        Raises:
            PermanentError: no configuration can be loaded.
        """
        return cls(kubeclient.api_client(kubeconfig, bucket))

    def _call(self, what: str, method: Any, **kwargs: object) -> Any:  # noqa: ANN401 - JSON
        try:
            answer = method(**kwargs, _preload_content=False, _request_timeout=self.timeout)
        except ApiException as e:
            raise _error(what, e) from e
        except Exception as e:
            raise RetryableError(f"{what}: {kubeclient.short_reason(e)}") from e
        data = answer.data
        return json.loads(data) if data else None

    def list(self, namespace: str, selector: str, fields: str = "") -> list[dict[str, Any]]:
        """The ConfigMaps of ``namespace`` that ``selector`` (and ``fields``) select."""
        found = self._call(
            f"list ConfigMaps in {namespace} ({selector or fields})",
            self._core.list_namespaced_config_map,
            namespace=namespace,
            label_selector=selector,
            field_selector=fields,
        )
        items = found.get("items") if isinstance(found, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a ConfigMap; the stored object."""
        name = body["metadata"]["name"]
        return _object(
            self._call(
                f"create ConfigMap {namespace}/{name}",
                self._core.create_namespaced_config_map,
                namespace=namespace,
                body=dict(body),
            )
        )

    def replace(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT a ConfigMap (its resourceVersion makes a stale write a 409); the stored object."""
        name = body["metadata"]["name"]
        return _object(
            self._call(
                f"update ConfigMap {namespace}/{name}",
                self._core.replace_namespaced_config_map,
                name=name,
                namespace=namespace,
                body=dict(body),
            )
        )

    def delete(self, namespace: str, name: str) -> None:
        """DELETE a ConfigMap (gone already: fine)."""
        try:
            self._call(
                f"delete ConfigMap {namespace}/{name}",
                self._core.delete_namespaced_config_map,
                name=name,
                namespace=namespace,
            )
        except PermanentError as e:
            if "answered 404" not in str(e):
                raise


def _object(data: object) -> dict[str, Any]:
    return dict(data) if isinstance(data, dict) else {}


def _error(what: str, e: ApiException) -> RetryableError | PermanentError:
    message = e.reason or ""
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        message = json.loads(e.body or "").get("message") or message
    text = f"{what}: API server answered {e.status} {message}".rstrip()
    if e.status is None or e.status >= 500 or e.status in _RETRYABLE:
        return RetryableError(text)
    return PermanentError(text)


__all__ = ["RelayApi"]
