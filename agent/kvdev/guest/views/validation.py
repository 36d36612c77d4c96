"""``kvdev metadata validate``'s report drawn for people (text, ANSI colours) and machines (JSON).

Pure: a ``core.check.Report`` in, text or JSON-ready data out; the verdicts are the core's. The
JSON shape (``kind: MetadataValidation``, camelCase keys) is part of the CLI contract: fields
may be added, never renamed or removed without a new ``apiVersion``.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Final

from kvdev.errors import Problem
from kvdev.guest.core.check import Report, file_valid
from kvdev.schema import FileResult, Role
from kvdev.schema.described import NOT_WRITTEN, DescribedDevice
from kvdev.schema.plain import camel
from kvdev.schema.reading import DeviceMetadata

REPORT_API_VERSION: Final = "kvdev.io/v1alpha1"


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
        mark = paint("32", "valid  ") if file_valid(f) else paint("1;31", "INVALID")
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
    invalid, upstream = report.invalid_count, report.upstream_count
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
    out: dict[str, Any] = {"path": f.source, "role": f.role.value, "valid": file_valid(f)}
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
