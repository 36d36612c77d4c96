"""What the agent currently believes about its input files: the last good content of each.

``update`` folds one scan (``RawFile`` values, already read) into the previous belief. A file's
valid content stays in force until valid content replaces it, or until a complete directory
listing shows the file gone. Invalid or unreadable content never replaces it: it becomes that
file's current error instead. So a torn or failed read is never taken for "no devices", and a
bad edit leaves the last good state in force while status shows what is wrong with the new one.
An empty metadata file is the first state of a driver's deferred metadata (its request shows
Pending); once content was in force, an empty file (a writer that truncates first) leaves it
in force.

The same holds per device inside a file that is used: a device whose new description kvdev
cannot act on (``DescribedDevice.problems``) keeps its last good description in force, marked
``rejected`` with the problems, while the other devices of the file take their new content.

Pure: no I/O and no clocks. Each ``update`` is one scan, counted; entries say in which scan
their content was read, which is what status can show instead of a time. A file whose bytes
(and place) are those of the last scan is not checked again: its last result is taken (the
check is a function of them), so a pass that link events started parses nothing unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Final

from kvdev._records import compared
from kvdev.errors import Problem
from kvdev.guest.core.check import check_raw, hint_clashes
from kvdev.guest.core.observed import RawFile
from kvdev.schema import ConfigDriveMetadata, FileResult, GuestHints, Role
from kvdev.schema.configdrive import TaggedDevice
from kvdev.schema.described import DescribedDevice
from kvdev.schema.hints import DeviceHint, ProtectedNic
from kvdev.schema.reading import DeviceMetadata

MAX_WARNINGS: Final = 100  # upstream-invalid values shown in the status


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Entry:
    """One input file as the agent believes it.

    Attributes:
        source: the file's path, as the reader gave it (the key).
        role: what the file is.
        used: the result of the last valid content, which is in force; None when the file
            has not been valid since it appeared.
        used_since: the scan that first read the content in force.
        rejected: the result of the current content when it is invalid or unreadable; None
            when the current content is the one in force.
        rejected_since: the first scan of the current run of bad reads.
    """

    source: str
    role: Role
    used: FileResult | None = None
    used_since: int | None = None
    rejected: FileResult | None = None
    rejected_since: int | None = None

    @property
    def problems(self) -> tuple[Problem, ...]:
        """Why the current content is not used (empty when it is)."""
        return self.rejected.errors if self.rejected is not None else ()

    @property
    def generation(self) -> int | None:
        """``metadata.generation`` of the content in force, for the kinds that carry one."""
        doc = self.used.document if self.used is not None else None
        if isinstance(doc, DeviceMetadata):
            return doc.generation
        if isinstance(doc, GuestHints):
            return doc.metadata.generation
        return None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Sources:
    """Every input file the agent knows, in path order, and how many scans made this view.

    ``Sources()`` is the belief before the first scan: nothing known.
    """

    scan: int = 0
    entries: tuple[Entry, ...] = ()
    # The last scan's check of each file read: (its place, role and a digest of its bytes).
    checked: dict[str, tuple[tuple[str | None, Role, bytes], FileResult]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def entry(self, source: str) -> Entry | None:
        """The entry of one file, if it is known."""
        return next((e for e in self.entries if e.source == source), None)

    def described(self) -> tuple[DescribedDevice, ...]:
        """Every described device of the DeviceMetadata content in force, in path order."""
        return tuple(d for r in self._used(Role.DEVICE_METADATA) for d in r.described)

    def hints(self) -> tuple[DeviceHint, ...]:
        """The device hints of the GuestHints content in force."""
        return tuple(
            h
            for r in self._used(Role.GUEST_HINTS)
            if isinstance(r.document, GuestHints)
            for h in r.document.devices
        )

    def protected(self) -> tuple[tuple[str, ProtectedNic], ...]:
        """The NICs the GuestHints content in force protects: (where, the entry)."""
        return tuple(
            (f"hints {r.source} protectedNICs[{i}]", p)
            for r in self._used(Role.GUEST_HINTS)
            if isinstance(r.document, GuestHints)
            for i, p in enumerate(r.document.protected_nics or ())
        )

    def tagged(self) -> tuple[TaggedDevice, ...]:
        """The tagged devices of the config-drive content in force."""
        return tuple(
            t
            for r in self._used(Role.CONFIG_DRIVE)
            if isinstance(r.document, ConfigDriveMetadata)
            for t in r.document.tagged()
        )

    def errors(self) -> dict[str, tuple[Problem, ...]]:
        """Per file (path order), why its current content is not used; only files with errors."""
        return {e.source: e.problems for e in self.entries if e.rejected is not None}

    def upstream_warnings(self) -> tuple[Problem, ...]:
        """The values of the content in force that no conforming writer writes.

        Names that are no DNS label or subdomain among them (upstream's API server would refuse
        such a claim, request, driver, pool or device), at most ``MAX_WARNINGS``, in path order:
        warnings only, nothing is refused for them.
        """
        found = (
            p
            for e in self.entries
            if e.used is not None
            for p in e.used.warnings
            if p.upstream_invalid
        )
        return tuple(islice(found, MAX_WARNINGS))

    def hint_conflicts(self) -> tuple[Problem, ...]:
        """Hints of two GuestHints files in force that clash (``check.hint_clashes``)."""
        return hint_clashes(
            (e.source, e.used.document)
            for e in self.entries
            if e.role is Role.GUEST_HINTS
            and e.used is not None
            and isinstance(e.used.document, GuestHints)
        )

    def device_rejections(self) -> tuple[Problem, ...]:
        """Why newer descriptions of devices kept at their last good one were not used."""
        return tuple(p for d in self.described() for p in d.rejected)

    def _used(self, role: Role) -> Iterator[FileResult]:
        for e in self.entries:
            if e.role is role and e.used is not None:
                yield e.used


def update(previous: Sources, raws: Sequence[RawFile], *, listing_complete: bool) -> Sources:
    """Fold one scan into the previous belief.

    Args:
        previous: the belief before this scan.
        raws: the files this scan found (read, or with the reason they could not be read).
            Unrelated files are ignored.
        listing_complete: True when every directory listing of the scan succeeded, so a known
            file missing from ``raws`` is gone. When False such a file is kept as it was.

    Returns:
        The new belief: valid files replace their entry (and clear its error); invalid or
        unreadable ones keep the content in force and record the error.
    """
    scan = previous.scan + 1
    before = {e.source: e for e in previous.entries}
    now = {} if listing_complete else dict(before)
    checked: dict[str, tuple[tuple[str | None, Role, bytes], FileResult]] = {}
    for raw in raws:
        if raw.role is not Role.UNRELATED:
            result = _checked(previous.checked, raw, checked)
            now[raw.source] = _fold(before.get(raw.source), raw, result, scan)
    entries = tuple(sorted(now.values(), key=lambda e: e.source.split("/")))
    return Sources(scan, entries, checked)


def _checked(
    last: dict[str, tuple[tuple[str | None, Role, bytes], FileResult]],
    raw: RawFile,
    into: dict[str, tuple[tuple[str | None, Role, bytes], FileResult]],
) -> FileResult:
    """``check_raw(raw)``, or the last scan's result for the same place, role and bytes."""
    if raw.data is None:
        return check_raw(raw)
    key = (raw.relpath, raw.role, hashlib.blake2b(raw.data, digest_size=16).digest())
    found = last.get(raw.source)
    result = found[1] if found is not None and found[0] == key else check_raw(raw)
    into[raw.source] = (key, result)
    return result


def _fold(old: Entry | None, raw: RawFile, result: FileResult, scan: int) -> Entry:
    if result.pending and old is not None and old.used is not None and not old.used.pending:
        return replace(old, rejected=None, rejected_since=None)  # an empty file: torn? keep it
    if result.ok:
        result = _keep_last_good_devices(old.used if old else None, result)
        unchanged = old is not None and old.used == result
        return Entry(raw.source, raw.role, result, old.used_since if old and unchanged else scan)
    if old is None:
        return Entry(raw.source, raw.role, rejected=result, rejected_since=scan)
    since = old.rejected_since if old.rejected is not None else scan
    return Entry(raw.source, raw.role, old.used, old.used_since, result, since)


def _keep_last_good_devices(old: FileResult | None, new: FileResult) -> FileResult:
    """``new``, with each unusable device replaced by its last good description, if any."""
    if old is None or all(d.usable for d in new.described):
        return new
    last_good = {d.key: d for d in old.described if d.usable}
    described = tuple(
        replace(last_good[d.key], rejected=d.problems) if not d.usable and d.key in last_good else d
        for d in new.described
    )
    return replace(new, described=described)
