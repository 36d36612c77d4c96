"""Upstream's compile-time cost estimate of a selector, computed the way cel-go computes it.

The API server refuses a selector whose estimated cost exceeds ``COST_LIMIT``; the estimate is
cel-go's checker cost model (``checker.CostEstimator`` with Kubernetes' library costs) over the
DRA environment, whose declared sizes bound what ``device`` holds: ``device.driver`` 63
characters, ``device.attributes`` and each domain's map 32 entries (domains 63 characters,
identifiers 32), an attribute value 64 (its characters, or its list's elements, which have no
declared size), capacity values quantities. This module charges every node of the parsed
expression (``_tree``) as that model does, with the figures measured against upstream's own estimate
(``tests/upstream/cmd/celcost``):

* ``semver()``, ``isSemver()``, ``quantity()``, ``isQuantity()`` a tenth of the string's
  size (at least 1);
* a constant 0; a variable, a field, an index, most functions and operators 1; ``&&``/``||``
  nothing of their own; a list literal 10, a map literal 30, plus their elements;
* ``==``/``!=`` and string comparisons a tenth of the smaller side's size (rounded up); ``+``
  on strings or lists a tenth of the result's size; ``in`` on a list its size;
  ``includes`` its receiver's size; ``startsWith``/``endsWith`` a tenth of the argument's
  size; ``contains`` a tenth of each side multiplied; ``matches`` a tenth of the string's
  size times a quarter of the pattern's;
* a macro over ``n`` elements: ``all`` n*(3+body)+1, ``exists`` n*(4+body)+1, ``exists_one``
  n*(2+body)+2, ``map``/``filter`` n*(12+predicate+body)+11 (``filter``'s body is the
  element); ``cel.bind`` 10 plus its init and body; ``has()`` its operand; a conditional the
  condition plus its dearer branch.

A size nothing declares (a list attribute's elements, ``type()``'s result, a string made by
``string()``) is unbounded, so anything charged by it is too: upstream's estimate is then
``2**64-1``, and so is this one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from kvdev.host.allocation.cel._tree import RELATIONS, Node

INF: Final = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Shape:
    """What the estimate knows of a value: its kind and maximum size, its elements' shape."""

    kind: str  # "string", "list", "map", "number", "bool", "object", "dyn"
    size: int = INF
    elem: Shape | None = None  # a list's elements, a map's values
    key: Shape | None = None  # a map's keys
    fields: dict[str, Shape] = field(default_factory=dict)


_NUMBER: Final = Shape("number", 1)
_BOOL: Final = Shape("bool", 1)
_UNKNOWN: Final = Shape("dyn")
_QUANTITY: Final = Shape("object")  # a quantity or a semver: no size of its own
_ATTRIBUTE: Final = Shape("dyn", 64, elem=_UNKNOWN)  # DeviceAttributeMaxValueLength
_DOMAIN: Final = Shape("string", 63)  # DeviceMaxDomainLength
_ID: Final = Shape("string", 32)  # DeviceMaxIDLength
_ATTRIBUTE_MAPS: Final = Shape("map", 32, key=_ID, elem=_ATTRIBUTE)
_CAPACITY_MAPS: Final = Shape("map", 32, key=_ID, elem=_QUANTITY)
_DEVICE: Final = Shape(
    "object",
    fields={
        "driver": Shape("string", 63),  # DriverNameMaxLength
        "allowMultipleAllocations": _BOOL,
        "attributes": Shape(
            "map", 32, key=_DOMAIN, elem=Shape("map", 32, key=_ID, elem=_ATTRIBUTE)
        ),
        "capacity": Shape("map", 32, key=_DOMAIN, elem=Shape("map", 32, key=_ID, elem=_QUANTITY)),
    },
)
_NUMERIC_FUNCTIONS: Final = frozenset(
    {"size", "int", "uint", "double", "compareTo", "major", "minor", "patch", "asInteger"}
    | {"asApproximateFloat", "sign", "getDate", "getDayOfMonth", "getDayOfWeek"}
    | {"getDayOfYear", "getFullYear", "getHours", "getMilliseconds", "getMinutes"}
    | {"getMonth", "getSeconds"}
)
_LITERALS: Final = {"num": _NUMBER, "bool": _BOOL, "null": Shape("object", 1)}
_BOOL_FUNCTIONS: Final = frozenset(
    {"contains", "startsWith", "endsWith", "matches", "isSemver", "isQuantity", "includes"}
    | {"isGreaterThan", "isLessThan"}
)


def _add(*costs: int) -> int:
    return min(INF, sum(costs))


def _mul(a: int, b: int) -> int:
    return INF if a and b and (a >= INF or b >= INF) else min(INF, a * b)


def _factor(size: int, factor: float) -> int:
    return min(INF, math.ceil(float(size) * factor))  # in floats, as cel-go


def _larger(a: Shape, b: Shape) -> Shape:
    if a.kind != b.kind:
        return Shape("dyn", max(a.size, b.size))
    elem = a.elem if b.elem is None else b.elem if a.elem is None else _larger(a.elem, b.elem)
    return Shape(a.kind, max(a.size, b.size), elem=elem, key=a.key or b.key)


class _Estimator:
    """Charges each node (cost, shape), the variables of macros and binds in scope."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Shape]] = [{"device": _DEVICE}]

    def node(self, n: Node) -> tuple[int, Shape]:
        """The node's cost and the shape of its value."""
        charge: Callable[[Node], tuple[int, Shape]] = getattr(self, f"_{n.kind}")
        return charge(n)

    def _lit(self, n: Node) -> tuple[int, Shape]:
        return 0, _LITERALS.get(n.lit) or Shape("string", _literal_length(n.text))

    def _ident(self, n: Node) -> tuple[int, Shape]:
        for scope in reversed(self.scopes):
            if n.text in scope:
                return 1, scope[n.text]
        return 1, _UNKNOWN

    def _unary(self, n: Node) -> tuple[int, Shape]:
        c, s = self.node(n.children[0])
        return _add(c, 1), _BOOL if n.text == "!" else s

    def _binary(self, n: Node) -> tuple[int, Shape]:
        c, s = self.node(n.children[0])
        cb, sb = self.node(n.children[1])
        own, shape = _operator(n.text, s, sb)
        return _add(c, cb, own), shape

    def _cond(self, n: Node) -> tuple[int, Shape]:
        c, _ = self.node(n.children[0])
        ca, sa = self.node(n.children[1])
        cb, sb = self.node(n.children[2])
        return _add(c, max(ca, cb)), _larger(sa, sb)

    def _select(self, n: Node) -> tuple[int, Shape]:
        c, s = self.node(n.children[0])
        return _add(c, 1), _field(s, n.text)

    def _index(self, n: Node) -> tuple[int, Shape]:
        c, s = self.node(n.children[0])
        ci, _ = self.node(n.children[1])
        return _add(c, ci, 1), s.elem or _UNKNOWN

    def _call(self, n: Node) -> tuple[int, Shape]:
        parts = [self.node(child) for child in n.children]
        if n.method:
            return _function(n.text, parts[0], parts[1:])
        return _function(n.text, None, parts)

    def _has(self, n: Node) -> tuple[int, Shape]:
        c, _ = self.node(n.children[0])
        return max(0, c - 1), _BOOL  # the field's test is not charged

    def _bind(self, n: Node) -> tuple[int, Shape]:
        ci, si = self.node(n.children[0])
        self.scopes.append({n.var: si})
        cb, sb = self.node(n.children[1])
        self.scopes.pop()
        return _add(10, ci, cb), sb

    def _list(self, n: Node) -> tuple[int, Shape]:
        return self.literal(n)

    def _map(self, n: Node) -> tuple[int, Shape]:
        return self.literal(n)

    def literal(self, n: Node) -> tuple[int, Shape]:
        cost = 10 if n.kind == "list" else 30
        elem: Shape | None = None
        key: Shape | None = None
        step = 1 if n.kind == "list" else 2
        for i in range(0, len(n.children), step):
            c, s = self.node(n.children[i])
            if n.kind == "map":
                cv, sv = self.node(n.children[i + 1])
                key = s if key is None else _larger(key, s)
                c, s = _add(c, cv), sv
            cost = _add(cost, c)
            elem = s if elem is None else _larger(elem, s)
        count = len(n.children) // step
        return cost, Shape(n.kind, count, elem=elem, key=key)

    def _macro(self, n: Node) -> tuple[int, Shape]:
        c, s = self.node(n.children[0])
        item = (s.key if s.kind == "map" else s.elem) or _UNKNOWN
        self.scopes.append({n.var: item})
        parts = [self.node(part) for part in n.children[1:]]
        self.scopes.pop()
        size = s.size
        body = _add(*(p[0] for p in parts))
        name = n.text
        if name == "all":
            return _add(c, _mul(size, _add(3, body)), 1), _BOOL
        if name == "exists":
            return _add(c, _mul(size, _add(4, body)), 1), _BOOL
        if name == "exists_one":
            return _add(c, _mul(size, _add(2, body)), 2), _BOOL
        if name == "filter":
            return _add(c, _mul(size, _add(13, body)), 11), Shape("list", size, elem=s.elem)
        return _add(c, _mul(size, _add(12, body)), 11), Shape("list", size, elem=parts[-1][1])


def _field(s: Shape, name: str) -> Shape:
    """The shape of ``s.name``: a declared field, or a map's value."""
    if name in s.fields:
        return s.fields[name]
    return (s.elem if s.kind == "map" else None) or _UNKNOWN


def _literal_length(text: str) -> int:
    body = text.lstrip("rRbB")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    inner = body[quote:-quote]
    if "\\" not in inner or "r" in text[: len(text) - len(body)].lower():
        return len(inner)
    try:
        from kvdev.host.allocation.cel._native import native  # noqa: PLC0415 - rare path

        value = native.compile(text).execute(native.Context())
    except (ValueError, RuntimeError, TypeError):
        return len(inner)
    return len(value) if isinstance(value, str | bytes) else len(inner)


def _operator(op: str, a: Shape, b: Shape) -> tuple[int, Shape]:  # noqa: PLR0911 - per operator
    if op in ("&&", "||"):
        return 0, _BOOL
    if op in ("==", "!="):
        if a.kind == b.kind == "object":  # the type's own equality
            return 1, _BOOL
        return _factor(min(a.size, b.size), 0.1), _BOOL
    if op == "in":
        return (1 if b.kind == "map" else b.size), _BOOL
    if op in RELATIONS:
        strings = "string" in (a.kind, b.kind)
        return (max(1, _factor(min(a.size, b.size), 0.1)) if strings else 1), _BOOL
    if op == "+":
        if "number" in (a.kind, b.kind):
            return 1, _NUMBER
        size = _add(a.size, b.size)
        kind = a.kind if a.kind == b.kind else "dyn"
        elem = a.elem if b.elem is None else b.elem if a.elem is None else _larger(a.elem, b.elem)
        return _factor(size, 0.1), Shape(kind, size, elem=elem)
    return 1, _NUMBER


def _function(
    name: str, target: tuple[int, Shape] | None, args: list[tuple[int, Shape]]
) -> tuple[int, Shape]:
    receiver = target[1] if target is not None else args[0][1] if args else _UNKNOWN
    rest = args if target is not None else args[1:]
    arg = rest[0][1] if rest else _UNKNOWN
    inputs = _add(target[0] if target is not None else 0, *(c for c, _ in args))
    own = 1
    if name == "matches" and rest:
        own = _mul(_factor(receiver.size, 0.1), _factor(arg.size, 0.25))
    elif name == "contains" and rest:
        own = _mul(_factor(receiver.size, 0.1), _factor(arg.size, 0.1))
    elif name in ("startsWith", "endsWith") and rest:
        own = _factor(arg.size, 0.1)
    elif name == "includes" and rest:
        own = receiver.size
    elif name in ("semver", "isSemver", "quantity", "isQuantity"):
        own = max(1, _factor(receiver.size, 0.1))
    if name in _NUMERIC_FUNCTIONS:
        shape = _NUMBER
    elif name in _BOOL_FUNCTIONS:
        shape = _BOOL
    elif name in ("quantity", "add", "sub", "semver"):
        shape = _QUANTITY
    else:
        shape = _UNKNOWN
    return _add(inputs, own), shape


def estimate(tree: Node) -> int:
    """Upstream's estimated cost of the expression (module docstring)."""
    cost, _ = _Estimator().node(tree)
    return cost
