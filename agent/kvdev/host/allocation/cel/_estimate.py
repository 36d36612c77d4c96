"""Upstream's compile-time cost estimate of a selector, computed the way cel-go computes it.

The API server refuses a selector whose estimated cost exceeds ``COST_LIMIT``; the estimate is
cel-go's checker cost model (``checker.CostEstimator`` with Kubernetes' library costs) over the
DRA environment, whose declared sizes bound what ``device`` holds: ``device.driver`` 63
characters, ``device.attributes`` and each domain's map 32 entries (domains 63 characters,
identifiers 32), an attribute value 64 (its characters, or its list's elements, which have no
declared size), capacity values quantities. This module parses the expression and charges
every node as that model does, with the figures measured against upstream's own estimate
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
``2**64-1``, and so is this one. :func:`estimate` returns None when it cannot parse the
expression (the caller keeps its own bound then).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from kvdev.host.allocation.cel._tokens import Token

INF: Final = 2**64 - 1
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
_RELATIONS: Final = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})


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
_BOOL_FUNCTIONS: Final = frozenset(
    {"contains", "startsWith", "endsWith", "matches", "isSemver", "isQuantity", "includes"}
    | {"isGreaterThan", "isLessThan"}
)


class _UnparsedError(Exception):
    pass


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


class _Parser:
    """A recursive-descent CEL parser that estimates as it goes (cost, shape) per node."""

    def __init__(self, tokens: list[Token]) -> None:
        self.t = tokens
        self.k = 0
        self.scopes: list[dict[str, Shape]] = [{"device": _DEVICE}]

    # ------------------------------------------------------------------ tokens

    def peek(self, ahead: int = 0) -> str:
        k = self.k + ahead
        return self.t[k].text if k < len(self.t) else ""

    def take(self, text: str | None = None) -> Token:
        if self.k >= len(self.t) or (text is not None and self.t[self.k].text != text):
            raise _UnparsedError
        self.k += 1
        return self.t[self.k - 1]

    # ------------------------------------------------------------------ grammar

    def expr(self) -> tuple[int, Shape]:
        c, s = self.binary(0)
        if self.peek() != "?":
            return c, s
        self.take("?")
        ca, sa = self.expr()
        self.take(":")
        cb, sb = self.expr()
        return _add(c, max(ca, cb)), _larger(sa, sb)

    _LEVELS: Final = (("||",), ("&&",), tuple(_RELATIONS), ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> tuple[int, Shape]:
        if level == len(self._LEVELS):
            return self.unary()
        c, s = self.binary(level + 1)
        while self.peek() in self._LEVELS[level] and self.t[self.k].kind in ("op", "id"):
            op = self.take().text
            cb, sb = self.binary(level + 1)
            own, s = _operator(op, s, sb)
            c = _add(c, cb, own)
        return c, s

    def unary(self) -> tuple[int, Shape]:
        if self.peek() in ("!", "-") and self.t[self.k].kind == "op":
            op = self.take().text
            if op == "-" and self.k < len(self.t) and self.t[self.k].kind == "num":
                self.take()
                return self.member(0, _NUMBER)
            c, s = self.unary()
            return _add(c, 1), _BOOL if op == "!" else s
        return self.member(*self.primary())

    def member(self, c: int, s: Shape) -> tuple[int, Shape]:
        while True:
            if self.peek() == ".":
                self.take(".")
                name = self.take().text
                if self.peek() == "(":
                    c, s = self.method(name, c, s)
                else:
                    c, s = (
                        _add(c, 1),
                        s.fields.get(name) or (s.elem if s.kind == "map" else _UNKNOWN) or _UNKNOWN,
                    )
            elif self.peek() == "[":
                self.take("[")
                ci, _ = self.expr()
                self.take("]")
                c, s = _add(c, ci, 1), s.elem or _UNKNOWN
            else:
                return c, s

    def args(self) -> list[tuple[int, Shape]]:
        self.take("(")
        out = []
        while self.peek() != ")":
            out.append(self.expr())
            if self.peek() != ")":
                self.take(",")
        self.take(")")
        return out

    def primary(self) -> tuple[int, Shape]:  # noqa: PLR0911, PLR0912, C901 - one branch per kind
        tok = self.take()
        if tok.kind == "str":
            return 0, Shape("string", _literal_length(tok.text))
        if tok.kind == "num":
            return 0, _NUMBER
        if tok.text in ("true", "false"):
            return 0, _BOOL
        if tok.text == "null":
            return 0, Shape("object", 1)
        if tok.text == "(":
            got = self.expr()
            self.take(")")
            return got
        if tok.text == "[":
            return self.literal("]", 10)
        if tok.text == "{":
            return self.literal("}", 30)
        if tok.kind != "id":
            raise _UnparsedError
        if tok.text == "cel" and self.peek() == "." and self.peek(1) == "bind":
            return self.bind()
        if self.peek() == "(":
            if tok.text == "has":
                self.take("(")
                got = self.expr()
                self.take(")")
                return max(0, got[0] - 1), _BOOL  # the field's test is not charged
            args = self.args()
            return _call(tok.text, None, args)
        for scope in reversed(self.scopes):
            if tok.text in scope:
                return 1, scope[tok.text]
        return 1, _UNKNOWN

    def literal(self, close: str, base: int) -> tuple[int, Shape]:
        cost, n = base, 0
        elem: Shape | None = None
        key: Shape | None = None
        while self.peek() != close:
            c, s = self.expr()
            if close == "}":
                self.take(":")
                cv, sv = self.expr()
                key = s if key is None else _larger(key, s)
                c, s = _add(c, cv), sv
            cost, n = _add(cost, c), n + 1
            elem = s if elem is None else _larger(elem, s)
            if self.peek() != close:
                self.take(",")
        self.take(close)
        return cost, Shape("list" if close == "]" else "map", n, elem=elem, key=key)

    def bind(self) -> tuple[int, Shape]:
        self.take(".")
        self.take("bind")
        self.take("(")
        var = self.take().text
        self.take(",")
        ci, si = self.expr()
        self.take(",")
        self.scopes.append({var: si})
        cb, sb = self.expr()
        self.scopes.pop()
        self.take(")")
        return _add(10, ci, cb), sb

    def method(self, name: str, c: int, s: Shape) -> tuple[int, Shape]:
        if name not in _MACROS or self.peek(2) != ",":
            return _call(name, (c, s), self.args())
        self.take("(")
        var = self.take().text
        self.take(",")
        item = (s.key if s.kind == "map" else s.elem) or _UNKNOWN
        self.scopes.append({var: item})
        parts = [self.expr()]
        if self.peek() == ",":
            self.take(",")
            parts.append(self.expr())
        self.scopes.pop()
        self.take(")")
        n = s.size
        body = _add(*(p[0] for p in parts))
        if name == "all":
            return _add(c, _mul(n, _add(3, body)), 1), _BOOL
        if name == "exists":
            return _add(c, _mul(n, _add(4, body)), 1), _BOOL
        if name == "exists_one":
            return _add(c, _mul(n, _add(2, body)), 2), _BOOL
        if name == "filter":
            return _add(c, _mul(n, _add(13, body)), 11), Shape("list", n, elem=s.elem)
        return _add(c, _mul(n, _add(12, body)), 11), Shape("list", n, elem=parts[-1][1])


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
    if op in _RELATIONS:
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


def _call(
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


def estimate(tokens: list[Token]) -> int | None:
    """Upstream's estimated cost of the expression (module docstring); None: not parsed."""
    parser = _Parser(tokens)
    try:
        cost, _ = parser.expr()
    except (_UnparsedError, RecursionError):
        return None
    return cost if parser.k == len(tokens) else None
