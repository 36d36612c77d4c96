"""The CDI spec that bind-mounts a KEP-5304 metadata file into a container.

Owns upstream's naming (K/DRA ``kubeletplugin/metadata.go``): spec file
``<driver>_metadata_<claimUID>_<request>.json``, kind ``<driver>/metadata``, device
``<claimUID>_<request>``, device ID ``<driver>/metadata=<claimUID>_<request>``, one read-only
bind mount to the fixed container path, ``cdiVersion`` as ``cdispec.MinimumRequiredVersion``
gives it (0.5.0 when the device name starts with a digit, else 0.3.0), an empty spec-level
``containerEdits`` (Go's encoder writes the struct despite ``omitempty``), and the bytes
upstream's Go writer produces (``json.MarshalIndent``, two spaces, no trailing newline),
judged by upstream's writer itself (tests/unit/test_metadata_writer_oracle.py); and the CDI
naming rules (``pkg/parser``), which a metadata spec always meets.

Pure: it returns JSON-ready data and bytes. It must not write files (``writer`` does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from kvdev.schema import gojson
from kvdev.schema.tree import ROOT, MetadataLocation

CLASS: Final = "metadata"
# What upstream's writer asks for: cdispec.MinimumRequiredVersion of the spec. Of what a
# metadata spec holds, only a device name starting with a digit (a claim UID that does) needs
# more than the earliest version, 0.3.0.
CDI_VERSION_EARLIEST: Final = "0.3.0"
CDI_VERSION_DIGIT_NAME: Final = "0.5.0"

_VENDOR: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?\Z")
_CLASS: Final = _VENDOR  # the same rule, plus a length limit
_DEVICE: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?\Z")
CLASS_MAX: Final = 63


def check_vendor(value: str) -> str:
    """A CDI vendor: starts with a letter, ends with a letter or digit, ``[A-Za-z0-9_.-]``."""
    if not _VENDOR.match(value):
        raise ValueError(
            f"CDI vendor {value!r} must start with a letter and end with a letter or digit, "
            "using only letters, digits, '_', '.' and '-'"
        )
    return value


def check_class(value: str) -> str:
    """A CDI class: like a vendor, at most 63 characters."""
    if len(value) > CLASS_MAX or not _CLASS.match(value):
        raise ValueError(
            f"CDI class {value!r} must be at most {CLASS_MAX} characters, start with a letter "
            "and end with a letter or digit, using only letters, digits, '_', '.' and '-'"
        )
    return value


def check_device_name(value: str) -> str:
    """A CDI device name: starts and ends with a letter or digit, ``[A-Za-z0-9_.:-]``."""
    if not _DEVICE.match(value):
        raise ValueError(
            f"CDI device name {value!r} must start and end with a letter or digit, using only "
            "letters, digits, '_', '.', ':' and '-'"
        )
    return value


@dataclass(frozen=True, slots=True)
class MetadataSpec:
    """One CDI spec: its file name, the fully qualified device ID and the JSON content."""

    file_name: str
    device_id: str
    content: dict[str, Any]

    def to_bytes(self) -> bytes:
        """The spec as upstream writes it: ``json.MarshalIndent`` output, no trailing newline."""
        return gojson.marshal_indent(self.content).encode()


def cdi_version(name: str) -> str:
    """The spec version upstream writes for device ``name``: 0.5.0 if it starts with a digit."""
    return (
        CDI_VERSION_DIGIT_NAME if name[:1].isdigit() and name[0].isascii() else CDI_VERSION_EARLIEST
    )


def kind(driver: str) -> str:
    """``<driver>/metadata``."""
    return f"{check_vendor(driver)}/{CLASS}"


def device_name(claim_uid: str, request: str) -> str:
    """``<claimUID>_<request>``."""
    return check_device_name(f"{claim_uid}_{request}")


def device_id(driver: str, claim_uid: str, request: str) -> str:
    """``<driver>/metadata=<claimUID>_<request>``: what the kubelet plugin returns."""
    return f"{kind(driver)}={device_name(claim_uid, request)}"


def spec_file_name(driver: str, claim_uid: str, request: str) -> str:
    """``<driver>_metadata_<claimUID>_<request>.json`` under the CDI directory."""
    device_name(claim_uid, request)
    return f"{check_vendor(driver)}_{CLASS}_{claim_uid}_{request}.json"


def container_path(
    driver: str, request: str, *, claim_name: str, pod_claim_name: str | None
) -> str:
    """Where the container sees the file (upstream's fixed container path).

    Under ``resourceclaimtemplates/<podClaimName>`` for a template-generated claim, else
    ``resourceclaims/<claimName>``.
    """
    location = MetadataLocation(
        template=pod_claim_name is not None,
        claim=pod_claim_name if pod_claim_name is not None else claim_name,
        request=request,
        driver=driver,
    )
    return f"{ROOT}/{location.relpath}"


def metadata_spec(
    driver: str,
    claim_uid: str,
    request: str,
    *,
    host_path: str,
    claim_name: str,
    pod_claim_name: str | None = None,
) -> MetadataSpec:
    """The spec mounting ``host_path`` read-only at the upstream container path.

    Raises:
        ValueError: a name breaks the CDI naming rules (callers validate names first, so this
            is a second line of defence).
    """
    check_class(CLASS)
    spec: dict[str, Any] = {
        "cdiVersion": cdi_version(device_name(claim_uid, request)),
        "kind": kind(driver),
        "devices": [
            {
                "name": device_name(claim_uid, request),
                "containerEdits": {
                    "mounts": [
                        {
                            "hostPath": host_path,
                            "containerPath": container_path(
                                driver,
                                request,
                                claim_name=claim_name,
                                pod_claim_name=pod_claim_name,
                            ),
                            "options": ["ro", "bind"],
                        }
                    ]
                },
            }
        ],
        # cdispec.Spec.ContainerEdits is a struct tagged omitempty, which encoding/json never
        # omits: upstream's writer always ends the spec with an empty one.
        "containerEdits": {},
    }
    return MetadataSpec(
        spec_file_name(driver, claim_uid, request), device_id(driver, claim_uid, request), spec
    )
