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

The index may also say, in ``taints`` (a list of ``{"key": KEY, "pool": POOL, "device": NAME,
"taints": [LINE, ...]}``, at most ``MAX_ENTRIES`` devices of at most ``MAX_TAINTS`` lines of at
most ``MAX_LINE`` characters), the device taints the controller found on a stream's allocated
devices, each line a taint and what tolerates it, as people read it (``kvdev explain`` shows
them). An agent that does not know the field ignores it; ``read_index`` gives both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Final

from kvdev._records import compared
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
MAX_TAINTS: Final = 16  # a device's taints (the API's limit) plus a DeviceTaintRule's: lines
MAX_LINE: Final = 512
_KEY: Final = re.compile(r"[-._a-zA-Z0-9]{1,253}\Z")


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Origins:
    """The origin of each stream key of one ConfigMap volume (``configmap`` False: a tree)."""

    configmap: bool = False
    sources: dict[str, str] = field(default_factory=dict)
    taints: dict[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)

    def taints_of(self, key: str, pool: str, device: str) -> tuple[str, ...]:
        """The taint lines of a stream's device (empty: none known)."""
        return self.taints.get((key, pool, device), ())

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


def _line(value: object, path: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_LINE:
        raise _BadIndexError(f"not a string of 1 to {MAX_LINE} characters", path)
    return value


def _taints(value: object) -> dict[tuple[str, str, str], tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise _BadIndexError(f"not a list of at most {MAX_ENTRIES} devices", "taints")
    out = {}
    for i, entry in enumerate(value):
        at = f"taints[{i}]"
        if not isinstance(entry, dict):
            raise _BadIndexError("not an object", at)
        key, pool, device = (_line(entry.get(n), f"{at}.{n}") for n in ("key", "pool", "device"))
        lines = entry.get("taints")
        if not isinstance(lines, list) or not 0 < len(lines) <= MAX_TAINTS:
            raise _BadIndexError(f"not a list of 1 to {MAX_TAINTS} lines", f"{at}.taints")
        out[(key, pool, device)] = tuple(_line(t, f"{at}.taints") for t in lines)
    return out


def read_index(data: bytes, source: str) -> tuple[Origins, Problem | None]:
    """The index as the agent uses it (a ConfigMap's), or (unknown origins, the problem)."""
    try:
        doc = _document(data)
        sources, taints = _sources(doc.get("sources")), _taints(doc.get("taints"))
        return Origins(configmap=True, sources=sources, taints=taints), None
    except _BadIndexError as e:
        return Origins(), Problem(f"stream sources index: {e.message}", source, None, e.path)
    except (TypeError, ValueError, RecursionError) as e:  # a shape the checks above missed
        return Origins(), Problem(f"stream sources index: not read: {e}", source)


def parse(data: bytes, source: str) -> tuple[dict[str, str], Problem | None]:
    """The index's sources by key, or ({}, the problem) when it is not a valid index.

    Never raises for bad input: every failure to read the index is its problem.
    """
    found, problem = read_index(data, source)
    return found.sources, problem


def index_json(
    sources: dict[str, str], taints: dict[tuple[str, str, str], tuple[str, ...]] | None = None
) -> str:
    """The index's text, as the controller writes it (keys sorted, compact; taints if any)."""
    body: dict[str, object] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "sources": dict(sorted(sources.items())),
    }
    if taints:
        body["taints"] = [
            {"key": k, "pool": p, "device": d, "taints": list(lines[:MAX_TAINTS])}
            for (k, p, d), lines in sorted(taints.items())[:MAX_ENTRIES]
        ]
    return json.dumps(body, separators=(",", ":"))


__all__ = [
    "DRIVER",
    "LABELS",
    "RECONSTRUCTED",
    "SOURCES_KEY",
    "Origins",
    "index_json",
    "parse",
    "read_index",
    "stream_key",
]
