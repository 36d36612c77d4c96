"""Claim constraints: matchAttribute and distinctAttribute over the devices of a claim.

Owns the attribute lookup (exact key, or the short name when the domain is the device's
driver), value normalisation (scalars and list-typed attributes as typed value sets) and the
immutable per-constraint memory that the search threads through its state.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdev.host.k8s.resource import Device

Values = tuple[str, frozenset[object]]  # (type, values): a scalar is a one-element set

_KIND = {
    "string": "string",
    "strings": "string",
    "int": "int",
    "ints": "int",
    "bool": "bool",
    "bools": "bool",
    "version": "version",
    "versions": "version",
}


@dataclass(frozen=True, slots=True)
class Memory:
    """What a constraint remembers: match keeps the running intersection, distinct every set."""

    common: Values | None = None
    seen: tuple[Values, ...] = ()


EMPTY = Memory()


@dataclass(frozen=True, slots=True)
class Constraint:
    """One claim constraint; ``requests`` empty means every request of the claim."""

    attribute: str
    distinct: bool
    requests: frozenset[str]

    def applies(self, parent: str, name: str) -> bool:
        """Whether the constraint covers a (sub)request (by parent or ``parent/sub`` name)."""
        return not self.requests or parent in self.requests or name in self.requests


def attribute_values(driver: str, device: Device, attribute: str, lists: bool) -> Values | None:
    """The device's value(s) for a fully qualified attribute name, or None when absent."""
    attrs = device.attributes or {}
    found = attrs.get(attribute)
    if found is None:
        domain, _, short = attribute.partition("/")
        if domain == driver:
            found = attrs.get(short)
    if found is None:
        return None
    data = found.model_dump(by_alias=True, exclude_none=True)
    (key, value), *_ = data.items()
    if isinstance(value, list):
        if not lists:
            return None
        return (_KIND.get(key, key), frozenset(value))
    return (_KIND.get(key, key), frozenset([value]))


def admit(constraint: Constraint, memory: Memory, values: Values | None) -> tuple[bool, Memory]:
    """Whether a device with ``values`` satisfies the constraint, and the updated memory."""
    if values is None:
        return False, memory
    kind, vals = values
    if constraint.distinct:
        if any(k == kind and prev & vals for k, prev in memory.seen):
            return False, memory
        return True, Memory(common=None, seen=(*memory.seen, values))
    if memory.common is None:
        return True, Memory(common=values, seen=())
    cur_kind, cur = memory.common
    common = cur & vals if cur_kind == kind else frozenset()
    if not common:
        return False, memory
    return True, Memory(common=(kind, common), seen=())
