"""Claim constraints: matchAttribute and distinctAttribute, with upstream's add/remove memory.

Owns the attribute lookup (exact key, or the short name when the domain is the device's
driver; a request's derived attribute of that name shadows both), value normalisation
(``Value``: kind, list flag, value set) and the two constraint objects the search mutates as
it picks and backtracks. They keep exactly what the upstream allocator keeps:

* ``Match`` counts its devices and remembers the first device's attribute (scalar mode) or a
  running intersection (``DRAListTypeAttributes``). Removing a device only lowers the count:
  the intersection is not widened again until the count is back at zero.
* ``Distinct`` remembers one attribute *per request name* (a subrequest counts as its parent):
  adding a device overwrites its request's entry, removing one deletes the entry, even when
  other devices of that request are still picked (class D, fixture 414: with count 3 the third
  device is compared only with the second; across two requests sharing a device likewise).

Both also keep the values of the devices actually picked, so the search can tell when the
remembered state, not the documented rule, decided (``--explain`` says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvdev.host.k8s.resource import Device

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
    attrs = device.attributes or {}
    found = attrs.get(attribute)
    if found is None:
        domain, sep, short = attribute.partition("/")
        if sep and domain == driver:
            found = attrs.get(short)
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
    common: tuple[str, frozenset[object]] | None = None  # list mode: running intersection
    count: int = 0
    picked: list[Value] = field(default_factory=list)  # values of the devices picked
    stale: bool = False  # the intersection is narrower than the picked devices' (list mode)

    def applies(self, base: str, sub: str) -> bool:
        """Whether the constraint covers a (sub)request."""
        return _applies(self.requests, base, sub)

    def accepts(self, value: Value | None) -> bool:
        """Whether ``add`` would admit the value (nothing changes)."""
        if value is None:
            return False
        if self.count == 0:
            return True
        kind, is_list, values = value
        if self.lists:
            common = self.common
            return common is not None and common[0] == kind and bool(common[1] & values)
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
        if value is None:
            return False
        kind, is_list, values = value
        if self.count == 0:
            self.stale = False
            if self.lists:
                self.common = (kind, values)
            else:
                self.first = value
        elif self.lists:
            assert self.common is not None
            if self.common[0] != kind or not self.common[1] & values:
                return False
            self.common = (kind, self.common[1] & values)
        else:
            first = self.first
            assert first is not None
            if is_list or first[1] or first[0] != kind or first[2] != values:
                return False
        self.count += 1
        self.picked.append(value)
        return True

    def remove(self, base: str) -> None:  # noqa: ARG002 - same call as Distinct.remove
        """Forget one device of a covered request (the count only)."""
        self.count -= 1
        self.picked.pop()
        if self.lists and self.count and self.common is not None:
            # Stale when the remembered intersection is narrower than the picked devices' own.
            true: frozenset[object] | None = None
            for _, _, vals in self.picked:
                true = vals if true is None else true & vals
            self.stale = true is not None and true != self.common[1]

    def documented(self, value: Value | None) -> bool:
        """Whether the value fits the devices actually picked (the API's rule)."""
        if value is None:
            return False
        kind, _, values = value
        common: frozenset[object] | None = None
        for k, _, vals in self.picked:
            if k != kind:
                return False
            common = vals if common is None else common & vals
        return common is None or bool(common & values)


@dataclass(slots=True, eq=False)
class Distinct:
    """distinctAttribute: the devices of the covered requests differ (module doc)."""

    attribute: str
    requests: frozenset[str]
    lists: bool
    remembered: dict[str, Value] = field(default_factory=dict)  # per request name
    count: int = 0
    picked: list[Value] = field(default_factory=list)

    def applies(self, base: str, sub: str) -> bool:
        """Whether the constraint covers a (sub)request."""
        return _applies(self.requests, base, sub)

    @property
    def stale(self) -> bool:
        """Fewer values are remembered than devices picked (one request has several)."""
        return len(self.remembered) < self.count

    def accepts(self, value: Value | None) -> bool:
        """Whether ``add`` would admit the value (nothing changes)."""
        return value is not None and (not self.count or self._differs(value))

    def add(self, base: str, value: Value | None) -> bool:
        """Admit a device of request ``base`` with ``value`` if it differs from what is kept."""
        if value is None:
            return False
        if self.count and not self._differs(value):
            return False
        self.remembered[base] = value
        self.count += 1
        self.picked.append(value)
        return True

    def _differs(self, value: Value) -> bool:
        kind, is_list, values = value
        for k, other_list, other in self.remembered.values():
            if self.lists:
                if k == kind and values & other:
                    return False
            elif is_list:
                return False  # upstream: an unknown (list) type never matches
            elif not other_list and k == kind and values == other:
                return False
        return True

    def remove(self, base: str) -> None:
        """Forget the request's remembered value (all of it) and one device."""
        self.remembered.pop(base, None)
        self.count -= 1
        self.picked.pop()

    def documented(self, value: Value | None) -> bool:
        """Whether the value differs from every device actually picked (the API's rule)."""
        if value is None:
            return False
        kind, _, values = value
        return not any(k == kind and vals & values for k, _, vals in self.picked)


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
