"""The wire contract of the controller, the node relay and the Helm chart: names, keys, limits.

Every literal the controller's ConfigMaps, the relay's records and the chart's admission policies
share is defined here once, with the pure functions that compose them (names, label values,
keys). The chart's CEL repeats some of them, as CEL cannot import: ``tests/unit/host/
test_chart_contract.py`` renders the chart and checks each of its literals against this module.
The contract is described in docs/reference/controller.md and relay.md. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

from kvdev.host.k8s.names import bounded_label, bounded_name
from kvdev.schema.fields import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX
from kvdev.schema.origins import DRIVER, RECONSTRUCTED, SOURCES_KEY
from kvdev.schema.origins import stream_key as _origins_stream_key
from kvdev.schema.tree import CONFIGMAP_HINTS_KEY, CONFIGMAP_MAX_KEYS, METADATA_SUFFIX

# --------------------------------------------------------------------------- the API's limits

NAME_MAX: Final = DNS_SUBDOMAIN_MAX  # 253: an object's name, a ConfigMap key
LABEL_MAX: Final = DNS_LABEL_MAX  # 63: a label value
CONFIGMAP_BYTES_MAX: Final = 1024 * 1024  # the API server's limit on a ConfigMap's data
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
_KEY: Final = re.compile(r"[-._a-zA-Z0-9]+\Z")

# --------------------------------------------------------------------------- a VMI's ConfigMap

CONTROLLER: Final = "kvdev-host-controller"  # its managed-by value, its Events' source
VMI_LABEL: Final = "kvdev.io/vmi"
CONFIGMAP_PREFIX: Final = "kvdev-"
# The longest VMI name whose ConfigMap name is the prefix and the name, uncut (the chart's CEL).
WIRED_NAME_MAX: Final = NAME_MAX - len(CONFIGMAP_PREFIX)  # 247
SOURCES_ANNOTATION: Final = "kvdev.io/sources"  # JSON: each stream's key -> DRIVER | RECONSTRUCTED
# A short summary of whether the guest applied the NICs described (controller/guests.py).
GUEST_ANNOTATION: Final = "kvdev.io/guest"
HINTS_KEY: Final = CONFIGMAP_HINTS_KEY  # the only key the agent reads as hints
# The volume and virtiofs filesystem that share the ConfigMap with the guest (its virtiofs tag).
METADATA_VOLUME: Final = "kvdev-metadata"


def configmap_name(vmi_name: str) -> str:
    """``kvdev-<vmi-name>``; past ``WIRED_NAME_MAX``, cut and hashed (``names.bounded_name``)."""
    return bounded_name(CONFIGMAP_PREFIX, vmi_name, NAME_MAX)


def vmi_label(vmi_name: str) -> str:
    """The ``kvdev.io/vmi`` label's value: the name, past 63 cut and hashed (``bounded_label``)."""
    return bounded_label(vmi_name, LABEL_MAX)


def record_key(request: str, driver: str) -> str:
    """A relay record's key: ``<request>.<driver>-metadata.json``."""
    return f"{request}.{driver}{METADATA_SUFFIX}"


def stream_key(directory: str, request: str, driver: str) -> str:
    """A ConfigMap's stream key: ``<dir>.<request>.<driver>-metadata.json`` (the guest's too)."""
    return _origins_stream_key(directory, None, request, driver)


def key_fits(key: str) -> bool:
    """``key`` is a valid ConfigMap key (at most ``NAME_MAX`` of ``[-._a-zA-Z0-9]``)."""
    return len(key) <= NAME_MAX and _KEY.match(key) is not None


# --------------------------------------------------------------------------- relay records

RELAY: Final = "kvdev-host-relay"  # its managed-by value
CLAIM_UID_LABEL: Final = "kvdev.io/claim-uid"
NODE_LABEL: Final = "kvdev.io/relay-node"
NODE_ANNOTATION: Final = "kvdev.io/node"
SPECS_ANNOTATION: Final = "kvdev.io/cdi-specs"  # JSON: each key -> the CDI spec it came from
RECORD_PREFIX: Final = "kvdev-relay-"
# A claim UID as the API server makes it (a UUID, lower case).
UID_PATTERN: Final = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
UID_LENGTH: Final = 36
NODE_NAME_MAX: Final = NAME_MAX - len(RECORD_PREFIX) - UID_LENGTH - 1  # 204
# The start of a node name that is a label value: what CEL's find() takes of its first 63.
LABEL_PREFIX_PATTERN: Final = "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
# Records of earlier versions: kvdev-relay-<claimUID>-<10 hex digits of the node's SHA-256>.
LEGACY_NAME_PATTERN: Final = "^kvdev-relay-[0-9a-f-]{1,64}-[0-9a-f]{10}$"
RECORD_BYTES_MAX: Final = CONFIGMAP_BYTES_MAX - 64 * 1024  # room left for the metadata
# The node name the API server puts in a pod's bound token (userInfo.extra).
TOKEN_NODE_KEY: Final = "authentication.kubernetes.io/node-name"  # noqa: S105 (a key)


def record_name(node: str, claim_uid: str) -> str:
    """``kvdev-relay-<claimUID>.<node>``: one name per (claim, node); a claim UID has no dot."""
    return f"{RECORD_PREFIX}{claim_uid.lower()}.{node}"


def node_label(node: str) -> str:
    """The node name as a label value: whole up to 63, else its first 63 cut back to [a-z0-9]."""
    if len(node) <= LABEL_MAX:
        return node
    return node[:LABEL_MAX].rstrip("-.")


def node_selector(node: str) -> str:
    """The label selector of one node's records."""
    return f"{MANAGED_BY}={RELAY},{NODE_LABEL}={node_label(node)}"


__all__ = [
    "CLAIM_UID_LABEL",
    "CONFIGMAP_BYTES_MAX",
    "CONFIGMAP_MAX_KEYS",
    "CONFIGMAP_PREFIX",
    "CONTROLLER",
    "DRIVER",
    "GUEST_ANNOTATION",
    "HINTS_KEY",
    "LABEL_MAX",
    "LABEL_PREFIX_PATTERN",
    "LEGACY_NAME_PATTERN",
    "MANAGED_BY",
    "METADATA_VOLUME",
    "NAME_MAX",
    "NODE_ANNOTATION",
    "NODE_LABEL",
    "NODE_NAME_MAX",
    "RECONSTRUCTED",
    "RECORD_BYTES_MAX",
    "RECORD_PREFIX",
    "RELAY",
    "SOURCES_ANNOTATION",
    "SOURCES_KEY",
    "SPECS_ANNOTATION",
    "TOKEN_NODE_KEY",
    "UID_LENGTH",
    "UID_PATTERN",
    "VMI_LABEL",
    "WIRED_NAME_MAX",
    "configmap_name",
    "key_fits",
    "node_label",
    "node_selector",
    "record_key",
    "record_name",
    "stream_key",
    "vmi_label",
]
