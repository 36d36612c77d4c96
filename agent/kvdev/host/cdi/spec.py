"""The CDI spec of a KEP-5304 metadata mount, as values: its names, writing it, reading it (pure).

One home for the CDI format as kvdev meets it: upstream's names for a metadata spec (K/DRA
``kubeletplugin/metadata.go``: kind ``<driver>/metadata``, device ``<claimUID>_<request>``, file
``<driver>_metadata_<claimUID>_<request>.json``) and CDI's naming rules (``pkg/parser``); the
spec upstream's writer writes, byte for byte (``metadata_spec``, judged by upstream's writer in
tests/unit/test_metadata_writer_oracle.py); and the reading of a spec someone else wrote
(``load_spec``, ``check_counts``, ``mount_place``), bounded per spec, for the node relay and
``kvdev-host bundle --from-cdi``. Bytes in, values out: the files are ``cdi.ondisk``'s.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import yaml

from kvdev.errors import Problem, SchemaError
from kvdev.schema import gojson
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import ROOT, MetadataLocation, Role, role_of

CLASS: Final = "metadata"
KIND_SUFFIX: Final = "/" + CLASS
# What upstream's writer asks for: cdispec.MinimumRequiredVersion of the spec. Of what a
# metadata spec holds, only a device name starting with a digit (a claim UID that does) needs
# more than the earliest version, 0.3.0.
CDI_VERSION_EARLIEST: Final = "0.3.0"
CDI_VERSION_DIGIT_NAME: Final = "0.5.0"
SUFFIXES: Final = (".json", ".yaml", ".yml")  # a spec file's names, as the CDI loaders read
MAX_SPEC_BYTES: Final = MAX_STREAM_BYTES  # one spec file (other kinds can be large)
MAX_DEVICES: Final = 128  # devices of one metadata spec, YAML aliases expanded (upstream: 1)
MAX_MOUNTS: Final = 256  # mounts of one metadata spec, in all, aliases expanded (upstream: 1)

_VENDOR: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?\Z")
_CLASS: Final = _VENDOR  # the same rule, plus a length limit
_DEVICE: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?\Z")
CLASS_MAX: Final = 63
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# --------------------------------------------------------------------------- names


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


# --------------------------------------------------------------------------- writing


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


def spec_file_prefix(driver: str, claim_uid: str = "") -> str:
    """``<driver>_metadata_``, or with a claim UID ``<driver>_metadata_<claimUID>_``."""
    return f"{driver}_{CLASS}_{claim_uid}_" if claim_uid else f"{driver}_{CLASS}_"


def spec_file_name(driver: str, claim_uid: str, request: str) -> str:
    """``<driver>_metadata_<claimUID>_<request>.json`` under the CDI directory."""
    device_name(claim_uid, request)
    return f"{spec_file_prefix(check_vendor(driver), claim_uid)}{request}.json"


def metadata_driver(spec: object) -> str | None:
    """The driver of a ``<driver>/metadata`` spec; None for a spec of another kind."""
    found = spec.get("kind") if isinstance(spec, dict) else None
    if not isinstance(found, str) or not found.endswith(KIND_SUFFIX):
        return None
    return found.removesuffix(KIND_SUFFIX)


def split_device_name(name: object) -> tuple[str, str] | None:
    """(claim UID, lower case; request) of a device ``<claimUID>_<request>``; None otherwise."""
    uid, sep, request = str(name).partition("_")
    if not sep or not uid or not request:
        return None
    return uid.lower(), request


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


# --------------------------------------------------------------------------- reading


def load_spec(data: bytes, where: str) -> object:
    """A spec's document: JSON (upstream writes JSON), else YAML (the CDI loaders read both).

    Raises:
        SchemaError: neither, or nested too deeply to parse (named by ``where``).
    """
    try:
        return json.loads(data)
    except RecursionError as e:
        raise SchemaError([Problem("nested too deeply to read", where)]) from e
    except ValueError:
        pass
    try:
        return yaml.load(data, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        raise SchemaError([Problem(f"not valid JSON or YAML: {e}", where)]) from e
    except RecursionError as e:
        raise SchemaError([Problem("nested too deeply to read", where)]) from e


def mount_field(device: int, mount: int | None = None) -> str:
    """The field path of a device's mounts (device -1: the spec's own), or of one of them."""
    base = f"devices[{device}].containerEdits.mounts" if device >= 0 else "containerEdits.mounts"
    return base if mount is None else f"{base}[{mount}]"


def mount_list(holder: dict[str, Any]) -> list[Any]:
    """The ``containerEdits.mounts`` of a spec or a device ([] when there is no list)."""
    edits = holder.get("containerEdits") or {}
    mounts = edits.get("mounts") if isinstance(edits, dict) else None
    return mounts if isinstance(mounts, list) else []


def check_counts(spec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The devices of a metadata spec, once its counts are within bounds.

    Devices and mounts are counted as a reader walks them, YAML aliases expanded (one device
    listed 2,000 times is 2,000 devices); the walk stops at the first bound passed.

    Raises:
        SchemaError: devices is no list of objects, or a bound is passed (named).
    """
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        raise SchemaError([Problem("devices is not a list", where, None, "devices")])
    if len(devices) > MAX_DEVICES:
        message = f"{len(devices)} devices, over {MAX_DEVICES}: not read"
        raise SchemaError([Problem(message, where, None, "devices")])
    mounts = len(mount_list(spec))
    for i, device in enumerate(devices):
        if not isinstance(device, dict):
            problem = Problem("a device is not an object", where, None, f"devices[{i}]")
            raise SchemaError([problem])
        mounts += len(mount_list(device))
        if mounts > MAX_MOUNTS:
            message = f"over {MAX_MOUNTS} mounts in all: not read"
            raise SchemaError([Problem(message, where, None, f"devices[{i}]")])
    return devices


def selected_mounts(
    spec: dict[str, Any], devices: list[dict[str, Any]], claim_uids: frozenset[str]
) -> Iterable[tuple[int, object]]:
    """(device index, or -1 for the spec's own edits; mount) of the devices of ``claim_uids``.

    With no claim UIDs, every device's mounts and the spec's own.
    """
    if not claim_uids:
        for mount in mount_list(spec):
            yield -1, mount
    for i, device in enumerate(devices):
        name = str(device.get("name", ""))
        if claim_uids and name.partition("_")[0] not in claim_uids:
            continue
        for mount in mount_list(device):
            yield i, mount


def mount_place(mount: object, where: str, field: str) -> tuple[str, str] | None:
    """(relative path in the tree, hostPath) of one mount; None when it is no metadata file.

    Raises:
        SchemaError: the mount lacks a path, or its containerPath leaves the tree.
    """
    container = mount.get("containerPath") if isinstance(mount, dict) else None
    host = mount.get("hostPath") if isinstance(mount, dict) else None
    if not isinstance(container, str) or not isinstance(host, str):
        problem = Problem("a mount without hostPath and containerPath", where, None, field)
        raise SchemaError([problem])
    if not container.startswith(ROOT + "/"):
        return None
    rel = posixpath.normpath(container[len(ROOT) + 1 :])
    if rel.startswith(".."):
        msg = f"containerPath {container!r} leaves {ROOT}"
        raise SchemaError([Problem(msg, where, None, field)])
    if role_of(rel) is not Role.DEVICE_METADATA:
        return None  # only metadata files are ever read
    return rel, host
