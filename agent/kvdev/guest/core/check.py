"""``kvdev metadata validate``'s verdicts and the agent's check of one file: raw files in, a report.

Pure: it takes ``RawFile`` values (bytes already read) and returns a ``Report``; the agent's
sources (``core.sources``) check each file with ``check_raw``. The report's text and JSON are
drawn by ``views.validation``.

Two verdicts, kept apart: *valid* (kvdev can use every file and act on every device: what the
agent would do), and *conforming* (no value breaks a rule every conforming writer follows,
although upstream's reader accepts it: a driver bug to report). ``exit_code`` is 0 for both,
1 for valid but not conforming, 2 for not valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvdev._records import compared
from kvdev.errors import Problem, Severity
from kvdev.guest.core.observed import RawFile
from kvdev.schema import FileResult, Role, check_file, metadata_location
from kvdev.schema.hints import GuestHints


@compared
@dataclass(frozen=True, eq=False, repr=False)
class Report:
    """The outcome of validating some files."""

    files: tuple[FileResult, ...]
    ignored: tuple[str, ...]

    @property
    def valid(self) -> bool:
        """True when every file is usable and kvdev can act on every device it describes."""
        return all(file_valid(f) for f in self.files)

    @property
    def invalid_count(self) -> int:
        """Files that are not valid (``file_valid``)."""
        return sum(1 for f in self.files if not file_valid(f))

    @property
    def upstream_count(self) -> int:
        """Warnings of values a conforming writer does not write (upstream's validation)."""
        return sum(1 for f in self.files for p in f.warnings if p.upstream_invalid)

    @property
    def conforming(self) -> bool:
        """True when no value breaks a rule conforming writers follow (upstream's validation)."""
        return self.upstream_count == 0

    @property
    def exit_code(self) -> int:
        """0 valid and conforming, 1 valid but not conforming, 2 not valid."""
        if not self.valid:
            return 2
        return 0 if self.conforming else 1

    @property
    def warning_count(self) -> int:
        """Warnings over all files."""
        return sum(len(f.warnings) for f in self.files)


def file_valid(f: FileResult) -> bool:
    """The file is usable and kvdev can act on every device it describes."""
    return f.ok and all(d.usable for d in f.described)


def check_raw(raw: RawFile) -> FileResult:
    """Validate one raw file; a read failure or a bad path is an error on that file."""
    if raw.data is None:
        problem = raw.problem or Problem("cannot read", raw.source)
        return FileResult(raw.source, raw.role, errors=(problem,))
    location = None
    if raw.role is Role.DEVICE_METADATA and raw.relpath is not None:
        try:
            location = metadata_location(raw.relpath)
        except ValueError as e:
            return FileResult(raw.source, raw.role, errors=(Problem(f"path: {e}", raw.source),))
    return check_file(raw.source, raw.role, raw.data, location, stream_key=raw.stream_key)


def build(raws: Iterable[RawFile]) -> Report:
    """Validate every relevant file; list the unrelated ones as ignored.

    GuestHints files that clash with one another (``hint_clashes``) are invalid, as a clash
    inside one file makes that file.
    """
    files: list[FileResult] = []
    ignored: list[str] = []
    for raw in raws:
        if raw.role is Role.UNRELATED and raw.problem is None:
            ignored.append(raw.source)
        elif raw.problem is not None and raw.problem.severity is Severity.WARNING:
            files.append(FileResult(raw.source, raw.role, warnings=(raw.problem,)))
        else:
            files.append(check_raw(raw))
    clashes: dict[str, list[Problem]] = {}
    hints = [(f.source, f.document) for f in files if isinstance(f.document, GuestHints)]
    for problem in hint_clashes(hints):
        clashes.setdefault(problem.source, []).append(problem)
    files = [
        FileResult(f.source, f.role, errors=tuple(clashes[f.source])) if f.source in clashes else f
        for f in files
    ]
    return Report(tuple(files), tuple(ignored))


def hint_clashes(hints: Iterable[tuple[str, GuestHints]]) -> tuple[Problem, ...]:
    """Hints of different GuestHints files that clash, as they would inside one file.

    Inside one file, two hints selecting the same devices, or asking for the same interface
    name, make the file invalid (``GuestHints``). Across files (two hints keys of one ConfigMap
    volume, a tree's hints file and ``--hints``) the same clash is an error on the later file
    (path order), naming the earlier one; the hints that select the same devices tie, so the
    agent applies neither (``matching.hint_for``), never silently.
    """
    selectors: dict[tuple[object, ...], tuple[str, int]] = {}
    names: dict[str, tuple[str, int]] = {}
    out: list[Problem] = []
    for source, doc in sorted(hints, key=lambda pair: pair[0].split("/")):
        for i, hint in enumerate(doc.devices):
            at = f"devices[{i}]"
            first = selectors.setdefault(hint.selector(), (source, i))
            if first[0] != source:
                message = f"{at} selects the same device(s) as devices[{first[1]}] of {first[0]}"
                out.append(Problem(message, source, path=at))
            name = hint.network.interface_name if hint.network else None
            held = names.setdefault(name, (source, i)) if name is not None else (source, i)
            if held[0] != source:
                message = (
                    f"{at} asks for interface name {name!r}, as devices[{held[1]}] of {held[0]}"
                )
                out.append(Problem(message, source, path=at))
    return tuple(out)
