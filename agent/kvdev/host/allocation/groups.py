"""Device compatibility groups (KEP-5963): what a device declares, and the rolling intersection.

Per counter set of a pool (the shared physical device), the devices drawing from it must have
compatible groups, by the rules of upstream's v1.37.2 allocator (structured/internal/
experimental compatibility_groups.go): the running state of a counter set is absent (no device
placed yet: anything goes), the empty set (every device placed declared none: only devices
without groups may join) or the intersection of the groups declared (a device must share one
of them; one without groups may not join). ``narrow`` folds a device in, or says it may not
join. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvdev.host.allocation.pools import PoolID
from kvdev.host.k8s.resource import Device

GroupKey = tuple[str, str, str]  # (driver, pool, counter set)
Groups = Mapping[GroupKey, frozenset[str]]


def device_groups(pool: PoolID, device: Device) -> list[tuple[GroupKey, frozenset[str]]]:
    """The groups a device declares, per ``consumesCounters`` entry (empty: none declared)."""
    return [
        ((*pool, use.counter_set), frozenset(use.compatibility_groups or ()))
        for use in device.consumes_counters or []
    ]


def _fold(groups: dict[GroupKey, frozenset[str]], key: GroupKey, mine: frozenset[str]) -> None:
    """Fold one declaration in without checking (upstream's ``add``)."""
    cur = groups.get(key)
    if cur is None:
        groups[key] = mine
    elif cur and mine:
        groups[key] = cur & mine


def baseline(
    declared: list[tuple[GroupKey, frozenset[str]]], into: dict[GroupKey, frozenset[str]]
) -> None:
    """Fold an already allocated device's declarations into the starting state."""
    for key, mine in declared:
        _fold(into, key, mine)


def narrow(groups: Groups, declared: list[tuple[GroupKey, frozenset[str]]]) -> Groups | None:
    """The rolling state after adding a device, or None when it may not join a counter set."""
    if not declared:
        return groups
    merged = dict(groups)
    for key, mine in declared:
        cur = merged.get(key)
        if cur is not None and (bool(mine) != bool(cur) or (mine and not cur & mine)):
            return None
        _fold(merged, key, mine)
    return merged
