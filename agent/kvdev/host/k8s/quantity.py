"""Kubernetes resource quantities (``resource.Quantity``): syntax check and exact parsing.

Quantities stay strings in the models (as upstream serializes them); ``parse_quantity`` turns
one into an exact ``Fraction`` for arithmetic. No I/O here.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from fractions import Fraction
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

_QUANTITY = re.compile(
    r"(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?\Z"
)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_EXPONENT = 1000  # far beyond any int64 quantity; stops "1e999999999" eating memory
_MAX_DIGITS = 128  # likewise; keeps every value printable (Python's int str limit is 4300)


@functools.lru_cache(maxsize=8192)
def parse_quantity(text: str) -> Fraction:
    """Parse ``"4Gi"``, ``"500m"``, ``"1.5"``, ``"2e3"`` into an exact number.

    Memoised (the allocator and the scheduler parse the same few device capacities and
    requests over and over; a ``Fraction`` is immutable).

    Raises:
        ValueError: ``text`` is not a Kubernetes quantity.
    """
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(
            f"{text!r} is not a quantity (a number with an optional suffix: "
            "m, k, M, G, T, P, E, Ki..Ei or an exponent such as e3)"
        )
    if len(m["number"]) > _MAX_DIGITS:
        raise ValueError(
            f"{text[:20]!r}... ({len(text)} characters): more than {_MAX_DIGITS} digits"
        )
    value = Fraction(Decimal(m["number"]))
    suffix = m["suffix"] or ""
    if suffix in _BINARY_SI:
        value *= 2 ** _BINARY_SI[suffix]
    elif suffix in _DECIMAL_SI:
        value *= Fraction(10) ** _DECIMAL_SI[suffix]
    elif suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"{text!r}: exponent out of range")
        value *= Fraction(10) ** exponent
    return -value if m["sign"] == "-" else value


def check_quantity(value: str) -> str:
    """Validate the syntax of a quantity and return it unchanged."""
    parse_quantity(value)
    return value


def _int_to_text(value: object) -> object:
    # JSON numbers are valid quantities upstream (``value: 8``); booleans are not numbers.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


Quantity = Annotated[str, BeforeValidator(_int_to_text), AfterValidator(check_quantity)]
