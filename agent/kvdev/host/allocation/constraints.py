"""Claim constraints: matchAttribute and distinctAttribute, with upstream's add/remove memory.

Owns the attribute lookup (exact key, or the short name when the domain is the device's
driver; a request's derived attribute of that name shadows both), value normalisation
(``Value``: kind, list flag, value set) and the two constraint objects the search mutates as
it picks and backtracks. They keep what upstream's v1.37.2 allocator keeps (structured/
internal/experimental: matchAttributeConstraint, distinctAttributeConstraint):

* ``Match`` counts its devices and remembers the first device's attribute (scalar mode) or,
  with ``DRAListTypeAttributes``, a stack of running intersections: each device pushes the
  narrowed set and removing it pops it, so backtracking restores the intersection.
* ``Distinct`` keeps the attribute of every device it admitted, in order (a stack): a new
  device must differ from each (pairwise disjoint in list mode); removing pops the last.

"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvdev.host.k8s.resource import Device
from kvdev.schema.fields import lookup_attribute

# (kind, is_list, values): kind is int / bool / string / version; a scalar is a 1-element set.
Value = tuple[str, bool, frozenset[object]]

_KIND = {
    "string": ("string", False),
    "strings": ("string", True),
    "int": ("int", False),
    "ints": ("int", True),
    "bool": ("bool", False),
    "bools": ("bool", True),
    "version": ("version", False),
    "versions": ("version", True),
}


EMPTY_LIST: Value = ("", True, frozenset())  # an empty list: a value of no known type


def to_value(key: str, raw: object) -> Value | None:
    """A typed attribute value (its one-of key and value) as a ``Value``; None if unusable."""
    kind = _KIND.get(key)
    if kind is None:
        return None
    if kind[1]:
        values = frozenset(raw) if isinstance(raw, list | tuple) else frozenset()
        return (kind[0], True, values) if values else None
    return (kind[0], False, frozenset([raw]))


def attribute_value(driver: str, device: Device, attribute: str) -> Value | None:
    """The device's value for a fully qualified attribute name, or None when absent."""
    found = lookup_attribute(dict(device.attributes or {}), driver, attribute)
    if found is None:
        return None
    data = found.model_dump(by_alias=True, exclude_none=True)
    ((key, raw),) = data.items()
    return to_value(key, raw)


def _applies(names: frozenset[str], base: str, sub: str) -> bool:
    if not names:
        return True
    return base in names or (bool(sub) and f"{base}/{sub}" in names)


@dataclass(slots=True, eq=False)
class Match:
    """matchAttribute: every device of the covered requests shares the value (module doc)."""

    attribute: str
    requests: frozenset[str]
    lists: bool
    first: Value | None = None  # scalar mode
    # list mode: the running intersection after each device admitted (a stack)
    common: list[tuple[str, frozenset[object]]] = field(default_factory=list)
    count: int = 0

    def applies(self, base: str, sub: str) -> bool:
        """Whether the constraint covers a (sub)request."""
        return _applies(self.requests, base, sub)

    def accepts(self, value: Value | None) -> bool:
        """Whether ``add`` would admit the value (nothing changes)."""
        if value is None or (self.lists and not value[2]):
            return False
        if self.count == 0:
            return True
        kind, is_list, values = value
        if self.lists:
            common = self.common[-1]
            return common[0] == kind and bool(common[1] & values)
        first = self.first
        return (
            first is not None
            and not is_list
            and not first[1]
            and first[0] == kind
            and (first[2] == values)
        )

    def add(self, base: str, value: Value | None) -> bool:  # noqa: ARG002 - as Distinct.add
        """Admit a device with ``value`` (None: it lacks the attribute) and remember it.

        Only for requests the constraint ``applies`` to, as ``remove``.
        """
        if value is None or (self.lists and not value[2]):
            return False
        kind, is_list, values = value
        if self.count == 0:
            if self.lists:
                self.common.append((kind, values))
            else:
                self.first = value
        elif self.lists:
            top = self.common[-1]
            if top[0] != kind or not top[1] & values:
                return False
            self.common.append((kind, top[1] & values))
        else:
            first = self.first
            assert first is not None
            if is_list or first[1] or first[0] != kind or first[2] != values:
                return False
        self.count += 1
        return True

    def remove(self, base: str) -> None:  # noqa: ARG002 - same call as Distinct.remove
        """Forget the last device of a covered request (list mode: pop its intersection)."""
        self.count -= 1
        if self.lists:
            self.common.pop()

    def reset(self) -> None:
        """Forget every device admitted (a new search)."""
        self.first = None
        self.common.clear()
        self.count = 0


@dataclass(slots=True, eq=False)
class Distinct:
    """distinctAttribute: the devices of the covered requests differ (module doc)."""

    attribute: str
    requests: frozenset[str]
    lists: bool
    picked: list[Value] = field(default_factory=list)  # every device admitted, in order

    def applies(self, base: str, sub: str) -> bool:
        """Whether the constraint covers a (sub)request."""
        return _applies(self.requests, base, sub)

    def accepts(self, value: Value | None) -> bool:
        """Whether ``add`` would admit the value (nothing changes)."""
        return value is not None and not (self.lists and not value[2]) and self._differs(value)

    def add(self, base: str, value: Value | None) -> bool:  # noqa: ARG002 - as Match.add
        """Admit a device with ``value`` if it differs from every device admitted so far."""
        if not self.accepts(value):
            return False
        assert value is not None
        self.picked.append(value)
        return True

    def _differs(self, value: Value) -> bool:
        kind, is_list, values = value
        for k, other_list, other in self.picked:
            if self.lists:
                if k == kind and values & other:
                    return False
            elif is_list:
                return False  # upstream: an unknown (list) type never matches
            elif not other_list and k == kind and values == other:
                return False
        return True

    def remove(self, base: str) -> None:  # noqa: ARG002 - as Match.remove
        """Forget the last device admitted."""
        self.picked.pop()

    def reset(self) -> None:
        """Forget every device admitted (a new search)."""
        self.picked.clear()


Constraint = Match | Distinct


def lookup(
    driver: str,
    device: Device,
    attribute: str,
    derived: Mapping[str, Value | None] | None,
    cache: dict[tuple[int, str], Value | None],
) -> Value | None:
    """The value a constraint compares: the request's derived attribute, else the device's."""
    if derived is not None and attribute in derived:
        return derived[attribute]
    key = (id(device), attribute)
    if key not in cache:
        cache[key] = attribute_value(driver, device, attribute)
    return cache[key]
