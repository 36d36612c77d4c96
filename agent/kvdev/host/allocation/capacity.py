"""Consumable capacity (KEP-5075): what one pick of a device consumes, and whether it fits.

Owns, as the upstream allocator computes it, per capacity of the device:

* the amount consumed: the request's amount rounded up by the capacity's ``requestPolicy``
  (``validRange``: to ``min``, then to ``min + k*step`` in whole units; ``validValues``: to the
  next listed value, else the amount itself), or, when the request names no amount, the
  policy ``default`` or the whole capacity;
* the policy check of that amount (an amount equal to the ``default`` always passes; above
  ``max``, off the step grid, or not a listed value fails);
* the fit: capacity already allocated + capacity picked in this run + this amount must not
  exceed the capacity's value.

A request naming a capacity the device does not define (by its exact key, as upstream
compares them) makes the device unusable for it. Amounts are exact ``Fraction`` values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import DeviceCapacity

Amounts = Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device and its request policy, parsed."""

    value: Fraction
    policy: bool = False
    default: Fraction | None = None
    values: tuple[Fraction, ...] | None = None  # validValues (None: not set)
    ranged: bool = False  # validRange is set
    low: Fraction | None = None
    high: Fraction | None = None
    step: Fraction | None = None


def parse_capacity(cap: DeviceCapacity) -> Capacity:
    """A ``DeviceCapacity`` as a ``Capacity``."""
    policy = cap.request_policy
    value = parse_quantity(cap.value)
    if policy is None:
        return Capacity(value)
    rng = policy.valid_range

    def q(text: str | None) -> Fraction | None:
        return None if text is None else parse_quantity(text)

    return Capacity(
        value,
        policy=True,
        default=q(policy.default),
        values=None
        if policy.valid_values is None
        else tuple(parse_quantity(v) for v in policy.valid_values),
        ranged=rng is not None,
        low=q(rng.min) if rng else None,
        high=q(rng.max) if rng else None,
        step=q(rng.step) if rng else None,
    )


def _whole(x: Fraction) -> int:
    """Go's ``Quantity.Value()``: rounded up, away from zero, to a whole number."""
    return math.ceil(x) if x >= 0 else math.floor(x)


def _round_up(requested: Fraction, low: Fraction, step: Fraction | None) -> Fraction:
    """``validRange``: to ``min``, then up to ``min + k*step`` in whole units."""
    if requested < low or step is None:
        return max(requested, low)
    whole_low, whole_step = _whole(low), _whole(step)
    n, rest = divmod(_whole(requested) - whole_low, whole_step)
    return Fraction(whole_low + whole_step * (n + (1 if rest else 0)))


def consumed(requested: Fraction | None, cap: Capacity) -> Fraction:
    """What one pick consumes of ``cap`` when the request asks for ``requested``."""
    if requested is None:
        return cap.default if cap.default is not None else cap.value
    if cap.policy and cap.ranged and cap.low is not None:
        return _round_up(requested, cap.low, cap.step)
    if cap.policy and cap.values is not None:
        return next((v for v in cap.values if requested <= v), requested)
    return requested


def _off_range(amount: Fraction, cap: Capacity) -> bool:
    if cap.high is not None and amount > cap.high:
        return True
    if cap.step is None:
        return False
    step = _whole(cap.step)
    return step != 0 and (_whole(amount) - _whole(cap.low or Fraction(0))) % step != 0


def violates(amount: Fraction, cap: Capacity) -> bool:
    """Whether the amount breaks the capacity's request policy."""
    if not cap.policy or (cap.default is not None and amount == cap.default):
        return False
    if cap.ranged:
        return _off_range(amount, cap)
    return bool(cap.values) and amount not in (cap.values or ())


Need = tuple[tuple[str, Fraction, Fraction], ...]  # (capacity, amount, capacity value)


def need(requests: Amounts | None, caps: Mapping[str, Capacity]) -> Need | None:
    """What one pick takes per capacity, or None when the request cannot use the device.

    None: a requested capacity the device does not define, or an amount its policy refuses.
    """
    if requests and any(name not in caps for name in requests):
        return None
    out = []
    for name, cap in caps.items():
        amount = consumed(requests.get(name) if requests else None, cap)
        if violates(amount, cap):
            return None
        out.append((name, amount, cap.value))
    return tuple(out)


def fits(need_: Need, used: Amounts | None, picking: Amounts | None) -> bool:
    """Allocated (``used``) + picked in this run (``picking``) + ``need_`` within capacity."""
    for name, amount, total in need_:
        have = amount
        if used:
            have += used.get(name, 0)
        if picking:
            have += picking.get(name, 0)
        if have > total:
            return False
    return True


def add(into: dict[str, Fraction], more: Amounts) -> None:
    """Add ``more`` to ``into``, name by name."""
    for k, v in more.items():
        into[k] = into.get(k, Fraction(0)) + v
