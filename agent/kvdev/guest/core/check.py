"""``kvdev metadata validate``'s core: raw files in, a report and its renderings out.

Pure: it takes ``RawFile`` values (bytes already read) and returns text or JSON-ready data.
The JSON shape (``kind: MetadataValidation``, camelCase keys) is part of the CLI contract;
fields may be added, never renamed or removed without a new ``apiVersion``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final

from pydantic.alias_generators import to_camel

from kvdev.errors import Problem
from kvdev.guest.core.observed import RawFile
from kvdev.schema import FileResult, Role, check_file, metadata_location
from kvdev.schema.described import DescribedDevice

REPORT_API_VERSION: Final = "kvdev.io/v1alpha1"


@dataclass(frozen=True)
class Report:
    """The outcome of validating some files."""

    files: tuple[FileResult, ...]
    ignored: tuple[str, ...]

    @property
    def valid(self) -> bool:
        """True when every file read is valid (warnings allowed)."""
        return all(f.ok for f in self.files)

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
    return check_file(raw.source, raw.role, raw.data, location)


def build(raws: Iterable[RawFile]) -> Report:
    """Validate every relevant file; list the unrelated ones as ignored."""
    files: list[FileResult] = []
    ignored: list[str] = []
    for raw in raws:
        if raw.role is Role.UNRELATED and raw.problem is None:
            ignored.append(raw.source)
        else:
            files.append(check_raw(raw))
    return Report(tuple(files), tuple(ignored))


# --------------------------------------------------------------------------- text


def _device_line(d: DescribedDevice) -> str:
    facts = [f"{d.request}: {d.driver}/{d.pool}/{d.name}"]
    if d.pci_address:
        facts.append(f"pci {d.pci_address}")
    if d.numa_nodes:
        facts.append("numa " + ",".join(str(n) for n in d.numa_nodes))
    if d.mac:
        facts.append(f"mac {d.mac}")
    if d.interface_name:
        facts.append(f"if {d.interface_name}")
    if d.ips:
        facts.append("ips " + ",".join(d.ips))
    return "  ".join(facts)


def _summary_line(f: FileResult) -> str:
    doc = f.document
    parts = [f.role.value]
    if f.api_version:
        parts.append(f.api_version)
    if f.skipped:
        parts.append(f"(skipped {', '.join(f.skipped)})")
    if f.role is Role.DEVICE_METADATA and doc is not None:
        meta = getattr(doc, "metadata", None)
        if meta is not None:
            parts.append(f"claim {meta.namespace or '-'}/{meta.name}, generation {meta.generation}")
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
    return ": ".join([*at, p.message])


def render_text(report: Report, *, color: bool = False, verbose: bool = False) -> str:
    """The human report: one block per file, then a one-line summary."""

    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if color else text

    lines: list[str] = []
    for f in report.files:
        mark = paint("32", "valid  ") if f.ok else paint("1;31", "INVALID")
        lines.append(f"{mark} {f.source}")
        if f.ok:
            lines.append(f"        {_summary_line(f)}")
            lines.extend(f"        {_device_line(d)}" for d in f.described)
        lines.extend(f"        {paint('1;31', 'error')}: {_where(p)}" for p in f.errors)
        lines.extend(f"        {paint('33', 'warning')}: {_where(p)}" for p in f.warnings)
    if verbose:
        lines.extend(f"ignored {path}" for path in report.ignored)
    invalid = sum(1 for f in report.files if not f.ok)
    summary = (
        f"{len(report.files)} file(s): {len(report.files) - invalid} valid, {invalid} invalid, "
        f"{report.warning_count} warning(s)"
    )
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
    return out


def _device_json(d: DescribedDevice) -> dict[str, Any]:
    out = {to_camel(k): (list(v) if isinstance(v, tuple) else v) for k, v in asdict(d).items()}
    out["ref"] = d.ref
    return out


def _file_json(f: FileResult) -> dict[str, Any]:
    out: dict[str, Any] = {"path": f.source, "role": f.role.value, "valid": f.ok}
    if f.api_version:
        out["apiVersion"] = f.api_version
    if f.skipped:
        out["skippedVersions"] = list(f.skipped)
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
        "files": [_file_json(f) for f in report.files],
        "ignored": list(report.ignored),
    }
