"""What a selector sees of one device: :class:`DeviceView`, built by :func:`device_view`.

Each view caches its converted CEL context (one per set of extra empty domains a selector
needs), so later evaluations on the same view skip the conversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvdev.host.allocation.cel._functions import FUNCTIONS
from kvdev.host.allocation.cel._native import native
from kvdev.host.allocation.cel._values import Semver, quantity_from_text, semver_value

if TYPE_CHECKING:
    import cel

    from kvdev.host.k8s.resource import Device


@dataclass(frozen=True)
class DeviceView:
    """What a selector sees of one device (the upstream ``device`` CEL variable).

    Attributes:
        driver: the driver name.
        attributes: domain -> id -> value: ``int``, ``bool``, ``str``, :class:`Semver`, or a
            list of one of these.
        capacity: domain -> id -> quantity string.
        allow_multiple_allocations: the device's flag, false when unset (always present in
            the CEL object, whatever DRAConsumableCapacity says, as the scheduler has it).
    """

    driver: str
    attributes: Mapping[str, Mapping[str, object]]
    capacity: Mapping[str, Mapping[str, str]]
    allow_multiple_allocations: bool
    # Converted CEL contexts, one per set of extra (empty) domains a selector needs.
    _contexts: dict[frozenset[str], cel.Context] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def context(self, domains: frozenset[str]) -> cel.Context:
        """The CEL context of this device with ``domains`` present (empty where it lacks them).

        Cached per set of domains the device lacks, so most selectors share one context.
        """
        attrs, caps = self.attributes, self.capacity
        if domains:
            domains = frozenset(d for d in domains if d not in attrs or d not in caps)
        ctx = self._contexts.get(domains)
        if ctx is None:
            ctx = native.Context(
                variables={"device": self._cel_device(domains)}, functions=dict(FUNCTIONS)
            )
            self._contexts[domains] = ctx
        return ctx

    def _cel_device(self, domains: frozenset[str]) -> dict[str, object]:
        attrs: dict[str, dict[str, object]] = {
            dom: {k: _to_cel(v) for k, v in ids.items()} for dom, ids in self.attributes.items()
        }
        caps: dict[str, dict[str, object]] = {
            dom: {k: quantity_from_text(v) for k, v in ids.items()}
            for dom, ids in self.capacity.items()
        }
        for dom in (*domains, self.driver):
            attrs.setdefault(dom, {})
            caps.setdefault(dom, {})
        device: dict[str, object] = {
            "driver": self.driver,
            "attributes": attrs,
            "capacity": caps,
        }
        device["allowMultipleAllocations"] = self.allow_multiple_allocations
        return device


def _to_cel(v: object) -> object:
    if isinstance(v, Semver):
        return semver_value(v)
    if isinstance(v, list | tuple):
        return [_to_cel(e) for e in v]
    return v


def _split_name(driver: str, name: str) -> tuple[str, str]:
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def device_view(driver: str, device: Device) -> DeviceView:
    """Build the CEL view of a ResourceSlice device published by ``driver``.

    Unqualified attribute and capacity names go under the driver's domain (``model`` on
    ``gpu.example.com`` is ``attributes["gpu.example.com"]["model"]``); a device with both
    ``model`` and ``gpu.example.com/model`` gets the qualified one's value.
    """
    attributes: dict[str, dict[str, object]] = {}
    attrs = device.attributes or {}
    for name, attr in attrs.items():
        if "/" not in name and f"{driver}/{name}" in attrs:
            continue  # the same key as ``driver/name``, which is used (as everywhere in kvdev)
        domain, ident = _split_name(driver, name)
        value: object
        if attr.version is not None:
            value = Semver.parse(attr.version)
        elif attr.versions is not None:
            value = [Semver.parse(v) for v in attr.versions]
        else:
            value = attr.value
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, str]] = {}
    for name, cap in (device.capacity or {}).items():
        domain, ident = _split_name(driver, name)
        capacity.setdefault(domain, {})[ident] = cap.value
    return DeviceView(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(device.allow_multiple_allocations),
    )
