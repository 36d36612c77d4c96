"""The agent's state files in ``<state-dir>``: one typed slot per file, one policy for all.

A ``Slot`` names its file, its read bound, how its JSON object decodes (entries that do not
fit are left out) and encodes, and when its value is empty (the file is removed then). A
``Store`` reads a slot once, through ``kvdev._confined`` (a regular file with one link, no link
followed, at most the bound), and keeps it; ``put`` writes it with ``kvdev._atomic`` only when
its encoding changed or the last write failed (a slot may name a cheaper form to compare, its
file's encoding made only when that changed), and keeps a failure (``unsaved``: a
``StateNotSaved`` condition) until a write succeeds. A file that cannot be read as its slot is
moved aside once to ``<name>.corrupt`` with a warning naming it, never warned about at every
start. ``tidy`` removes the temporary files a killed write left of any slot. A dry run's store
reads, sets nothing aside and writes nothing.

Only this module writes the state directory's files (the mark files and link wishes are steps:
``markfiles``, ``linkfiles``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from kvdev._atomic import remove_leftovers, write_atomic
from kvdev._confined import RefusedError, read_beneath
from kvdev._records import compared
from kvdev.errors import KvdevError, os_error
from kvdev.guest.core.journals import MAX_PER_LINK
from kvdev.guest.core.primary import Decision

log = logging.getLogger("kvdev.agent")
T = TypeVar("T")

MAX_ADDRESSES = 256  # per link in the address journal, as the metadata reader's MAX_IPS
MAX_REASON = 512  # characters of a recorded reason for a guest's own NIC


@compared
@dataclass(frozen=True, eq=False, repr=False)
class Slot(Generic[T]):
    """One state file: its name, bound, codec, and what counts as empty (no file)."""

    name: str
    what: str  # in messages: "the rename journal"
    bound: int  # bytes read at most
    decode: Callable[[dict[str, Any]], T]  # from the file's JSON object
    encode: Callable[[T], str]
    empty: Callable[[T], bool]  # an empty value is no file
    saving: str = ""  # how a failed write names the file: "" (after what) or " in"
    compare: Callable[[T], str] | None = None  # equal exactly when encode's is; None: encode

    def key(self, value: T) -> str:
        """What ``put`` compares with the value last saved: ``compare``'s form, else encode's."""
        return (self.compare or self.encode)(value)


def _ifindexed(body: dict[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in body.items() if isinstance(k, str) and k.isdecimal()}


def _renames(body: dict[str, Any]) -> dict[int, str]:
    return {i: name for i, name in _ifindexed(body).items() if isinstance(name, str) and name}


def _addresses(body: dict[str, Any]) -> dict[int, frozenset[str]]:
    return {
        i: frozenset(a for a in value[:MAX_ADDRESSES] if isinstance(a, str))
        for i, value in _ifindexed(body).items()
        if isinstance(value, list)
    }


def _altnames(body: dict[str, Any]) -> dict[int, frozenset[str]]:
    out = {
        i: frozenset([a for a in value if isinstance(a, str) and a][:MAX_PER_LINK])
        for i, value in _ifindexed(body).items()
        if isinstance(value, list)
    }
    return {i: names for i, names in out.items() if names}


def _journal_text(journal: dict[int, Any]) -> str:
    body = {str(i): v if isinstance(v, str) else sorted(v) for i, v in journal.items()}
    return json.dumps(body, sort_keys=True) + "\n"


def _decision(body: dict[str, Any]) -> Decision:
    owned = body.get("owned")
    if not isinstance(owned, dict):
        return Decision({})
    return Decision(
        {
            mac.lower(): why[:MAX_REASON]
            for mac, why in owned.items()
            if isinstance(mac, str) and isinstance(why, str) and len(mac) == 17
        }
    )


def _decision_text(decision: Decision) -> str:
    return json.dumps({"owned": dict(sorted(decision.owned.items()))}, indent=2) + "\n"


def _status_text(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def _status_key(body: dict[str, Any]) -> str:
    """The status compact: the C encoder's (an indented dump is pure Python, ~10x the CPU)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _body(body: dict[str, Any]) -> dict[str, Any]:
    return body


RENAMES: Slot[dict[int, str]] = Slot(
    "renames.json", "rename journal", 65536, _renames, _journal_text, lambda j: not j
)
ADDRESSES: Slot[dict[int, frozenset[str]]] = Slot(
    "addresses.json", "address journal", 1 << 20, _addresses, _journal_text, lambda j: not j
)
ALTNAMES: Slot[dict[int, frozenset[str]]] = Slot(
    "altnames.json", "altname journal", 1 << 20, _altnames, _journal_text, lambda j: not j
)
PRIMARY: Slot[Decision] = Slot(
    "primary.json",
    "guest's own NICs",
    65536,
    _decision,
    _decision_text,
    lambda d: not d.owned,
    " in",
)
STATUS: Slot[dict[str, Any]] = Slot(  # the last status (``views.encode``): written, not read
    "status.json", "status", 1 << 24, _body, _status_text, lambda b: not b, " in", _status_key
)
SLOTS = (STATUS, RENAMES, ADDRESSES, ALTNAMES, PRIMARY)


@dataclass
class Store:
    """The state directory's slots: read once, written when changed, failures kept."""

    directory: Path
    writes: bool = True  # False on a dry run: read, set nothing aside, write nothing
    _values: dict[str, Any] = field(default_factory=dict)  # slot name -> value in force
    _saved: dict[str, str] = field(default_factory=dict)  # slot name -> key of what is on disk
    _unsaved: dict[str, KvdevError] = field(default_factory=dict)  # what failed, why

    def get(self, slot: Slot[T]) -> T:
        """The slot's value: read from disk the first time, the last ``put`` after."""
        if slot.name not in self._values:
            value = self._load(slot)
            self._values[slot.name] = value
            self._saved[slot.name] = slot.key(value)
        held: T = self._values[slot.name]
        return held

    def put(self, slot: Slot[T], value: T) -> KvdevError | None:
        """Make ``value`` the slot's; write it when it changed or failed before. Why not, if not.

        An empty value removes the file. A dry run keeps nothing and writes nothing.
        """
        if not self.writes:
            return None
        self._values[slot.name] = value
        key = slot.key(value)
        if self._saved.get(slot.name) == key and slot.name not in self._unsaved:
            return None
        path = self.directory / slot.name
        empty = slot.empty(value)
        try:
            if empty:
                path.unlink(missing_ok=True)
            else:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
                text = key if slot.compare is None else slot.encode(value)
                write_atomic(path, text.encode(), mode=0o644)
        except OSError as e:
            doing = f"{'remove' if empty else 'save'} the {slot.what}{slot.saving}"
            error = os_error(e, doing, path)
            self.failed(slot.name, error)
            return error
        self.failed(slot.name, None)
        self._saved[slot.name] = key
        return None

    def failed(self, what: str, error: KvdevError | None) -> None:
        """Keep ``error`` as why ``what`` is not saved (warned once); None: it is saved now.

        For state kept beside the slots too (the mark files).
        """
        if error is None:
            self._unsaved.pop(what, None)
            return
        before = self._unsaved.get(what)
        if before is None or str(before) != str(error):
            log.warning("%s", error)
        self._unsaved[what] = error

    def unsaved(self, what: str | None = None) -> tuple[KvdevError, ...]:
        """Why state is not saved (of ``what`` only, a slot's name or a key of ``failed``)."""
        if what is not None:
            found = self._unsaved.get(what)
            return () if found is None else (found,)
        return tuple(self._unsaved.values())

    def tidy(self) -> list[Path]:
        """Remove what writes of a killed agent left of every slot; the files removed.

        Raises OSError.
        """
        if not self.writes:
            return []
        return [path for slot in SLOTS for path in remove_leftovers(self.directory, slot.name)]

    def _load(self, slot: Slot[T]) -> T:
        """The slot's value on disk; empty when there is none, it cannot be read, or is bad."""
        path = self.directory / slot.name
        nothing = slot.decode({})
        try:
            data = read_beneath(self.directory, slot.name, slot.bound)
        except FileNotFoundError:
            return nothing
        except RefusedError as e:
            self._set_aside(slot, path, e.reason)
            return nothing
        except OSError as e:
            log.warning("cannot read the %s %s: %s; not used", slot.what, path, e.strerror or e)
            return nothing
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested too deep
            self._set_aside(slot, path, f"not JSON: {e}")
            return nothing
        if not isinstance(body, dict):
            self._set_aside(slot, path, f"a JSON {type(body).__name__}, not an object")
            return nothing
        return slot.decode(body)

    def _set_aside(self, slot: Slot[Any], path: Path, why: str) -> None:
        """Move a bad file to ``<name>.corrupt`` (replacing an older one), warning once."""
        if not self.writes:
            log.warning("ignoring the %s %s (%s); a dry run leaves it there", slot.what, path, why)
            return
        aside = path.with_name(f"{path.name}.corrupt")
        try:
            path.replace(aside)
        except OSError as e:
            reason = e.strerror or e
            log.warning(
                "ignoring the %s %s (%s); cannot move it aside: %s", slot.what, path, why, reason
            )
            return
        log.warning("ignoring the %s %s (%s); kept as %s", slot.what, path, why, aside)
