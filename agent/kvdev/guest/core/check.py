"""``kvdev metadata validate``'s core: raw files in, a report and its renderings out.

Pure: it takes ``RawFile`` values (bytes already read) and returns text or JSON-ready data.
The JSON shape (``kind: MetadataValidation``, camelCase keys) is part of the CLI contract;
fields may be added, never renamed or removed without a new ``apiVersion``.

Two verdicts, kept apart: *valid* (kvdev can use every file and act on every device: what the
agent would do), and *conforming* (no value breaks a rule every conforming writer follows,
although upstream's reader accepts it: a driver bug to report). ``exit_code`` is 0 for both,
1 for valid but not conforming, 2 for not valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, Final

from kvdev.errors import Problem, Severity
from kvdev.guest.core.observed import RawFile
from kvdev.schema import FileResult, Role, check_file, metadata_location
from kvdev.schema.described import NOT_WRITTEN, DescribedDevice
from kvdev.schema.hints import GuestHints
from kvdev.schema.plain import camel
from kvdev.schema.reading import DeviceMetadata

REPORT_API_VERSION: Final = "kvdev.io/v1alpha1"


@dataclass(frozen=True)
class Report:
    """The outcome of validating some files."""

    files: tuple[FileResult, ...]
    ignored: tuple[str, ...]

    @property
    def valid(self) -> bool:
        """True when every file is usable and kvdev can act on every device it describes."""
        return all(f.ok and all(d.usable for d in f.described) for f in self.files)

    @property
    def conforming(self) -> bool:
        """True when no value breaks a rule conforming writers follow (upstream's validation)."""
        return not any(p.upstream_invalid for f in self.files for p in f.warnings)

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


# --------------------------------------------------------------------------- text


def _device_line(d: DescribedDevice) -> str:
    facts = [f"{d.request}: {d.driver}/{d.pool}/{d.name}"]
    if not d.usable:
        facts.append("UNUSABLE (the agent leaves it alone)")
    elif d.deferred:
        facts.append(f"PENDING ({NOT_WRITTEN})")
    if d.pci_address:
        facts.append(f"pci {d.pci_address}")
    if d.mdev_uuid:
        facts.append(f"mdev {d.mdev_uuid}")
    if d.numa_nodes:
        facts.append("numa " + ",".join(str(n) for n in d.numa_nodes))
    if d.mac:
        facts.append(f"mac {d.mac}")
    if d.interface_name:
        facts.append(f"if {d.interface_name}")
    if d.ips:
        facts.append("ips " + ",".join(d.ips))
    if d.mtu is not None:
        facts.append(f"driver mtu {d.mtu}")
    return "  ".join(facts)


def _summary_line(f: FileResult) -> str:
    doc = f.document
    parts = [f.role.value]
    if f.api_version:
        parts.append(f.api_version)
    if f.skipped:
        parts.append(f"(skipped {', '.join(f.skipped)})")
    if f.fallback:
        parts.append(f"(a newer version was unusable: {f.fallback})")
    if isinstance(doc, DeviceMetadata):
        namespace = doc.metadata.namespace if doc.metadata else None
        parts.append(f"claim {namespace or '-'}/{doc.claim}, generation {doc.generation}")
        parts.append(f"{len(f.described)} device(s)")
    elif f.role is Role.GUEST_HINTS and doc is not None:
        parts.append(f"{len(getattr(doc, 'devices', []))} hint(s)")
    elif f.role is Role.CONFIG_DRIVE and doc is not None:
        parts.append(f"{len(getattr(doc, 'devices', None) or [])} tagged device(s)")
    return ", ".join(parts)


def _where(p: Problem) -> str:
    at = [f"stream[{p.index}]"] if p.index is not None else []
    if p.path:
        at.append(p.path)
    return ("[upstream] " if p.upstream_invalid else "") + ": ".join([*at, p.message])


def render_text(report: Report, *, color: bool = False, verbose: bool = False) -> str:
    """The human report: one block per file, then a one-line summary."""

    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if color else text

    lines: list[str] = []
    for f in report.files:
        usable = f.ok and all(d.usable for d in f.described)
        mark = paint("32", "valid  ") if usable else paint("1;31", "INVALID")
        lines.append(f"{mark} {f.source}")
        if f.ok:
            lines.append(f"        {_summary_line(f)}")
            for d in f.described:
                lines.append(f"        {_device_line(d)}")
                lines.extend(f"          note: {n}" for n in d.notes)
                lines.extend(f"          {paint('1;31', 'error')}: {_where(p)}" for p in d.problems)
        lines.extend(f"        {paint('1;31', 'error')}: {_where(p)}" for p in f.errors)
        lines.extend(f"        {paint('33', 'warning')}: {_where(p)}" for p in f.warnings)
    if verbose:
        lines.extend(f"ignored {path}" for path in report.ignored)
    invalid = sum(1 for f in report.files if not (f.ok and all(d.usable for d in f.described)))
    upstream = sum(1 for f in report.files for p in f.warnings if p.upstream_invalid)
    summary = (
        f"{len(report.files)} file(s): {len(report.files) - invalid} valid, {invalid} invalid, "
        f"{report.warning_count} warning(s)"
    )
    if upstream:
        summary += f", {upstream} of them values a conforming writer does not write ([upstream])"
    if report.ignored:
        summary += f"; {len(report.ignored)} unrelated file(s) ignored"
    if not report.files:
        summary = "no metadata, hints or config-drive files found" + (
            f" ({len(report.ignored)} unrelated file(s) ignored)" if report.ignored else ""
        )
    lines.append(summary)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- JSON


def _problem_json(p: Problem) -> dict[str, Any]:
    out: dict[str, Any] = {"message": p.message}
    if p.index is not None:
        out["index"] = p.index
    if p.path:
        out["path"] = p.path
    if p.upstream_invalid:
        out["upstreamInvalid"] = True
    return out


def _device_json(d: DescribedDevice) -> dict[str, Any]:
    plain = {
        f.name: getattr(d, f.name) for f in fields(d) if f.name not in {"problems", "rejected"}
    }
    out = {camel(k): (list(v) if isinstance(v, tuple) else v) for k, v in plain.items()}
    out["ref"] = d.ref
    out["usable"] = d.usable
    out["problems"] = [_problem_json(p) for p in d.problems]
    return out


def _file_json(f: FileResult) -> dict[str, Any]:
    valid = f.ok and all(d.usable for d in f.described)
    out: dict[str, Any] = {"path": f.source, "role": f.role.value, "valid": valid}
    if f.api_version:
        out["apiVersion"] = f.api_version
    if f.skipped:
        out["skippedVersions"] = list(f.skipped)
    if f.fallback:
        out["fallback"] = f.fallback
    if f.location is not None:
        out["location"] = {
            "template": f.location.template,
            "claim": f.location.claim,
            "request": f.location.request,
            "driver": f.location.driver,
        }
    out["errors"] = [_problem_json(p) for p in f.errors]
    out["warnings"] = [_problem_json(p) for p in f.warnings]
    if f.document is not None:
        out["document"] = f.document.to_json_dict()
    if f.role is Role.DEVICE_METADATA and f.ok:
        out["devices"] = [_device_json(d) for d in f.described]
    return out


def render_json(report: Report) -> dict[str, Any]:
    """The machine-readable report (``--json``)."""
    return {
        "apiVersion": REPORT_API_VERSION,
        "kind": "MetadataValidation",
        "valid": report.valid,
        "conforming": report.conforming,
        "files": [_file_json(f) for f in report.files],
        "ignored": list(report.ignored),
    }
