"""Where each stream of a VMI's ConfigMap came from: the driver, or the reconstruction (pure).

The controller writes, next to the streams, the key ``kvdev-sources.json``: one JSON object,
``{"apiVersion": "kvdev.io/v1alpha1", "kind": "StreamSources", "sources": {KEY: ORIGIN}}``,
each ``KEY`` a stream's key (``<dir>.<request>.<driver>-metadata.json``) and ``ORIGIN``
``driver`` (the bytes the DRA driver wrote on the node, relayed unchanged) or
``reconstructed`` (rebuilt by the controller from the claim's status and the ResourceSlices).

Shared by the controller (``index_json``) and the agent (``parse``, ``Origins``). Read as data
only, in plain Python (no pydantic): at most ``MAX_BYTES`` bytes and
``MAX_ENTRIES`` entries, the fields above and nothing else of meaning, each of its JSON type
(every key a ConfigMap key, every origin one of the two strings). Anything else, whatever the
bytes, is a ``Problem`` naming the field (``parse`` raises nothing), and the streams' origins
are then unknown. A key the index does
not name is ``reconstructed`` (an older controller wrote no index; the streams of a ConfigMap
are the controller's). Streams read from a tree (not a ConfigMap volume) have no origin here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Final

from kvdev.errors import Problem
from kvdev.schema.plain import json_type

SOURCES_KEY: Final = "kvdev-sources.json"
API_VERSION: Final = "kvdev.io/v1alpha1"
KIND: Final = "StreamSources"
DRIVER: Final = "driver"
RECONSTRUCTED: Final = "reconstructed"
LABELS: Final = {
    DRIVER: "driver",
    RECONSTRUCTED: "reconstructed from claim status and slices",
}
MAX_BYTES: Final = 64 * 1024
MAX_ENTRIES: Final = 256
_KEY: Final = re.compile(r"[-._a-zA-Z0-9]{1,253}\Z")


@dataclass(frozen=True, slots=True)
class Origins:
    """The origin of each stream key of one ConfigMap volume (``configmap`` False: a tree)."""

    configmap: bool = False
    sources: dict[str, str] = field(default_factory=dict)

    def label(self, key: str) -> str:
        """``driver``, ``reconstructed from claim status and slices``, or "" (not known)."""
        if not self.configmap:
            return ""
        return LABELS[self.sources.get(key, RECONSTRUCTED)]


def stream_key(claim: str, pod_claim_name: str | None, request: str, driver: str) -> str:
    """A stream's key: ``<pod claim name, else claim>.<request>.<driver>-metadata.json``."""
    return f"{pod_claim_name or claim}.{request}.{driver}-metadata.json"


class _BadIndexError(Exception):
    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message, self.path = message, path


def _document(data: bytes) -> dict[str, object]:
    if len(data) > MAX_BYTES:
        raise _BadIndexError(f"larger than {MAX_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _BadIndexError(f"not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise _BadIndexError("not a JSON object")
    for name, want in (("apiVersion", API_VERSION), ("kind", KIND)):
        if doc.get(name) != want:
            raise _BadIndexError(f"{name} is {doc.get(name)!r}, not {want!r}", name)
    return doc


def _sources(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _BadIndexError("not an object", "sources")
    if len(value) > MAX_ENTRIES:
        raise _BadIndexError(f"{len(value)} entries, more than {MAX_ENTRIES}", "sources")
    out = {}
    for key, origin in value.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise _BadIndexError("not a ConfigMap key", f"sources[{str(key)[:64]!r}]")
        if not isinstance(origin, str):
            found = f"found {json_type(origin)}"
            raise _BadIndexError(f"{found}, not one of {sorted(LABELS)}", f"sources[{key!r}]")
        if origin not in LABELS:
            shown = repr(origin[:64])
            raise _BadIndexError(f"{shown} is not one of {sorted(LABELS)}", f"sources[{key!r}]")
        out[key] = origin
    return out


def parse(data: bytes, source: str) -> tuple[dict[str, str], Problem | None]:
    """The index's sources by key, or ({}, the problem) when it is not a valid index.

    Never raises for bad input: every failure to read the index is its problem.
    """
    try:
        return _sources(_document(data).get("sources")), None
    except _BadIndexError as e:
        return {}, Problem(f"stream sources index: {e.message}", source, None, e.path)
    except (TypeError, ValueError, RecursionError) as e:  # a shape the checks above missed
        return {}, Problem(f"stream sources index: not read: {e}", source)


def index_json(sources: dict[str, str]) -> str:
    """The index's text, as the controller writes it (keys sorted, compact)."""
    body = {"apiVersion": API_VERSION, "kind": KIND, "sources": dict(sorted(sources.items()))}
    return json.dumps(body, separators=(",", ":"))


__all__ = [
    "DRIVER",
    "LABELS",
    "RECONSTRUCTED",
    "SOURCES_KEY",
    "Origins",
    "index_json",
    "parse",
    "stream_key",
]
