"""Device compatibility groups (KEP-5963): what a device declares, and the rolling intersection.

Per counter set (the shared physical device), every device drawing from it must share at
least one group with all the others; ``narrow`` keeps the running intersection and says
when a device would empty it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvdev.host.allocation.features import Features
from kvdev.host.allocation.pools import PoolID
from kvdev.host.k8s.resource import Device

GroupKey = tuple[str, str, str]  # (driver, pool, counter set)


def device_groups(
    pool: PoolID, device: Device, features: Features
) -> dict[GroupKey, frozenset[str]]:
    """The compatibility groups a device declares, per counter set it draws from (KEP-5963).

    A ``consumesCounters`` entry without groups is compatible with everything and is left
    out. With ``DRADeviceCompatibilityGroups`` off the field is ignored altogether.
    """
    if not features.DRADeviceCompatibilityGroups:
        return {}
    out: dict[GroupKey, frozenset[str]] = {}
    for use in device.consumes_counters or []:
        if use.compatibility_groups:
            key = (*pool, use.counter_set)
            groups = frozenset(use.compatibility_groups)
            out[key] = out[key] & groups if key in out else groups
    return out


def narrow(
    groups: Mapping[GroupKey, frozenset[str]], declared: Mapping[GroupKey, frozenset[str]]
) -> Mapping[GroupKey, frozenset[str]] | None:
    """The rolling intersections after adding a device, or None when one becomes empty."""
    if not declared:
        return groups
    merged = dict(groups)
    for key, mine in declared.items():
        common = merged[key] & mine if key in merged else mine
        if not common:
            return None
        merged[key] = common
    return merged
