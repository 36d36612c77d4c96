"""Shared counters of partitionable devices (KEP-4815): the run's bookkeeping, as upstream keeps it.

Owns what is available per counter set (the pool's counter sets minus what already
allocated devices of the pool take) and what the run's picks consume, with the rules of
upstream's v1.37.2 allocator (checkAvailableCounters, deallocateCountersForDevice):

* Both are keyed by the pool (driver and name); what is available is computed the first
  time a device of the pool is checked.
* A check adds the device's consumption first, then fails if *any* counter of the pool's
  counter sets is over (a counter already over, by allocated devices, fails every device), and
  then takes the consumption back.
* A device that passes keeps its consumption until the search rejects it by a later check
  or backtracks over it: both give it back (``release``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from fractions import Fraction

from kvdev.host.allocation.pools import Candidate, DeviceID, Pool, PoolID
from kvdev.host.k8s.quantity import parse_quantity

Sets = dict[str, dict[str, Fraction]]  # counter set -> counter -> amount


class Counters:
    """Counter availability and consumption of one allocator run (module docstring)."""

    def __init__(self, *allocated: Collection[DeviceID]) -> None:
        self._allocated = allocated  # devices in use before the run (exclusive, shared)
        self.available: dict[PoolID, Sets] = {}
        self.consumed: dict[PoolID, Sets] = {}

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
        key = candidate.pool.id
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
        """Give the device's consumption back (rejected by a later check, or backtracked)."""
        _add(self.consumed.setdefault(candidate.pool.id, {}), candidate.need, -1)


def _add(into: Sets, need: Mapping[str, Mapping[str, Fraction]], sign: int) -> None:
    for set_name, counters in need.items():
        mine = into.setdefault(set_name, {})
        for counter, amount in counters.items():
            mine[counter] = mine.get(counter, Fraction(0)) + sign * amount
