"""CEL device selectors (``DeviceSelector.cel.expression``) evaluated against one device.

The evaluator is the ``cel`` package (``common-expression-language``, a Rust core). It
implements the CEL core language but not the Kubernetes environment, so this module adds
what the DRA allocator needs on top of it.

Supported surface
-----------------
* The ``device`` variable: ``device.driver`` (string), ``device.attributes[<domain>].<id>``
  (int, bool, string, version, and the list forms), ``device.capacity[<domain>].<id>``
  (quantity), ``device.allowMultipleAllocations`` (bool; absent when DRAConsumableCapacity
  is off, so referencing it is a runtime "no such key" error).
* Unqualified attribute/capacity names are filed under the driver's domain.
* An unknown domain (``device.attributes["unknown.domain"]``) is an empty map: the driver's
  domain and every domain written as a string literal in ``attributes[...]`` /
  ``capacity[...]`` are present (empty when the device has nothing there). A domain computed
  at runtime from anything but ``device.driver`` is a "no such key" runtime error instead.
* Referencing an unknown key is a runtime error (:class:`CelRuntimeError`); guard with
  ``has(device.attributes["d"].x)``.
* Core CEL: operators, ``in``, ternary, ``size``, string ``contains/startsWith/endsWith/
  matches``, conversions (``int``, ``uint``, ``double``, ``string``, ``bytes``, ``dyn``,
  ``type``, ``duration``, ``timestamp``), the timestamp/duration accessors (``getHours``,
  ...), macros ``has``, ``all``, ``exists``, ``exists_one``, ``map``, ``filter``.
* ``cel.bind(v, init, body)`` (``ext.Bindings``): rewritten before compilation to the
  equivalent ``[init].map(v, body)[0]`` (the library has no ``cel.bind``).
* Kubernetes semver library: ``semver(s)``, ``semver(s, true)`` (normalize: optional ``v``
  prefix, missing minor/patch, leading zeros), ``isSemver(s[, normalize])``,
  ``.major()``, ``.minor()``, ``.patch()``, ``.compareTo()``, ``.isGreaterThan()``,
  ``.isLessThan()``; ``==`` between versions ignores build metadata (as upstream).
* Kubernetes quantity library: ``quantity(s)``, ``isQuantity(s)``, ``.compareTo()``,
  ``.isGreaterThan()``, ``.isLessThan()``, ``.add(q|int)``, ``.sub(q|int)``,
  ``.asInteger()``, ``.asApproximateFloat()``, ``.sign()``; ``==`` is numeric
  (``quantity("1Gi") == quantity("1024Mi")``).
* ``<attr>.includes(x)`` (DRAListTypeAttributes) on lists and on scalars (scalar: equality).

How: the library calls registered Python functions for ``x.f(a)`` as ``f(x, a)``, so the
semver/quantity methods are plain Python functions. Versions and quantities travel through
CEL as tagged strings (U+FDD0 + ``semver:1.2.3`` / ``quantity:<num>/<den>``, canonical, so
``==`` is version/quantity equality): the library converts a returned string ~25x faster than
a returned map. Side effect: ``type(quantity("1")) == string``. The library logs every
exception a registered function raises (logger ``cel``); those come back as evaluation errors
and become :class:`CelRuntimeError`, so a filter on that logger drops them.

Not supported (the library cannot, or the corpus does not need it)
------------------------------------------------------------------
* Optional syntax (``a.?b``, ``[?x]``, ``.orValue()`` chains on fields): the parser rejects
  ``.?`` -> :class:`CelCompileError`. Use ``has()``.
* The strings/lists/regex/url/ip/cidr/format extension libraries of the Kubernetes base
  environment (``split``, ``lowerAscii``, ``find``, ``isSorted``, ...): calling them is an
  undeclared reference -> :class:`CelCompileError`.
* ``bool(x)`` and two-variable comprehensions: not in the library -> :class:`CelCompileError`.
* Static type checking: type errors (``device.driver + 1``) surface at evaluation time as
  :class:`CelRuntimeError`, a non-bool result likewise (upstream reports both at compile time
  when it can tell). Comprehension variables used outside their macro are runtime errors.

Cost limit
----------
The library has no cost budget or interruption hook, and a comprehension runs entirely in
Rust (~150 ns per iteration), so a cost bomb would hold the GIL for minutes. Each expression
therefore gets a *static worst-case cost estimate* when compiled (roughly: one unit per token,
a macro's body multiplied by the size bound of its receiver; a list/map literal's bound is its
element count, any other receiver's bound is the larger of the device limits (48 attribute
values, 32 attributes) and the largest literal in the expression, doubled for each ``+`` in
the expression because concatenation can grow collections; each ``+`` also costs that bound).
:meth:`Selector.matches` raises :class:`CelCostLimitError` without evaluating when the
estimate exceeds :data:`COST_LIMIT` -- like the API server's estimated-cost check, and lazily
(only when the selector is evaluated), like the scheduler's runtime check. The estimate is an
upper bound, so a selector that upstream would stop early (``all`` on a false element), or
three nested loops over device list attributes (48**3 iterations: fine upstream, whose
runtime cost counts the actual list sizes), can be refused here. In exchange nothing that
passes runs long: a bound expression does at most ~1e6 steps (~0.2 s in the library).

Compilation is cached by expression text (:func:`compile_selector` returns the same
:class:`Selector`, or raises the same :class:`CelCompileError`, for the same text). Each
:class:`DeviceView` caches its converted CEL context (building one costs ~20-25 us, the bulk
of a first evaluation; later evaluations on the same view cost ~0.3-4 us).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Final

import cel

from kvdev.errors import PermanentError
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.schema.metadata import ATTRIBUTE_VALUES_MAX

if TYPE_CHECKING:
    from kvdev.host.k8s.resource import Device

__all__ = [
    "COST_LIMIT",
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelCostLimitError",
    "CelError",
    "CelRuntimeError",
    "DeviceView",
    "Selector",
    "Semver",
    "compile_selector",
    "device_view",
]

COST_LIMIT: Final = 1_000_000  # upstream CELSelectorExpressionMaxCost
MAX_EXPRESSION_LENGTH: Final = 10 * 1024  # upstream CELSelectorExpressionMaxLength (bytes)
_ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class _DropHandledFunctionErrors(logging.Filter):
    """Drop the library's log of an exception raised by one of our functions.

    The library logs (logger ``cel``) every exception a registered function raises; those
    come back to us as evaluation errors and become :class:`CelRuntimeError`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Python function '") and "' failed: " in message)


logging.getLogger("cel").addFilter(_DropHandledFunctionErrors())


class CelError(PermanentError):
    """A CEL selector could not be used."""


class CelCompileError(CelError):
    """The expression does not compile (syntax, undeclared reference, empty, too long)."""


class CelRuntimeError(CelError):
    """Evaluation failed: no such key, wrong types, a non-bool result, a bad function argument."""


class CelCostLimitError(CelRuntimeError):
    """The evaluation would exceed the cost budget (:data:`COST_LIMIT`)."""


# --------------------------------------------------------------------------- semver


_NUM = r"(?:0|[1-9][0-9]*)"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
_SEMVER_RE = re.compile(
    rf"({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?(?:\+({_BUILD_ID}(?:\.{_BUILD_ID})*))?\Z"
)


@dataclass(frozen=True, eq=False)
class Semver:
    """A semantic version (semver 2.0.0). Equality and order ignore build metadata."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        """Parse ``MAJOR.MINOR.PATCH[-pre][+build]``; ``normalize`` like upstream semver(s, true).

        Raises:
            ValueError: ``text`` is not a semantic version.
        """
        if normalize:
            text = _normalize_semver(text)
        m = _SEMVER_RE.match(text)
        if not m:
            raise ValueError(f"{text!r} is not a semantic version")
        return cls(
            int(m[1]),
            int(m[2]),
            int(m[3]),
            tuple(m[4].split(".")) if m[4] else (),
            tuple(m[5].split(".")) if m[5] else (),
        )

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1, by semver precedence."""
        a = (self.major, self.minor, self.patch)
        b = (other.major, other.minor, other.patch)
        if a != b:
            return -1 if a < b else 1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.prerelease))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _normalize_semver(text: str) -> str:
    text = text.removeprefix("v")
    cut = len(text)
    for sep in "-+":
        pos = text.find(sep)
        if pos != -1:
            cut = min(cut, pos)
    core, rest = text[:cut], text[cut:]
    parts = core.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and p.isascii() for p in parts):
        return text  # let the strict parser reject it
    parts += ["0"] * (3 - len(parts))
    return ".".join(str(int(p)) for p in parts) + rest


def _compare_prerelease(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    if a == b:
        return 0
    if not a:
        return 1  # a release ranks above its pre-releases
    if not b:
        return -1
    for x, y in zip(a, b, strict=False):
        if x != y:
            # Numeric identifiers compare as numbers and rank below alphanumeric ones.
            kx = (0, int(x), "") if x.isdigit() else (1, 0, x)
            ky = (0, int(y), "") if y.isdigit() else (1, 0, y)
            return -1 if kx < ky else 1
    return -1 if len(a) < len(b) else 1


# --------------------------------------------------------------------------- CEL values

# Versions and quantities cross into CEL as tagged strings: the library converts a returned
# string in ~0.1 us but a returned map in ~2.5 us. The tag starts with a Unicode noncharacter
# (U+FDD0), which no attribute value or selector written for a real cluster contains.
_SEMVER_TAG: Final = "\ufdd0semver:"
_QUANTITY_TAG: Final = "\ufdd0quantity:"


@functools.lru_cache(maxsize=4096)
def _semver_value(v: Semver) -> str:
    return _SEMVER_TAG + str(Semver(v.major, v.minor, v.patch, v.prerelease))


def _quantity_value(q: Fraction) -> str:
    return f"{_QUANTITY_TAG}{q.numerator}/{q.denominator}"


@functools.lru_cache(maxsize=4096)
def _parse_semver_cached(text: str) -> Semver:
    return Semver.parse(text[len(_SEMVER_TAG) :])


@functools.lru_cache(maxsize=4096)
def _parse_fraction_cached(text: str) -> Fraction:
    return Fraction(text[len(_QUANTITY_TAG) :])


def _as_semver(v: object) -> Semver | None:
    if isinstance(v, str) and v.startswith(_SEMVER_TAG):
        return _parse_semver_cached(v)
    return None


def _as_quantity(v: object) -> Fraction | None:
    if isinstance(v, str) and v.startswith(_QUANTITY_TAG):
        return _parse_fraction_cached(v)
    return None


def _no_overload(name: str, *args: object) -> TypeError:
    kinds = ", ".join(_type_name(a) for a in args)
    return TypeError(f"found no matching overload for '{name}' applied to ({kinds})")


def _type_name(v: object) -> str:
    if _as_semver(v) is not None:
        return "Semver"
    if _as_quantity(v) is not None:
        return "Quantity"
    return type(v).__name__


def _sign(x: int | Fraction) -> int:
    return (x > 0) - (x < 0)


# --------------------------------------------------------------------------- functions


def _fn_semver(text: object, normalize: object = False) -> str:
    if not isinstance(text, str) or not isinstance(normalize, bool):
        raise _no_overload("semver", text, normalize)
    return _semver_from_text(text, normalize=normalize)


@functools.lru_cache(maxsize=4096)
def _semver_from_text(text: str, *, normalize: bool) -> str:
    return _semver_value(Semver.parse(text, normalize=normalize))


def _fn_is_semver(text: object, normalize: object = False) -> bool:
    if not isinstance(text, str) or not isinstance(normalize, bool):
        raise _no_overload("isSemver", text, normalize)
    try:
        Semver.parse(text, normalize=normalize)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _quantity_from_text(text: str) -> str:
    return _quantity_value(parse_quantity(text))


def _fn_quantity(text: object) -> str:
    if not isinstance(text, str) or text.startswith(_QUANTITY_TAG):
        raise _no_overload("quantity", text)
    return _quantity_from_text(text)


def _fn_is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        raise _no_overload("isQuantity", text)
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _compare(name: str, a: object, b: object) -> int:
    qa, qb = _as_quantity(a), _as_quantity(b)
    if qa is not None and qb is not None:
        return (qa > qb) - (qa < qb)
    sa, sb = _as_semver(a), _as_semver(b)
    if sa is not None and sb is not None:
        return sa.compare(sb)
    raise _no_overload(name, a, b)


def _fn_compare_to(a: object, b: object) -> int:
    return _compare("compareTo", a, b)


def _fn_is_greater_than(a: object, b: object) -> bool:
    return _compare("isGreaterThan", a, b) > 0


def _fn_is_less_than(a: object, b: object) -> bool:
    return _compare("isLessThan", a, b) < 0


def _semver_part(name: str, index: int) -> Callable[[object], int]:
    def part(v: object) -> int:
        s = _as_semver(v)
        if s is None:
            raise _no_overload(name, v)
        return (s.major, s.minor, s.patch)[index]

    part.__name__ = name
    return part


def _quantity_operand(name: str, a: object, b: object) -> tuple[Fraction, Fraction]:
    qa = _as_quantity(a)
    qb = _as_quantity(b)
    if qb is None and isinstance(b, int) and not isinstance(b, bool):
        qb = Fraction(b)
    if qa is None or qb is None:
        raise _no_overload(name, a, b)
    return qa, qb


def _fn_add(a: object, b: object) -> str:
    qa, qb = _quantity_operand("add", a, b)
    return _quantity_value(qa + qb)


def _fn_sub(a: object, b: object) -> str:
    qa, qb = _quantity_operand("sub", a, b)
    return _quantity_value(qa - qb)


def _fn_as_integer(a: object) -> int:
    q = _as_quantity(a)
    if q is None:
        raise _no_overload("asInteger", a)
    if q.denominator != 1 or not _INT64_MIN <= q.numerator <= _INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return q.numerator


def _fn_as_approximate_float(a: object) -> float:
    q = _as_quantity(a)
    if q is None:
        raise _no_overload("asApproximateFloat", a)
    return float(q)


def _fn_sign(a: object) -> int:
    q = _as_quantity(a)
    if q is None:
        raise _no_overload("sign", a)
    return _sign(q)


def _cel_equal(a: object, b: object) -> bool:
    # CEL equality is typed: true is not 1 (Python says it is).
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _fn_includes(a: object, x: object) -> bool:
    if isinstance(a, list):
        return any(_cel_equal(e, x) for e in a)
    return _cel_equal(a, x)


_FUNCTIONS: Final[Mapping[str, Callable[..., object]]] = {
    "semver": _fn_semver,
    "isSemver": _fn_is_semver,
    "quantity": _fn_quantity,
    "isQuantity": _fn_is_quantity,
    "compareTo": _fn_compare_to,
    "isGreaterThan": _fn_is_greater_than,
    "isLessThan": _fn_is_less_than,
    "major": _semver_part("major", 0),
    "minor": _semver_part("minor", 1),
    "patch": _semver_part("patch", 2),
    "add": _fn_add,
    "sub": _fn_sub,
    "asInteger": _fn_as_integer,
    "asApproximateFloat": _fn_as_approximate_float,
    "sign": _fn_sign,
    "includes": _fn_includes,
}

# Functions and type names of the library's own standard environment that selectors may use.
_BUILTIN_FUNCTIONS: Final = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "dyn",
        "type",
        "duration",
        "timestamp",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getMonth",
        "getSeconds",
    }
)
_TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type", "type"}
)
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})


# --------------------------------------------------------------------------- device view


@dataclass(frozen=True)
class DeviceView:
    """What a selector sees of one device (the upstream ``device`` CEL variable).

    Attributes:
        driver: the driver name.
        attributes: domain -> id -> value: ``int``, ``bool``, ``str``, :class:`Semver`, or a
            list of one of these.
        capacity: domain -> id -> quantity string.
        allow_multiple_allocations: None when DRAConsumableCapacity is off (the field is
            absent from the CEL object).
    """

    driver: str
    attributes: Mapping[str, Mapping[str, object]]
    capacity: Mapping[str, Mapping[str, str]]
    allow_multiple_allocations: bool | None
    # Converted CEL contexts, one per set of extra (empty) domains a selector needs.
    _contexts: dict[frozenset[str], cel.Context] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def _context(self, domains: frozenset[str]) -> cel.Context:
        # Key by the domains this device lacks, so most selectors share one context.
        attrs, caps = self.attributes, self.capacity
        if domains:
            domains = frozenset(d for d in domains if d not in attrs or d not in caps)
        ctx = self._contexts.get(domains)
        if ctx is None:
            ctx = cel.Context(
                variables={"device": self._cel_device(domains)}, functions=dict(_FUNCTIONS)
            )
            self._contexts[domains] = ctx
        return ctx

    def _cel_device(self, domains: frozenset[str]) -> dict[str, object]:
        attrs: dict[str, dict[str, object]] = {
            dom: {k: _to_cel(v) for k, v in ids.items()} for dom, ids in self.attributes.items()
        }
        caps: dict[str, dict[str, object]] = {
            dom: {k: _quantity_from_text(v) for k, v in ids.items()}
            for dom, ids in self.capacity.items()
        }
        for dom in (*domains, self.driver):
            attrs.setdefault(dom, {})
            caps.setdefault(dom, {})
        device: dict[str, object] = {
            "driver": self.driver,
            "attributes": attrs,
            "capacity": caps,
        }
        if self.allow_multiple_allocations is not None:
            device["allowMultipleAllocations"] = self.allow_multiple_allocations
        return device


def _to_cel(v: object) -> object:
    if isinstance(v, Semver):
        return _semver_value(v)
    if isinstance(v, list | tuple):
        return [_to_cel(e) for e in v]
    return v


def _split_name(driver: str, name: str) -> tuple[str, str]:
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def device_view(driver: str, device: Device, *, consumable_capacity: bool = True) -> DeviceView:
    """Build the CEL view of a ResourceSlice device published by ``driver``.

    Unqualified attribute and capacity names go under the driver's domain (``model`` on
    ``gpu.example.com`` is ``attributes["gpu.example.com"]["model"]``).
    """
    attributes: dict[str, dict[str, object]] = {}
    for name, attr in (device.attributes or {}).items():
        domain, ident = _split_name(driver, name)
        value: object
        if attr.version is not None:
            value = Semver.parse(attr.version)
        elif attr.versions is not None:
            value = [Semver.parse(v) for v in attr.versions]
        else:
            value = attr.value
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, str]] = {}
    for name, cap in (device.capacity or {}).items():
        domain, ident = _split_name(driver, name)
        capacity.setdefault(domain, {})[ident] = cap.value
    return DeviceView(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=(
            bool(device.allow_multiple_allocations) if consumable_capacity else None
        ),
    )


# --------------------------------------------------------------------------- tokens


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
   |(?P<str>(?:[rR][bB]?|[bB][rR]?)?
        (?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
   |(?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:[0-9]+\.[0-9]+|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
   |(?P<id>[A-Za-z_][A-Za-z0-9_]*)
   |(?P<op>&&|\|\||==|!=|<=|>=|\.\?|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "str", "num", "id", "op"
    text: str
    start: int
    end: int


def _tokenize(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN_RE.match(source, pos)
        if m is None:
            raise CelCompileError(f"CEL compile error: unexpected character at {pos}")
        kind = m.lastgroup or "ws"
        if kind != "ws":
            tokens.append(_Token(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return tokens


def _brackets(tokens: list[_Token]) -> dict[int, int]:
    """Index of the matching bracket, both ways."""
    match: dict[int, int] = {}
    stack: list[int] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for i, t in enumerate(tokens):
        if t.kind != "op":
            continue
        if t.text in "([{":
            stack.append(i)
        elif t.text in pairs:
            if not stack or tokens[stack[-1]].text != pairs[t.text]:
                raise CelCompileError("CEL compile error: unbalanced brackets")
            j = stack.pop()
            match[i], match[j] = j, i
    if stack:
        raise CelCompileError("CEL compile error: unbalanced brackets")
    return match


def _top_level_commas(tokens: list[_Token], match: dict[int, int], i: int, j: int) -> list[int]:
    commas = []
    k = i
    while k < j:
        t = tokens[k]
        if t.kind == "op" and t.text in "([{":
            k = match[k] + 1
            continue
        if t.kind == "op" and t.text == ",":
            commas.append(k)
        k += 1
    return commas


def _rewrite_bind(source: str) -> str:
    """``cel.bind(v, init, body)`` -> ``[init].map(v, body)[0]``, innermost first."""
    for _ in range(MAX_EXPRESSION_LENGTH):
        tokens = _tokenize(source)
        match = _brackets(tokens)
        found = None
        for k in range(len(tokens) - 3):
            if (
                tokens[k].text == "cel"
                and tokens[k + 1].text == "."
                and tokens[k + 2].text == "bind"
                and tokens[k + 3].text == "("
                and (k == 0 or tokens[k - 1].text != ".")
            ):
                found = k  # keep the last one: it is never an ancestor of an earlier one
        if found is None:
            return source
        open_ = found + 3
        close = match[open_]
        commas = _top_level_commas(tokens, match, open_ + 1, close)
        if len(commas) != 2 or commas[0] != open_ + 2 or tokens[open_ + 1].kind != "id":
            raise CelCompileError("CEL compile error: cel.bind() needs (name, init, body)")
        var = tokens[open_ + 1].text
        init = source[tokens[commas[0]].end : tokens[commas[1]].start]
        body = source[tokens[commas[1]].end : tokens[close].start]
        replacement = f"([{init}].map({var}, {body})[0])"
        source = source[: tokens[found].start] + replacement + source[tokens[close].end :]
    raise CelCompileError("CEL compile error: too many cel.bind()")  # pragma: no cover


# --------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class _Analysis:
    bound_vars: frozenset[str]
    domains: frozenset[str]
    cost: int


def _literal_string(text: str) -> str | None:
    body = text.lstrip("rRbB")
    prefix = text[: len(text) - len(body)]
    if "b" in prefix.lower():
        return None
    quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
    inner = body[len(quote) : -len(quote)]
    if "\\" in inner and "r" not in prefix.lower():
        return None
    return inner


def _analyze(tokens: list[_Token]) -> _Analysis:
    match = _brackets(tokens)
    bound: set[str] = set()
    domains: set[str] = set()
    largest = 0
    plus = 0
    for k, t in enumerate(tokens):
        if t.kind == "op" and t.text == "+":
            plus += 1
        if (
            t.kind == "op"
            and t.text == "."
            and k + 4 < len(tokens)
            and tokens[k + 1].text in _MACROS
            and tokens[k + 2].text == "("
            and tokens[k + 3].kind == "id"
            and tokens[k + 4].text == ","
        ):
            bound.add(tokens[k + 3].text)
        if (
            t.kind == "id"
            and t.text in ("attributes", "capacity")
            and k + 3 < len(tokens)
            and tokens[k + 1].text == "["
            and tokens[k + 2].kind == "str"
            and tokens[k + 3].text == "]"
        ):
            literal = _literal_string(tokens[k + 2].text)
            if literal is not None:
                domains.add(literal)
        if t.kind == "op" and t.text in "[{" and _is_literal_open(tokens, k):
            largest = max(largest, _element_count(tokens, match, k))
    dynamic = max(ATTRIBUTE_VALUES_MAX, _ATTRIBUTES_AND_CAPACITIES_MAX, largest)
    dynamic <<= min(plus, 64)
    cost = _estimate(tokens, match, 0, len(tokens), dynamic)
    return _Analysis(frozenset(bound), frozenset(domains), cost)


def _is_literal_open(tokens: list[_Token], k: int) -> bool:
    """Whether ``[``/``{`` at ``k`` opens a list/map literal (not an index or a message)."""
    if k == 0:
        return True
    prev = tokens[k - 1]
    if prev.kind in ("num", "str") or (prev.kind == "id" and prev.text != "in"):
        return False
    return not (prev.kind == "op" and prev.text in ")]}")


def _element_count(tokens: list[_Token], match: dict[int, int], k: int) -> int:
    close = match[k]
    if close == k + 1:
        return 0
    commas = _top_level_commas(tokens, match, k + 1, close)
    trailing = bool(commas) and commas[-1] == close - 1
    return len(commas) + 1 - trailing


def _estimate(tokens: list[_Token], match: dict[int, int], i: int, j: int, dynamic: int) -> int:
    cost = 0
    k = i
    while k < j:
        t = tokens[k]
        if (
            t.kind == "op"
            and t.text == "."
            and k + 2 < j
            and tokens[k + 1].text in _MACROS
            and tokens[k + 2].text == "("
        ):
            open_ = k + 2
            close = match[open_]
            size = dynamic
            if k > 0 and tokens[k - 1].text in ("]", "}"):
                start = match[k - 1]
                if _is_literal_open(tokens, start):
                    size = _element_count(tokens, match, start)
            body = _estimate(tokens, match, open_ + 1, close, dynamic)
            cost += 2 + size * (body + 1)
            k = close + 1
            continue
        cost += dynamic if t.kind == "op" and t.text == "+" else 1
        k += 1
    return cost


# --------------------------------------------------------------------------- selectors


class Selector:
    """A compiled CEL selector expression. Create with :func:`compile_selector`."""

    __slots__ = ("_analysis", "_program", "expression")

    def __init__(self, expression: str, program: cel.Program, analysis: _Analysis) -> None:
        self.expression = expression
        self._program = program
        self._analysis = analysis

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"

    @property
    def estimated_cost(self) -> int:
        """The static worst-case cost estimate (compared with :data:`COST_LIMIT`)."""
        return self._analysis.cost

    def matches(self, device: DeviceView) -> bool:
        """Evaluate the selector against one device.

        Raises:
            CelCostLimitError: the expression's estimated cost exceeds :data:`COST_LIMIT`.
            CelRuntimeError: evaluation failed or did not produce a bool.
        """
        if self._analysis.cost > COST_LIMIT:
            raise CelCostLimitError(
                f"CEL runtime error: {_quote(self.expression)}: actual cost limit exceeded "
                f"(estimated cost {self._analysis.cost} > {COST_LIMIT})"
            )
        try:
            ctx = device._context(self._analysis.domains)  # noqa: SLF001 - same module
            result = self._program.execute(ctx)
        except Exception as exc:  # whatever the library raises is an evaluation failure
            raise CelRuntimeError(_runtime_message(self.expression, exc)) from exc
        if not isinstance(result, bool):
            raise CelRuntimeError(
                f"CEL runtime error: {_quote(self.expression)}: expression must evaluate to bool, "
                f"got {_type_name(result)}"
            )
        return result


def _quote(expression: str, limit: int = 200) -> str:
    """The expression for an error message, shortened if long."""
    return repr(expression if len(expression) <= limit else expression[:limit] + "...")


def _runtime_message(expression: str, exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        detail = f"no such key: {exc.args[0] if exc.args else ''}"
        hint = " (guard the reference with has())"
    else:
        detail = str(exc) or type(exc).__name__
        hint = ""
    return f"CEL runtime error: {_quote(expression)}: {detail}{hint}"


def compile_selector(expression: str) -> Selector:
    """Compile a selector expression once; later calls with the same text return the same object.

    Raises:
        CelCompileError: empty, longer than 10 KiB, syntax error, undeclared reference.
    """
    compiled = _compile_cached(expression)
    if isinstance(compiled, CelCompileError):
        raise compiled
    return compiled


@functools.lru_cache(maxsize=16384)
def _compile_cached(expression: str) -> Selector | CelCompileError:
    try:
        return _compile(expression)
    except CelCompileError as exc:
        return exc


def _compile(expression: str) -> Selector:
    if not expression.strip():
        raise CelCompileError("CEL compile error: expression is empty")
    if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"CEL compile error: expression is longer than {MAX_EXPRESSION_LENGTH} bytes"
        )
    source = _rewrite_bind(expression)
    try:
        program = cel.compile(source)
    except (ValueError, RuntimeError) as exc:
        raise CelCompileError(f"CEL compile error: {exc}") from exc
    analysis = _analyze(_tokenize(source))
    allowed = {"device", *analysis.bound_vars, *_TYPE_NAMES}
    undeclared = [v for v in program.variables() if v not in allowed]
    undeclared += [
        f
        for f in program.functions()
        if f[:1].isalpha() and f not in _BUILTIN_FUNCTIONS and f not in _FUNCTIONS
    ]
    if undeclared:
        raise CelCompileError(
            f"CEL compile error: {_quote(expression)}: "
            f"undeclared reference to {', '.join(undeclared)}"
        )
    return Selector(expression, program, analysis)
