"""The plain decoder: JSON data in, frozen values out, every problem named by its field path.

The guest reads its documents with this module alone (no pydantic: the agent starts in a
fraction of the time, on every distribution's own packages). A document type is a frozen
dataclass deriving from ``Value`` whose fields say, with ``of``, how each JSON key decodes:

* ``string``, ``integer``, ``boolean``, ``literal``: a JSON scalar of exactly that type (strict,
  like Go's decoder: ``"3"`` is not an int, ``1.0`` is not an int, ``true`` is not an int),
  then the value rules given (plain functions raising ``ValueError``, as in ``fields``);
* ``nullable``, ``list_of``, ``dict_of``, ``struct``: null, arrays, objects and nested values;
* a ``Value``'s ``validate`` runs once all its fields decoded (rules over several fields).

What is decoded, and what each problem says, is what pydantic models of the same documents
(the tests' judge) say of the same data: the tests hold the two to agreement, error for
error (tests/unit/test_plain_reader_judges.py). Problems are collected as pydantic collects
them: every field of an object is tried, an object's ``validate`` only when its fields all
decoded, a list longer than its limit is refused before its items are looked at.

Unknown keys are ignored (upstream's decoder ignores them), and recorded on the value so that
``unknown_fields`` can report them. ``to_json_dict`` gives a value back as JSON data
(camelCase keys, unset optionals left out).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Final, Self, TypeVar, cast, dataclass_transform

from kvdev._records import compared

Loc = tuple[int | str, ...]
Errors = list[tuple[Loc, str]]
Spec = Callable[[object, Loc, Errors], object]
Rule = Callable[[Any], Any]
Context = Callable[[Any, Mapping[str, object]], Any]

BAD: Final = object()  # a spec's answer when it added errors
MISSING_FIELD: Final = "required field is missing"
V = TypeVar("V", bound="Value")


def camel(name: str) -> str:
    """``pod_claim_name`` -> ``podClaimName`` (a trailing ``_``, as in ``int_``, dropped)."""
    first, *rest = name.rstrip("_").split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def format_path(loc: Loc) -> str:
    """Render a location as ``requests[0].devices[1].attributes["a.b/c"]``."""
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


def json_type(value: object) -> str:
    """What kind of JSON value ``value`` is, for messages ("an object", "null" ...)."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return next((n for t, n in names.items() if isinstance(value, t)), "a number")


def _apply(value: object, rules: tuple[Rule, ...], loc: Loc, errors: Errors) -> object:
    for rule in rules:
        try:
            value = rule(value)
        except ValueError as e:
            errors.append((loc, str(e)))
            return BAD
    return value


def _scalar(kind: type, what: str, rules: tuple[Rule, ...]) -> Spec:
    def decode(value: object, loc: Loc, errors: Errors) -> object:
        if type(value) is not kind:
            errors.append((loc, f"Input should be a valid {what}"))
            return BAD
        return _apply(value, rules, loc, errors)

    return decode


def string(*rules: Rule, min_length: int | None = None) -> Spec:
    """A JSON string, then ``rules`` in order."""
    if min_length is not None:
        rules = (_min_chars(min_length), *rules)
    return _scalar(str, "string", rules)


def _min_chars(limit: int) -> Rule:
    def check(value: str) -> str:
        if len(value) < limit:
            raise ValueError(f"String should have at least {limit} character{'s' * (limit > 1)}")
        return value

    return check


def integer(*rules: Rule, ge: int | None = None, le: int | None = None) -> Spec:
    """A JSON integer (not a float, not a boolean), within ``ge``/``le``, then ``rules``."""
    bounds: list[Rule] = []
    if ge is not None:
        bounds.append(_bound(lambda v: v >= ge, f"greater than or equal to {ge}"))
    if le is not None:
        bounds.append(_bound(lambda v: v <= le, f"less than or equal to {le}"))
    return _scalar(int, "integer", (*bounds, *rules))


def _bound(holds: Callable[[int], bool], what: str) -> Rule:
    def check(value: int) -> int:
        if not holds(value):
            raise ValueError(f"Input should be {what}")
        return value

    return check


def boolean() -> Spec:
    """A JSON boolean."""
    return _scalar(bool, "boolean", ())


def literal(*options: str) -> Spec:
    """One of the strings ``options``."""
    said = repr(options[-1])
    if len(options) > 1:
        said = ", ".join(repr(o) for o in options[:-1]) + " or " + said

    def decode(value: object, loc: Loc, errors: Errors) -> object:
        if not isinstance(value, str) or value not in options:
            errors.append((loc, f"Input should be {said}"))
            return BAD
        return value

    return decode


def nullable(spec: Spec) -> Spec:
    """``null`` (read as None) or what ``spec`` reads."""

    def decode(value: object, loc: Loc, errors: Errors) -> object:
        return None if value is None else spec(value, loc, errors)

    return decode


def list_of(item: Spec, *rules: Rule, max_length: int | None = None) -> Spec:
    """A JSON array of ``item``s (at most ``max_length``: checked first), then ``rules``."""

    def decode(value: object, loc: Loc, errors: Errors) -> object:
        if not isinstance(value, list):
            errors.append((loc, "Input should be a valid list"))
            return BAD
        if max_length is not None and len(value) > max_length:
            message = f"List should have at most {max_length} item{'s' * (max_length != 1)}"
            errors.append((loc, f"{message} after validation, not {len(value)}"))
            return BAD
        seen = len(errors)
        out = [item(v, (*loc, i), errors) for i, v in enumerate(value)]
        if len(errors) > seen:
            return BAD
        return _apply(out, rules, loc, errors)

    return decode


def dict_of(item: Spec, key: tuple[Rule, ...] = ()) -> Spec:
    """A JSON object from keys (checked by ``key``'s rules) to ``item``s."""

    def decode(value: object, loc: Loc, errors: Errors) -> object:
        if not isinstance(value, dict):
            errors.append((loc, "Input should be a valid dictionary"))
            return BAD
        seen = len(errors)
        out = {}
        for k, v in value.items():
            name = _apply(k, key, (*loc, k, "[key]"), errors)
            decoded = item(v, (*loc, k), errors)
            out[name] = decoded
        return BAD if len(errors) > seen else out

    return decode


def struct(cls: type[Value]) -> Spec:
    """A JSON object read as the ``Value`` class ``cls``."""
    return cls.decode


def of(
    spec: Spec,
    *,
    default: object = dataclasses.MISSING,
    factory: Callable[[], object] | None = None,
    key: str | None = None,
    context: Context | None = None,
) -> Any:  # noqa: ANN401 - a dataclass field, typed by its annotation
    """A field decoded by ``spec`` from JSON key ``key`` (default: the camelCase name).

    Without ``default`` or ``factory`` the key is required. ``context`` runs on the decoded
    value with the fields decoded before it (as a pydantic field validator sees them).
    """
    meta = {"spec": spec, "key": key, "context": context}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


_REQUIRED: Final = object()


class _Plan:
    """How one ``Value`` class decodes: its fields (attribute, key, spec, context, default)."""

    def __init__(self, cls: type[Value]) -> None:
        fields = [f for f in dataclasses.fields(cls) if "spec" in f.metadata]
        self.layout = tuple(
            (f.name, f.metadata["key"] or camel(f.name), dict(f.metadata)) for f in fields
        )
        self.fields = tuple(
            (name, key, meta["spec"], meta["context"], _default(f))
            for (name, key, meta), f in zip(self.layout, fields, strict=True)
        )
        self.keys = frozenset(key for _, key, _ in self.layout)
        self.validates = cls.validate is not Value.validate


def _default(f: dataclasses.Field[Any]) -> object:
    """A field's default, its factory (called per value) or _REQUIRED."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory
    if f.default is dataclasses.MISSING:
        return _REQUIRED
    assert not callable(f.default), f"{f.name}: a callable default would be taken for a factory"
    return f.default


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(of,))
@compared
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Value:
    """Base of the plain document values: frozen, decoded by their fields' specs.

    Every subclass is a frozen, keyword-only dataclass (made so when it is defined; its ==,
    hash and repr are ``kvdev._records``'s). ``unknown`` holds the keys of the object that no
    field reads (sorted), for warnings.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:  # noqa: ANN401 - passed on as given
        super().__init_subclass__(**kwargs)
        compared(dataclasses.dataclass(frozen=True, kw_only=True, eq=False, repr=False)(cls))

    unknown: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    ignore_unknown: ClassVar[bool] = False  # True: unknown keys are not even reported
    _plan: ClassVar[_Plan | None] = None

    @classmethod
    def layout(cls) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """(attribute, JSON key, field metadata) of every decoded field, in order."""
        return cls._planned().layout

    @classmethod
    def _planned(cls) -> _Plan:
        plan = cls.__dict__.get("_plan")
        if plan is None:
            plan = _Plan(cls)
            cls._plan = plan
        return plan

    @classmethod
    def decode(cls, value: object, loc: Loc, errors: Errors) -> object:
        """Read ``value`` as this class, or add its problems to ``errors`` and return BAD."""
        if not isinstance(value, dict):
            errors.append(
                (loc, f"Input should be a valid dictionary or instance of {cls.__name__}")
            )
            return BAD
        plan = cls._planned()
        seen = len(errors)
        data: dict[str, object] = {}
        for name, key, spec, context, default in plan.fields:
            if key not in value:
                if default is _REQUIRED:
                    errors.append(((*loc, key), MISSING_FIELD))
                else:
                    data[name] = default() if callable(default) else default
                continue
            decoded = spec(value[key], (*loc, key), errors)
            if decoded is not BAD and context is not None:
                try:
                    decoded = context(decoded, data)
                except ValueError as e:
                    errors.append(((*loc, key), str(e)))
                    decoded = BAD
            data[name] = decoded
        if len(errors) > seen:
            return BAD
        unknown = [k for k in value if k not in plan.keys]
        data["unknown"] = () if cls.ignore_unknown or not unknown else tuple(sorted(unknown))
        made = object.__new__(cls)  # frozen: its fields are set once, here, as __init__ would
        made.__dict__.update(data)
        if not plan.validates:
            return made
        try:
            return made.validate()
        except ValueError as e:
            errors.append((loc, str(e)))
            return BAD

    @classmethod
    def parse(cls, data: object) -> Self:
        """``data`` read as this class; ValueError naming every problem when it cannot be."""
        errors: Errors = []
        out = cls.decode(data, (), errors)
        if out is BAD:
            raise ValueError("; ".join(f"{format_path(loc)}: {m}" for loc, m in errors))
        assert isinstance(out, cls)
        return out

    def validate(self) -> Self:
        """Rules over several fields, once every field decoded; raise ValueError if broken."""
        return self

    def to_json_dict(self) -> dict[str, Any]:
        """The value as JSON data: camelCase keys, unset (None) optionals left out."""
        out: dict[str, Any] = {}
        for name, key, _ in self.layout():
            item = getattr(self, name)
            if item is not None:
                out[key] = _json(item)
        return out


def _json(value: object) -> object:
    if isinstance(value, Value):
        return value.to_json_dict()
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def read(cls: type[V], value: object, loc: Loc = ()) -> tuple[V | None, Errors]:
    """``value`` read as ``cls``: (the value, []) or (None, every problem)."""
    errors: Errors = []
    out = cls.decode(value, loc, errors)
    if out is BAD:
        return None, errors
    return cast("V", out), []


Own = Callable[[object], tuple[Iterable[str], Iterable[tuple[str, object]]] | None]


def walk_unknown(value: object, loc: Loc, own: Own) -> Iterator[str]:
    """The path of every unknown key inside ``value``.

    ``own`` says, of a document value, its unknown keys and its (JSON key, value) fields (None:
    not a document value).
    """
    found = own(value)
    if found is not None:
        extras, children = found
        for key in extras:
            yield format_path((*loc, key))
        for key, child in children:
            yield from walk_unknown(child, (*loc, key), own)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from walk_unknown(item, (*loc, i), own)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from walk_unknown(item, (*loc, str(key)), own)


def _own(value: object) -> tuple[Iterable[str], Iterable[tuple[str, object]]] | None:
    if not isinstance(value, Value):
        return None
    return value.unknown, [(key, getattr(value, name)) for name, key, _ in value.layout()]


def unknown_fields(value: Value, loc: Loc = ()) -> Iterator[str]:
    """Yield the field path of every unknown (ignored) key anywhere inside ``value``."""
    return walk_unknown(value, loc, _own)
