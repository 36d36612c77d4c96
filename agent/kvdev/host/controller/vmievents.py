"""Which Kubernetes Event to write for a note on a VMI, decided purely (no clock, no I/O).

What client-go's legacy ``record.EventRecorder`` does between ``Eventf`` and the API server,
in small (KubeVirt records its VMI Events that way, as core/v1 Events): the Event's body, the
spam filter (a token bucket per source and object), de-duplication within a window (a PATCH of
``count``, not a new Event) and both caches as bounded LRUs. ``decide`` says what to send;
``written`` records what the API server stored. The figures: docs/reference/controller.md.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Generic, TypeVar

from kvdev.host.contract import NAME_MAX

MESSAGE_MAX: Final = 1024  # events.k8s.io's note limit; a bound on the caches' keys too
LRU_SIZE: Final = 4096
BURST: Final = 25
REFILL_SECONDS: Final = 300.0
WINDOW_SECONDS: Final = 3600.0

K = TypeVar("K")
V = TypeVar("V")


class Reason(enum.Enum):
    """The reasons the controller records on a VMI, and whether each is a Warning."""

    CONFIGMAP_CREATED = ("ConfigMapCreated", False)
    CONFIGMAP_UPDATED = ("ConfigMapUpdated", False)
    CLAIM_PENDING = ("ClaimPending", False)
    HINT_REFUSED = ("HintRefused", True)
    CONFIGMAP_NOT_OWNED = ("ConfigMapNotOwned", True)
    CONFIGMAP_OTHER_OWNER = ("ConfigMapOwnedByAnother", True)
    CONFIGMAP_REFUSED = ("ConfigMapRefused", True)
    RELAYED_METADATA_REFUSED = ("RelayedMetadataRefused", True)
    GUEST_NIC_APPLIED = ("GuestNICApplied", False)
    GUEST_NIC_PENDING = ("GuestNICPending", False)
    GUEST_NIC_DIFFERS = ("GuestNICDiffers", True)
    GUEST_NIC_UNREPORTED = ("GuestNICUnreported", True)

    @property
    def reason(self) -> str:
        """The Event's ``reason``."""
        return self.value[0]

    @property
    def type(self) -> str:
        """The Event's ``type``: ``Warning`` or ``Normal``."""
        return "Warning" if self.value[1] else "Normal"


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth an Event on the VMI: why, and the words for a person."""

    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about (``involvedObject``)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def to_json(self) -> dict[str, str]:
        """``involvedObject``'s JSON."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass(frozen=True, slots=True)
class Create:
    """POST this Event."""

    namespace: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Patch:
    """PATCH Event ``name`` with ``body`` (count, last time); ``fallback`` if it is gone."""

    namespace: str
    name: str
    body: dict[str, Any]
    fallback: Create


Decision = Create | Patch


class LRU(Generic[K, V]):
    """A dict of at most ``size`` entries; the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class TokenBucket:
    """``burst`` tokens, one more every ``refill_seconds`` (never more than ``burst``)."""

    burst: int
    refill_seconds: float
    tokens: float
    last: float

    def take(self, now: float) -> bool:
        """One token, if there is one at ``now``."""
        elapsed = max(now - self.last, 0.0)
        self.tokens = min(float(self.burst), self.tokens + elapsed / self.refill_seconds)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(frozen=True, slots=True)
class _Seen:
    """One Event the API server stored: its name, its count and when it was last sent."""

    name: str
    count: int
    last_seen: float


def timestamp(now: float) -> str:
    """A metav1.Time (RFC 3339, seconds, UTC)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(object_name: str, now: float, sequence: int) -> str:
    """``<object>.<hex nanoseconds>`` as client-go names them, at most 253 characters."""
    suffix = f".{int(now * 1e9) + sequence:x}"
    head = object_name[: NAME_MAX - len(suffix)].rstrip("-.")
    return f"{head}{suffix}"


class Correlator:
    """The spam filter and the de-duplication of one controller's Events."""

    def __init__(
        self,
        component: str,
        host: str = "",
        *,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
        window: float = WINDOW_SECONDS,
        size: int = LRU_SIZE,
    ) -> None:
        self.component, self.host = component, host
        self.burst, self.refill_seconds, self.window = burst, refill_seconds, window
        self._buckets: LRU[ObjectRef, TokenBucket] = LRU(size)
        self._seen: LRU[tuple[ObjectRef, str, str, str], _Seen] = LRU(size)
        self._sequence = 0

    def _key(self, ref: ObjectRef, note: Note) -> tuple[ObjectRef, str, str, str]:
        return ref, note.reason.type, note.reason.reason, _message(note)

    def allowed(self, ref: ObjectRef, now: float) -> bool:
        """The spam filter: a token of the object's bucket (a new bucket starts full)."""
        bucket = self._buckets.get(ref)
        if bucket is None:
            bucket = TokenBucket(self.burst, self.refill_seconds, float(self.burst), now)
            self._buckets.put(ref, bucket)
        return bucket.take(now)

    def decide(self, ref: ObjectRef, note: Note, now: float) -> Decision | None:
        """What to send for ``note`` on ``ref`` at ``now``; None: dropped by the spam filter."""
        if not self.allowed(ref, now):
            return None
        stamp = timestamp(now)
        self._sequence += 1
        fresh = Create(ref.namespace, self._body(ref, note, stamp, now))
        seen = self._seen.get(self._key(ref, note))
        if seen is None or now - seen.last_seen > self.window:
            return fresh
        body = {"count": seen.count + 1, "lastTimestamp": stamp, "message": _message(note)}
        return Patch(ref.namespace, seen.name, body, fresh)

    def written(self, ref: ObjectRef, note: Note, stored: dict[str, Any], now: float) -> None:
        """The API server stored ``stored`` (the Event created or patched) for ``note``."""
        meta = stored.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str):
            return
        count = stored.get("count")
        seen = _Seen(name, count if isinstance(count, int) else 1, now)
        self._seen.put(self._key(ref, note), seen)

    def _body(self, ref: ObjectRef, note: Note, stamp: str, now: float) -> dict[str, Any]:
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": event_name(ref.name, now, self._sequence),
                "namespace": ref.namespace,
            },
            "involvedObject": ref.to_json(),
            "reason": note.reason.reason,
            "message": _message(note),
            "type": note.reason.type,
            "source": source,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
        }


def _message(note: Note) -> str:
    text = note.message
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


__all__ = [
    "BURST",
    "LRU_SIZE",
    "REFILL_SECONDS",
    "WINDOW_SECONDS",
    "Correlator",
    "Create",
    "Decision",
    "Note",
    "ObjectRef",
    "Patch",
    "Reason",
    "TokenBucket",
    "event_name",
    "timestamp",
]
