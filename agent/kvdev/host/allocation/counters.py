"""Shared counters of partitionable devices (KEP-4815): the run's bookkeeping, as upstream keeps it.

Owns what is available per counter set (the pool's counter sets minus what already
allocated devices of the pool take) and what the run's picks consume, with upstream's rules:

* Both are keyed by the pool *name* (not driver and name); what is available is computed the
  first time a device of a pool of that name is checked.
* A check adds the device's consumption first, then fails if *any* counter of the pool's
  counter sets is over (a counter already over, by allocated devices, fails every device), and
  only then takes the consumption back.
* A device that passes keeps its consumption until the search backtracks over it. When a later
  check of the same candidate rejects it (a taint, a constraint, capacity), nobody gives the
  counters back (class C, fixture 711: "as the 1.37 scheduler does"); ``leaked`` keeps what
  was left behind that way, so a rejection it causes can be explained.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from fractions import Fraction

from kvdev.host.allocation.pools import Candidate, DeviceID, Pool
from kvdev.host.k8s.quantity import parse_quantity

Sets = dict[str, dict[str, Fraction]]  # counter set -> counter -> amount


class Counters:
    """Counter availability and consumption of one allocator run (module docstring)."""

    def __init__(self, *allocated: Collection[DeviceID]) -> None:
        self._allocated = allocated  # devices in use before the run (exclusive, shared)
        self.available: dict[str, Sets] = {}
        self.consumed: dict[str, Sets] = {}
        self.leaked: dict[str, Sets] = {}

    def _compute(self, pool: Pool) -> Sets:
        out = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for name, device in pool.devices():
            ident = (pool.driver, pool.name, name)
            if not any(ident in held for held in self._allocated):
                continue
            for use in device.consumes_counters or []:
                mine = out.get(use.counter_set)
                if mine is None:
                    continue
                for counter, amount in use.counters.items():
                    if counter in mine:
                        mine[counter] -= parse_quantity(amount.value)
        return out

    def take(self, candidate: Candidate) -> bool:
        """Add the device's consumption; False (and nothing taken) when a counter is over."""
        key = candidate.pool.name
        available = self.available.get(key)
        if available is None:
            available = self._compute(candidate.pool)
            self.available[key] = available
        used = self.consumed.setdefault(key, {})
        _add(used, candidate.need, 1)
        for set_name, counters in available.items():
            mine = used.get(set_name, {})
            for counter, amount in counters.items():
                if amount < mine.get(counter, 0):
                    _add(used, candidate.need, -1)
                    return False
        return True

    def release(self, candidate: Candidate) -> None:
        """Give the device's consumption back (the search backtracks over it)."""
        _add(self.consumed.setdefault(candidate.pool.name, {}), candidate.need, -1)

    def leak(self, candidate: Candidate) -> None:
        """Remember that a rejected candidate kept its consumption (nothing is given back)."""
        _add(self.leaked.setdefault(candidate.pool.name, {}), candidate.need, 1)

    def fits_without_leaks(self, candidate: Candidate) -> bool:
        """Whether the device would have fitted had rejected candidates given counters back."""
        key = candidate.pool.name
        available = self.available.get(key, {})
        used = self.consumed.get(key, {})
        leaked = self.leaked.get(key, {})
        for set_name, counters in available.items():
            mine, lost = used.get(set_name, {}), leaked.get(set_name, {})
            extra = candidate.need.get(set_name, {})
            for counter, amount in counters.items():
                total = mine.get(counter, 0) - lost.get(counter, 0) + extra.get(counter, 0)
                if amount < total:
                    return False
        return True


def _add(into: Sets, need: Mapping[str, Mapping[str, Fraction]], sign: int) -> None:
    for set_name, counters in need.items():
        mine = into.setdefault(set_name, {})
        for counter, amount in counters.items():
            mine[counter] = mine.get(counter, Fraction(0)) + sign * amount
