"""The pydantic base every kvdev document model derives from, and its unknown-field rule.

Rules shared by all documents:

* JSON keys are camelCase (``networkData``), Python attributes snake_case.
* Types are strict, like Go's decoder: ``"3"`` is not an int, ``1.0`` is not an int.
* Models are frozen values.
* Unknown fields are **ignored**, as upstream's decoder does (the apimachinery deserializer is
  not strict): they never fail a document and never reach a re-written file. They are kept on
  the parsed value only so that ``unknown_fields`` can report them as warnings.

No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """Base of the document models: strict, frozen, camelCase, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=False,  # JSON keys only: ``int_`` or ``network_data`` is unknown
        validate_by_alias=True,
        serialize_by_alias=True,
        strict=True,
        frozen=True,
        extra="allow",
        hide_input_in_errors=True,
        defer_build=True,
    )

    @model_serializer(mode="wrap")
    def _drop_unknown(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:  # noqa: ANN401 - the serializer's own contract
        del info
        data = handler(self)
        if isinstance(data, dict):
            for key in self.__pydantic_extra__ or {}:
                data.pop(key, None)
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The document as upstream would write it: camelCase keys, unset optionals omitted."""
        # by_alias explicitly: pydantic < 2.11 (Debian 13 ships 2.10.6) ignores serialize_by_alias.
        data = self.model_dump(mode="json", exclude_none=True, by_alias=True)
        assert isinstance(data, dict)
        return data


class Document(Model):
    """A top-level object of a versioned stream: ``apiVersion`` and ``kind`` come first."""

    api_version: str
    kind: str


def format_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as ``requests[0].devices[1].attributes["a.b/c"]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += "(key)"
        elif part.replace("_", "").isalnum() and part[:1].isalpha():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def unknown_fields(model: BaseModel, loc: tuple[int | str, ...] = ()) -> Iterator[str]:
    """Yield the field path of every unknown (ignored) key anywhere inside ``model``."""
    for key in sorted(model.__pydantic_extra__ or {}):
        yield format_path((*loc, key))
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        here = (*loc, info.alias or name)
        yield from _unknown_in(value, here)


def _unknown_in(value: object, loc: tuple[int | str, ...]) -> Iterator[str]:
    if isinstance(value, BaseModel):
        yield from unknown_fields(value, loc)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _unknown_in(item, (*loc, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _unknown_in(item, (*loc, str(key)))
