"""Consumable capacity and shared counters: what a device pick consumes, and whether it fits.

Owns requestPolicy rounding (validRange / validValues / default), the per-pick capacity
consumption, the fit check against capacity already consumed, and counter-set consumption of
partitionable devices. Amounts are exact ``Fraction`` values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import CapacityRequestPolicy, Device

Amounts = Mapping[str, Fraction]
CounterKey = tuple[str, str]  # (counter set, counter)


def qualify(name: str, driver: str) -> str:
    """A capacity or attribute name with its domain (the driver's when none is given)."""
    return name if "/" in name else f"{driver}/{name}"


def _round(amount: Fraction, policy: CapacityRequestPolicy | None) -> Fraction | None:
    """The amount rounded up by the policy, or None when the policy cannot serve it."""
    if policy is None:
        return amount
    default = parse_quantity(policy.default) if policy.default is not None else None
    if policy.valid_values:
        for text in policy.valid_values:
            value = parse_quantity(text)
            if value >= amount:
                return value
        return None
    rng = policy.valid_range
    if rng is None:
        return amount
    low = parse_quantity(rng.min)
    value = max(amount, low)
    if rng.step is not None:
        step = parse_quantity(rng.step)
        value = low + math.ceil((value - low) / step) * step
    if rng.max is not None and value > parse_quantity(rng.max) and value != default:
        return None
    return value


def consumption(driver: str, device: Device, requested: Amounts) -> dict[str, Fraction] | None:
    """What one pick of ``device`` consumes per capacity (keys as the device spells them).

    ``requested`` is keyed by qualified capacity name. None means the device cannot serve
    the request (undefined capacity requested, or the policy rejects the amount).
    """
    caps = device.capacity or {}
    by_qualified = {qualify(name, driver): name for name in caps}
    if any(name not in by_qualified for name in requested):
        return None
    out: dict[str, Fraction] = {}
    for qualified, name in by_qualified.items():
        cap = caps[name]
        policy = cap.request_policy
        if qualified in requested:
            value = _round(requested[qualified], policy)
            if value is None:
                return None
        elif policy is not None and policy.default is not None:
            value = parse_quantity(policy.default)
        else:
            value = parse_quantity(cap.value)
        out[name] = value
    return out


def fits(device: Device, used: Amounts, new: Amounts) -> bool:
    """Already consumed plus ``new`` stays within every capacity of the device."""
    caps = device.capacity or {}
    return all(
        used.get(name, Fraction(0)) + amount <= parse_quantity(caps[name].value)
        for name, amount in new.items()
    )


def add(a: Amounts, b: Amounts) -> dict[str, Fraction]:
    """Sum two amount maps."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Fraction(0)) + v
    return out


def counter_need(device: Device) -> dict[CounterKey, Fraction]:
    """What a device takes from its pool's counter sets."""
    out: dict[CounterKey, Fraction] = {}
    for use in device.consumes_counters or []:
        for name, counter in use.counters.items():
            key = (use.counter_set, name)
            out[key] = out.get(key, Fraction(0)) + parse_quantity(counter.value)
    return out


def counters_fit(
    totals: Mapping[str, Mapping[str, Fraction]],
    used: Mapping[CounterKey, Fraction],
    need: Mapping[CounterKey, Fraction],
) -> bool:
    """Used plus ``need`` stays within the pool's counters (undefined counters never fit)."""
    for (cs, name), amount in need.items():
        total = totals.get(cs, {}).get(name)
        if total is None or used.get((cs, name), Fraction(0)) + amount > total:
            return False
    return True
