r"""JSON text exactly as Go's ``encoding/json`` writes a typed value with ``MarshalIndent``.

Upstream's writers marshal Go structs: keys come in struct field order (map keys sorted),
``omitempty`` drops empty values, a pointer field is dropped only when nil, and
``MarshalIndent(v, "", "  ")`` lays the text out two spaces per level with ``": "`` after a key.
Strings are UTF-8 as they are, except that ``<``, ``>``, ``&``, U+2028 and U+2029 are escaped
(``\u003c`` ...), as ``encoding/json`` does by default; control characters are escaped as
Python escapes them (``\n``, ``\t``, ``\b``, ``\f``, ``\r``, else ``\u00XX``, lower-case
hex), which is what Go has written since 1.22.

A ``Struct`` describes one Go type: its JSON field names in declaration order and each one's
tag (``ALWAYS``, ``OMITEMPTY``, ``POINTER``). ``go_value`` puts plain JSON data into that shape
(missing always-fields get their zero value), ``marshal_indent`` writes it.

Pure: no I/O.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared


class Tag(enum.Enum):
    """How a struct field is written."""

    ALWAYS = "always"  # no omitempty: written even when zero
    OMITEMPTY = "omitempty"  # dropped when null, "", 0, false, [] or {}
    POINTER = "pointer"  # a pointer with omitempty: dropped only when null (nil)


ALWAYS: Final = Tag.ALWAYS
OMITEMPTY: Final = Tag.OMITEMPTY
POINTER: Final = Tag.POINTER


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ListOf:
    """A Go slice of ``item``."""

    item: Shape


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class MapOf:
    """A Go map from string keys to ``value`` (written with its keys sorted)."""

    value: Shape


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Field:
    """One struct field: its JSON name, its tag, the shape of its value, its zero value."""

    name: str
    tag: Tag = OMITEMPTY
    shape: Shape = None
    zero: object = ""


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Struct:
    """A Go struct: its fields in declaration order."""

    fields: tuple[Field, ...]


Shape = Struct | ListOf | MapOf | None  # None: a scalar (string, number, bool)

_HTML_SAFE: Final = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _empty(value: object) -> bool:
    return value is None or (value in ("", 0, False, [], {}) and not isinstance(value, float))


def go_value(value: object, shape: Shape) -> object:
    """``value`` (plain JSON data) laid out as Go would marshal a value of type ``shape``."""
    if isinstance(shape, Struct):
        data = value if isinstance(value, Mapping) else {}
        out: dict[str, object] = {}
        for f in shape.fields:
            item = data.get(f.name)
            if f.tag is POINTER and item is None:
                continue
            if f.tag is OMITEMPTY and _empty(item):
                continue
            if item is None:
                item = f.zero if f.shape is None else ({} if isinstance(f.shape, Struct) else None)
            out[f.name] = go_value(item, f.shape)
        return out
    if isinstance(shape, ListOf):
        return None if value is None else [go_value(v, shape.item) for v in _as_list(value)]
    if isinstance(shape, MapOf):
        if not isinstance(value, Mapping):
            return None
        return {k: go_value(value[k], shape.value) for k in sorted(value)}
    return value


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def marshal_indent(value: object) -> str:
    """``json.MarshalIndent(value, "", "  ")``: no trailing newline, as Go returns it."""
    return json.dumps(value, indent=2, ensure_ascii=False).translate(_HTML_SAFE)
