"""Write a prepared claim's ``status.devices`` to the API server: server-side apply, our manager.

``KubeDeviceStatus`` sends ``kvdev.host.publish.devicestatus``'s apply configuration (this
driver's entries, keyed by driver, pool, device and shareID, with their ``Ready`` condition and
``networkData``) to the claim's ``status`` subresource as a server-side apply
(``application/apply-patch+yaml``) with the field manager ``kvdev-host/<driver>`` and
``force=true``: only the fields that manager applies are taken over, as a kubelet plugin does.
``clear`` applies an empty ``status.devices`` under the same manager, so the entries it owned
go and other managers' stay (a claim gone, or re-created under another UID, needs nothing).
The apply carries ``metadata.uid``: a claim re-created under the same name is refused (409),
never written. Both raise ``DeviceStatusWriteError`` with a short
``reason`` (the plugin's metrics label); the plugin logs it, counts it and applies again on the
next prepare, never failing kubelet's call for it. ``DeviceStatusSink`` is the seam the
plugin's service sees (None: no status is written, as with ``--claims-dir``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from kvdev.errors import RetryableError
from kvdev.host.k8s import ResourceClaim
from kvdev.host.k8s.resource import API_VERSION
from kvdev.host.kube.errors import (
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    KubeError,
    KubeRetryableError,
    NotFoundError,
)
from kvdev.host.kube.wire import KubeApi
from kvdev.host.publish.devicestatus import apply_configuration

_REASONS: Final[tuple[tuple[type[KubeError], str], ...]] = (
    (ForbiddenError, "forbidden"),
    (NotFoundError, "not_found"),
    (ConflictError, "conflict"),
    (InvalidError, "invalid"),
    (GoneError, "other"),
    (KubeRetryableError, "unavailable"),  # 408, 429, 5xx, unreachable
)


def field_manager(driver: str) -> str:
    """The field manager of ``driver``'s device status: ``kvdev-host/<driver>``."""
    return f"kvdev-host/{driver}"


class DeviceStatusWriteError(RetryableError):
    """A claim's ``status.devices`` could not be applied; the next prepare applies it again.

    ``reason``: ``forbidden``, ``not_found``, ``conflict`` (another UID, or a race),
    ``invalid``, ``unavailable`` (unreachable, 5xx, 429) or ``other``.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class DeviceStatusSink(Protocol):
    """Where the plugin puts a claim's device status (thread-safe)."""

    def apply(self, claim: ResourceClaim) -> None:
        """Apply this driver's entries for the prepared ``claim``.

        Raises:
            DeviceStatusWriteError: not written.
        """
        ...

    def clear(self, namespace: str, name: str, uid: str) -> None:
        """Remove this driver's entries from the claim (nothing to do when it is gone).

        Raises:
            DeviceStatusWriteError: not removed.
        """
        ...


class KubeDeviceStatus:
    """``DeviceStatusSink`` on the API server.

    Args:
        driver: the plugin's driver; its entries only, under ``field_manager(driver)``.
        api: returns the client to use (the claim source's, built on first use).
        clock: the time of a new ``Ready`` condition.
    """

    def __init__(
        self,
        driver: str,
        api: Callable[[], KubeApi],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.driver = driver
        self.manager = field_manager(driver)
        self._api = api
        self._clock = clock

    def apply(self, claim: ResourceClaim) -> None:
        """See ``DeviceStatusSink.apply``."""
        body = apply_configuration(claim, self.driver, now=self._clock())
        ident = body["metadata"]
        self._patch(ident["namespace"], ident["name"], body, missing_is_done=False)

    def clear(self, namespace: str, name: str, uid: str) -> None:
        """See ``DeviceStatusSink.clear``."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": []},
        }
        self._patch(namespace, name, body, missing_is_done=True)

    def _patch(
        self, namespace: str, name: str, body: dict[str, Any], *, missing_is_done: bool
    ) -> None:
        try:
            self._api().apply_resource_claim_status(namespace, name, body, manager=self.manager)
        except (NotFoundError, ConflictError) as e:
            if missing_is_done:
                return  # gone, or another claim under that name (the uid differs): done
            raise DeviceStatusWriteError(str(e), reason(e)) from e
        except KubeError as e:
            raise DeviceStatusWriteError(str(e), reason(e)) from e


def reason(error: KubeError) -> str:
    """The metrics label of a write the API server refused or never answered."""
    return next((label for kind, label in _REASONS if isinstance(error, kind)), "other")
