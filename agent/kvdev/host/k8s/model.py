"""The pydantic base of the host's Kubernetes and input models, its unknown-field rule, its errors.

Rules shared by all documents:

* JSON keys are camelCase (``networkData``), Python attributes snake_case.
* Types are strict, like Go's decoder: ``"3"`` is not an int, ``1.0`` is not an int.
* Models are frozen values.
* Unknown fields are **ignored**, as upstream's decoder does (the apimachinery deserializer is
  not strict): they never fail a document and never reach a re-written file. They are kept on
  the parsed value only so that ``unknown_fields`` can report them as warnings;
  ``forget_unknown`` lets a holder of many values (the controller's caches) drop them.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainValidator,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from kvdev.errors import Problem, SchemaError
from kvdev.schema.plain import Value, format_path, json_type, read, walk_unknown


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


def _own(value: object) -> tuple[Iterable[str], Iterable[tuple[str, object]]] | None:
    if not isinstance(value, BaseModel):
        return None
    fields = type(value).model_fields.items()
    extras = sorted(value.__pydantic_extra__ or {})
    return extras, [(info.alias or name, getattr(value, name)) for name, info in fields]


def unknown_fields(model: BaseModel, loc: tuple[int | str, ...] = ()) -> Iterator[str]:
    """Yield the field path of every unknown (ignored) key anywhere inside ``model``."""
    return walk_unknown(model, loc, _own)


_NO_EXTRA: dict[str, Any] = {}  # the one empty extras of every compacted model (never written)
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}  # one set per distinct set of fields
_FIELDS_SETS_MAX = 4096  # past that many distinct sets, a model keeps its own


def forget_unknown(value: object) -> None:
    """Drop the unknown fields ``value`` and every model inside it kept, in place.

    For a value no one else holds yet, kept long and never asked for its unknown fields (a
    cache of API objects: a launcher pod's containers, a VMI's status, ``managedFields``): the
    fields it declares stay, read and written as before. What equal models hold alike is held
    once: the empty extras, and each distinct set of the fields set (pydantic copies both
    before changing a copy; a frozen model never changes its own).
    """
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, BaseModel):
            if item.__pydantic_extra__ is not None:
                object.__setattr__(item, "__pydantic_extra__", _NO_EXTRA)
            fields = item.__pydantic_fields_set__
            shared = _FIELDS_SETS.get(frozenset(fields))
            if shared is None and len(_FIELDS_SETS) < _FIELDS_SETS_MAX:
                shared = _FIELDS_SETS.setdefault(frozenset(fields), fields)
            if shared is not None and shared is not fields:
                object.__setattr__(item, "__pydantic_fields_set__", shared)
            todo.extend(v for v in item.__dict__.values() if isinstance(v, BaseModel | list | dict))
        elif isinstance(item, list):
            todo.extend(v for v in item if isinstance(v, BaseModel | list | dict))
        elif isinstance(item, dict):
            todo.extend(v for v in item.values() if isinstance(v, BaseModel | list | dict))


M = TypeVar("M", bound=Model)
V = TypeVar("V", bound=Value)
_B = TypeVar("_B", bound=BaseModel)

# per model class: its field names, and whether ``assemble`` fills it as pydantic would
_LAYOUT: dict[type[BaseModel], tuple[tuple[str, ...], frozenset[str], bool]] = {}


def _fill(cls: type[_B], names: tuple[str, ...], values: dict[str, Any]) -> _B:
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", {name: values.get(name) for name in names})
    object.__setattr__(
        model, "__pydantic_fields_set__", {k for k, v in values.items() if v is not None}
    )
    object.__setattr__(model, "__pydantic_extra__", _NO_EXTRA)
    object.__setattr__(model, "__pydantic_private__", None)
    return model


def assemble(cls: type[_B], **values: Any) -> _B:  # noqa: ANN401 - field values of any type
    """A model from field values that are valid already (unset optional fields: None).

    No validation: for values taken from models validated when they were loaded. Fills the
    model as pydantic's ``model_construct`` does, without its per-field default handling
    (a few microseconds a model), except that fields set to None do not count as set; the
    first model of each class is compared with ``model_construct``'s, which is used instead
    should a pydantic release differ.
    """
    layout = _LAYOUT.get(cls)
    if layout is None:
        fields = cls.model_fields
        names = tuple(fields)
        required = frozenset(n for n, f in fields.items() if f.is_required())
        # the fast fill gives a missing field None: right only where None is its default
        plain = all(
            f.is_required() or (f.default is None and f.default_factory is None)
            for f in fields.values()
        )
        slow = cls.model_construct(**values)
        fast = slow
        same = False
        if plain and required <= values.keys():
            try:
                fast = _fill(cls, names, values)
                same = fast == slow and fast.model_fields_set <= slow.model_fields_set
                same = same and fast.model_dump(exclude_none=True) == slow.model_dump(
                    exclude_none=True
                )
            except Exception:  # noqa: BLE001 - any difference in pydantic's layout: the public way
                same = False
        _LAYOUT[cls] = (names, required, plain and same)
        return fast if same else slow
    names, required, fast_ok = layout
    if fast_ok and required <= values.keys():
        return _fill(cls, names, values)
    return cls.model_construct(**values)


def plain_value(cls: type[V]) -> PlainValidator:
    """A field's validator that reads it as the plain ``kvdev.schema`` value ``cls``.

    Used as ``Annotated[cls, plain_value(cls)]``. Its problems are the field's, at their paths
    inside it, as the plain value reports them.
    """

    def check(value: object) -> V:
        out, errors = read(cls, value)
        if out is None:
            details = [
                InitErrorDetails(
                    type=PydanticCustomError("value_error", "{message}", {"message": message}),
                    loc=loc,
                    input=value,
                )
                for loc, message in errors
            ]
            raise ValidationError.from_exception_data(cls.__name__, details)
        return out

    return PlainValidator(check)


def problems_from(error: ValidationError, *, source: str, index: int | None) -> list[Problem]:
    """Turn a pydantic error into Problems with readable field paths."""
    out = []
    for err in error.errors(include_url=False):
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        out.append(Problem(msg, source, index, format_path(tuple(err["loc"]))))
    return out


def validate_value(value: object, model: type[M], *, source: str, index: int | None) -> M:
    """Validate plain JSON data against a model; SchemaError lists every problem."""
    if not isinstance(value, dict):
        raise SchemaError(
            [Problem(f"expected a JSON object, found {json_type(value)}", source, index)]
        )
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as e:
        raise SchemaError(problems_from(e, source=source, index=index)) from e


__all__ = [
    "Document",
    "Model",
    "forget_unknown",
    "format_path",
    "plain_value",
    "problems_from",
    "unknown_fields",
    "validate_value",
]
