"""The functions registered with the CEL library: semver, quantity and ``includes``.

The library calls a registered function for ``x.f(a)`` as ``f(x, a)``, so the Kubernetes
semver/quantity methods are plain Python functions over the tagged values of
:mod:`kvdev.host.allocation.cel._values`; ``matches`` is :mod:`._regex`'s. Each is a
checkpoint of :mod:`._interrupt`. Also drops the library's log of exceptions those
functions raise.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Final

from kvdev.host.allocation.cel._interrupt import checkpoint
from kvdev.host.allocation.cel._regex import FUNCTION as MATCHES_FUNCTION
from kvdev.host.allocation.cel._regex import matches
from kvdev.host.allocation.cel._values import (
    QUANTITY_TAG,
    Semver,
    as_quantity,
    as_semver,
    no_overload,
    quantity_from_text,
    quantity_value,
    semver_value,
    sign_of,
)
from kvdev.host.k8s.quantity import parse_quantity

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


# --------------------------------------------------------------------------- functions


def _fn_semver(text: object, normalize: object = False) -> str:
    if not isinstance(text, str) or not isinstance(normalize, bool):
        raise no_overload("semver", text, normalize)
    return _semver_from_text(text, normalize=normalize)


@functools.lru_cache(maxsize=4096)
def _semver_from_text(text: str, *, normalize: bool) -> str:
    return semver_value(Semver.parse(text, normalize=normalize))


def _fn_is_semver(text: object, normalize: object = False) -> bool:
    if not isinstance(text, str) or not isinstance(normalize, bool):
        raise no_overload("isSemver", text, normalize)
    try:
        Semver.parse(text, normalize=normalize)
    except ValueError:
        return False
    return True


def _fn_quantity(text: object) -> str:
    if not isinstance(text, str) or text.startswith(QUANTITY_TAG):
        raise no_overload("quantity", text)
    return quantity_from_text(text)


def _fn_is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        raise no_overload("isQuantity", text)
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _compare(name: str, a: object, b: object) -> int:
    qa, qb = as_quantity(a), as_quantity(b)
    if qa is not None and qb is not None:
        return (qa > qb) - (qa < qb)
    sa, sb = as_semver(a), as_semver(b)
    if sa is not None and sb is not None:
        return sa.compare(sb)
    raise no_overload(name, a, b)


def _fn_compare_to(a: object, b: object) -> int:
    return _compare("compareTo", a, b)


def _fn_is_greater_than(a: object, b: object) -> bool:
    return _compare("isGreaterThan", a, b) > 0


def _fn_is_less_than(a: object, b: object) -> bool:
    return _compare("isLessThan", a, b) < 0


def _semver_part(name: str, index: int) -> Callable[[object], int]:
    def part(v: object) -> int:
        s = as_semver(v)
        if s is None:
            raise no_overload(name, v)
        return (s.major, s.minor, s.patch)[index]

    part.__name__ = name
    return part


def _quantity_operand(name: str, a: object, b: object) -> tuple[Fraction, Fraction]:
    qa = as_quantity(a)
    qb = as_quantity(b)
    if qb is None and isinstance(b, int) and not isinstance(b, bool):
        qb = Fraction(b)
    if qa is None or qb is None:
        raise no_overload(name, a, b)
    return qa, qb


def _fn_add(a: object, b: object) -> str:
    qa, qb = _quantity_operand("add", a, b)
    return quantity_value(qa + qb)


def _fn_sub(a: object, b: object) -> str:
    qa, qb = _quantity_operand("sub", a, b)
    return quantity_value(qa - qb)


def _fn_as_integer(a: object) -> int:
    q = as_quantity(a)
    if q is None:
        raise no_overload("asInteger", a)
    if q.denominator != 1 or not _INT64_MIN <= q.numerator <= _INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return q.numerator


def _fn_as_approximate_float(a: object) -> float:
    q = as_quantity(a)
    if q is None:
        raise no_overload("asApproximateFloat", a)
    return float(q)


def _fn_sign(a: object) -> int:
    q = as_quantity(a)
    if q is None:
        raise no_overload("sign", a)
    return sign_of(q)


def _cel_equal(a: object, b: object) -> bool:
    # CEL equality is typed: true is not 1 (Python says it is).
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _fn_includes(a: object, x: object) -> bool:
    if isinstance(a, list):
        return any(_cel_equal(e, x) for e in a)
    return _cel_equal(a, x)


def _checkpointed(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn`` after a checkpoint of :mod:`._interrupt` (each of our functions is one)."""

    @functools.wraps(fn)
    def call(*args: object) -> object:
        checkpoint()
        return fn(*args)

    return call


_PLAIN: Final[Mapping[str, Callable[..., object]]] = {
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
FUNCTIONS: Final[Mapping[str, Callable[..., object]]] = {
    **{name: _checkpointed(fn) for name, fn in _PLAIN.items()},
    MATCHES_FUNCTION: matches,  # checkpoints itself
}
