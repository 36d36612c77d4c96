"""The layout of a metadata tree: which relative path holds which document.

Upstream fixes the container-side layout (KEP-5304, ``api/metadata/types.go``)::

    <root>/resourceclaims/<claimName>/<requestName>/<driverName>-metadata.json
    <root>/resourceclaimtemplates/<podClaimName>/<requestName>/<driverName>-metadata.json

``<requestName>`` is the base request (a ``/<subrequest>`` suffix is kept inside the file
only). The guest sees the same layout under its own root, plus kvdev's guest hints at
``<root>/kvdev/guest-hints.json``. The config drive's ``meta_data.json`` lives elsewhere (on the
``config-2`` volume) and is recognised by its file name.

No I/O here: paths are strings, relative to the tree's root, '/'-separated.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared
from kvdev.schema.fields import check_dns_label, check_dns_subdomain, check_driver_name

ROOT: Final = "/var/run/kubernetes.io/dra-device-attributes"
RESOURCE_CLAIMS: Final = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES: Final = "resourceclaimtemplates"
METADATA_SUFFIX: Final = "-metadata.json"
HINTS_PATH: Final = "kvdev/guest-hints.json"
CONFIG_DRIVE_NAME: Final = "meta_data.json"
# The key of a ConfigMap volume the controller writes the guest hints to: the only key of a
# volume read as hints (every other key is a DeviceMetadata stream, ``configmap_role``).
CONFIGMAP_HINTS_KEY: Final = "guest-hints.json"
# Keys of a ConfigMap volume the agent reads (the first ones by name; a read of more is cut and
# says so). The controller refuses to render a ConfigMap of more: the agent would not read it.
CONFIGMAP_MAX_KEYS: Final = 256


class Role(enum.Enum):
    """What a file is."""

    DEVICE_METADATA = "DeviceMetadata"
    GUEST_HINTS = "GuestHints"
    CONFIG_DRIVE = "ConfigDrive"
    UNRELATED = "unrelated"


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class MetadataLocation:
    """Where a DeviceMetadata file sits, which says whose metadata it must be.

    Attributes:
        template: True under ``resourceclaimtemplates`` (then ``claim`` is the podClaimName).
        claim: the ResourceClaim name, or the pod's claim name for template claims.
        request: the base request name.
        driver: the driver that wrote the file.
    """

    template: bool
    claim: str
    request: str
    driver: str

    @property
    def relpath(self) -> str:
        """The path relative to the tree's root."""
        top = RESOURCE_CLAIM_TEMPLATES if self.template else RESOURCE_CLAIMS
        return f"{top}/{self.claim}/{self.request}/{self.driver}{METADATA_SUFFIX}"


def metadata_location(relpath: str) -> MetadataLocation | None:
    """Parse a relative path; None when it is not a DeviceMetadata path at all.

    Raises:
        ValueError: the path has the metadata shape but a component is not a valid name.
    """
    parts = relpath.split("/")
    if len(parts) != 4 or parts[0] not in {RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES}:
        return None
    top, claim, request, filename = parts
    if not filename.endswith(METADATA_SUFFIX) or filename == METADATA_SUFFIX:
        return None
    template = top == RESOURCE_CLAIM_TEMPLATES
    driver = filename.removesuffix(METADATA_SUFFIX)
    checks = (
        ("claim directory", claim, check_dns_label if template else check_dns_subdomain),
        ("request directory", request, check_dns_label),
        ("driver in the file name", driver, check_driver_name),
    )
    for what, value, check in checks:
        try:
            check(value)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from e
    return MetadataLocation(template=template, claim=claim, request=request, driver=driver)


def configmap_role(key: str) -> Role:
    """The role of a ConfigMap volume's key: hints at ``CONFIGMAP_HINTS_KEY``, else a stream.

    By name, never by content: a stream key holds a driver's bytes, relayed from the node, and
    may not speak as the controller's hints. (The sources index is the caller's: it is data.)
    """
    return Role.GUEST_HINTS if key == CONFIGMAP_HINTS_KEY else Role.DEVICE_METADATA


def role_of(relpath: str) -> Role:
    """The role a file has by its place in a tree.

    Hints are recognised at ``kvdev/guest-hints.json`` and ``meta_data.json`` by its name,
    wherever the tree's root is; metadata files only at their upstream place.
    """
    if relpath == HINTS_PATH or relpath.endswith("/" + HINTS_PATH):
        return Role.GUEST_HINTS
    if relpath.rsplit("/", 1)[-1] == CONFIG_DRIVE_NAME:
        return Role.CONFIG_DRIVE
    parts = relpath.split("/")
    if (
        len(parts) == 4
        and parts[0] in {RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES}
        and parts[3].endswith(METADATA_SUFFIX)
        and parts[3] != METADATA_SUFFIX
    ):
        return Role.DEVICE_METADATA
    return Role.UNRELATED
