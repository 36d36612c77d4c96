"""Allocator feature gates (upstream names); owns only the ``Features`` switch set."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Features:
    """Which optional allocator behaviours are enabled; every gate defaults to on."""

    DRAAdminAccess: bool = True
    DRAConsumableCapacity: bool = True
    DRADerivedAttributes: bool = True  # KEP-6080, alpha in v1.37
    DRADeviceBindingConditions: bool = True
    DRADeviceCompatibilityGroups: bool = True  # KEP-5963, alpha in v1.37
    DRADeviceTaints: bool = True
    DRAExtendedResource: bool = True  # KEP-5004: Pods' extended resources backed by DRA
    DRAListTypeAttributes: bool = True
    DRAPartitionableDevices: bool = True
    DRAPrioritizedList: bool = True

    @classmethod
    def from_overrides(cls, overrides: dict[str, bool]) -> Features:
        """All gates on, except those switched in ``overrides``.

        Raises:
            ValueError: an override names an unknown gate.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown allocator features: {', '.join(unknown)}")
        return cls(**overrides)
