"""The guest's plain reader judged by the host's pydantic models: the same stream read both ways.

``read_both(data, kind)`` reads a stream with ``decode_stream`` twice: with the plain values
the guest uses, and with the same stream logic over the pydantic models of ``pydantic_schema``
(each object validated by pydantic, strict, its errors turned into problems as the host turns
them). ``verdict`` says whether the two agree (every problem, warning and decoded value the
same) and how: ``"read"`` or ``"refused"``. ``PLAIN_DIFFERS`` names where they may differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

from pydantic import BaseModel, ValidationError

from kvdev.errors import SchemaError
from kvdev.host.k8s import model as pyd_base
from kvdev.schema import configdrive, plain, stream
from pydantic_schema import configdrive as pyd_configdrive
from pydantic_schema import hints as pyd_hints
from pydantic_schema import reading as pyd_reading

# Where the plain reader and the pydantic models may differ, on purpose: none so far. Each
# entry names the condition; judge() would return its key. (docs/development/upstream-judges.md)
PLAIN_DIFFERS: dict[str, str] = {}


def _adapter(model: type[BaseModel]) -> type:
    """A class with a plain ``decode`` that validates with the pydantic ``model``."""

    class Pydantic:
        @classmethod
        def decode(cls, value: object, loc: plain.Loc, errors: plain.Errors) -> object:
            try:
                return model.model_validate(value, strict=True)
            except ValidationError as e:
                for err in e.errors(include_url=False):
                    msg = str(err["msg"]).removeprefix("Value error, ")
                    if err["type"] == "missing":
                        msg = plain.MISSING_FIELD
                    errors.append(((*loc, *err["loc"]), msg))
                return plain.BAD

    Pydantic.__name__ = f"Pydantic{model.__name__}"
    return Pydantic


def _unknown(value: Any, loc: plain.Loc = ()) -> Any:
    if isinstance(value, BaseModel):
        return pyd_base.unknown_fields(value, loc)
    return plain.unknown_fields(value, loc)


PYDANTIC_KINDS = {
    stream.DEVICE_METADATA.kind: stream.DocumentKind(
        stream.DEVICE_METADATA.group,
        stream.DEVICE_METADATA.kind,
        stream.DEVICE_METADATA.versions,
        _adapter(pyd_reading.DeviceMetadata),  # type: ignore[arg-type]
        pyd_reading.conformance,
        stream.DEVICE_METADATA.go_layout,
    ),
    stream.GUEST_HINTS.kind: stream.DocumentKind(
        stream.GUEST_HINTS.group,
        stream.GUEST_HINTS.kind,
        stream.GUEST_HINTS.versions,
        _adapter(pyd_hints.GuestHints),  # type: ignore[arg-type]
    ),
}
PYDANTIC_CONFIG_DRIVE = _adapter(pyd_configdrive.ConfigDriveMetadata)


@dataclass(frozen=True)
class Outcome:
    """What one reader made of a stream: its problems, or its reading and warnings."""

    refused: tuple[object, ...] = ()
    read: tuple[object, ...] = ()


def _outcome(run: Callable[[], Any]) -> Outcome:
    with mock.patch.object(stream, "unknown_fields", _unknown):
        try:
            got = run()
        except SchemaError as e:
            return Outcome(refused=tuple(e.problems))
    if isinstance(got, tuple):  # decode_document: (document, warnings)
        doc, warnings = got
        return Outcome(read=(doc.to_json_dict(), warnings))
    return Outcome(
        read=(
            got.document.to_json_dict(),
            got.api_version,
            got.index,
            got.skipped,
            got.warnings,
            got.fallback,
        )
    )


def read_both(data: bytes, kind: str) -> tuple[Outcome, Outcome]:
    """(plain, pydantic) outcomes of reading ``data`` as ``kind`` ("ConfigDrive" for one)."""
    if kind == "ConfigDrive":
        return (
            _outcome(lambda: stream.decode_document(data, configdrive.ConfigDriveMetadata)),
            _outcome(lambda: stream.decode_document(data, PYDANTIC_CONFIG_DRIVE)),  # type: ignore[arg-type]
        )
    ours = stream.DEVICE_METADATA if kind == stream.DEVICE_METADATA.kind else stream.GUEST_HINTS
    return (
        _outcome(lambda: stream.decode_stream(data, ours, source="f")),
        _outcome(lambda: stream.decode_stream(data, PYDANTIC_KINDS[kind], source="f")),
    )


def verdict(data: bytes, kind: str) -> str:
    """``"read"`` or ``"refused"`` when both readers agree in every detail; else fail."""
    ours, theirs = read_both(data, kind)
    assert ours == theirs, f"plain and pydantic readers differ on {data!r}"
    return "refused" if ours.refused else "read"


TALLY: Counter[tuple[str, str]] = Counter()  # (stream family, verdict) -> count


def print_counts(request: Any, title: str, tally: Counter[tuple[str, str]]) -> None:
    """Print ``tally`` past pytest's capture (at a module fixture's teardown)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print()
        for (family, outcome), count in sorted(tally.items()):
            print(f"{title}: {family}: {count} {outcome}")
