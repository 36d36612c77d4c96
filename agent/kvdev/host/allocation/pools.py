"""Which devices a node can see: slice relevance, pools, generations, validity and search order.

Owns node-selector matching, grouping the node's slices into pools by (driver, pool name) at
their newest generation, the completeness check (against the whole cluster when the node does
not see every slice), validation (duplicate device names, counter sets, counter consumption)
and the order the search visits devices in, all as the upstream allocator (the variant with
every gate on) does it:

* The node's slices are those naming it (``nodeName``) followed by every slice naming no node.
  With ``DRAPartitionableDevices`` off, slices that set ``perDeviceNodeSelection`` (even to
  false) or carry ``sharedCounters`` are skipped (class H). A slice is relevant when its
  ``nodeName``/``allNodes``/``nodeSelector`` matches, or, with ``perDeviceNodeSelection``,
  when any of its devices matches; each device of such a slice stays a candidate and is
  checked against the node only after the selectors (so their CEL runs on it).
* Newest generation wins; a pool is complete when its relevant slices number
  ``resourceSliceCount`` (exactly). Otherwise the whole cluster is asked: a newer generation
  makes the pool obsolete (dropped), the slices of this generation decide completeness.
* An incomplete pool is reported as incomplete *before* any validation (class F): never
  invalid, never searched.
* Validation of a complete pool: device names unique among its relevant device slices; then
  (partitionable on) counter-set names unique and every consumed counter set and counter
  defined, for relevant and other slices of the pool. Invalid pools are never searched.
* Order: pools by driver then name; pools where any device of a relevant slice declares
  ``bindingConditions`` (per-device devices of other nodes included, class G) go last.
  Inside a pool slices by name, devices as listed.

``PoolIndex`` indexes slices once (by pool, node-local slices by node name) so that finding one
node's pools among thousands of slices costs what that node sees, not the whole cluster.
``PoolIndex.of`` keeps the index of the last slice snapshot it was asked for (the same slice
objects in the same order, same features), so that calls handed the whole cluster's slices
(``allocate(slices=...)``) index them once, not once per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Protocol

from kvdev.host.allocation.capacity import Capacity, parse_capacity
from kvdev.host.allocation.features import Features
from kvdev.host.k8s.common import (
    DeviceTaint,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import Device, ResourceSlice

DeviceID = tuple[str, str, str]  # (driver, pool, device)
PoolID = tuple[str, str]  # (driver, pool)
_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


class NodeLike(Protocol):
    """The node being evaluated: only its name and labels matter."""

    @property
    def name(self) -> str:
        """``metadata.name``."""
        ...

    @property
    def labels(self) -> Mapping[str, str]:
        """``metadata.labels``."""
        ...


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A plain node: name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def _requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    values = req.values or []
    op = req.operator
    if op in {"In", "NotIn"}:
        return (value is not None and value in values) == (op == "In")
    if op in {"Exists", "DoesNotExist"}:
        return (value is not None) == (op == "Exists")
    try:
        have, want = int(value or ""), int(values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def term_matches(term: NodeSelectorTerm, node: NodeLike) -> bool:
    """All requirements of the term hold; an empty term matches nothing."""
    exprs = term.match_expressions or []
    fields_ = term.match_fields or []
    if not exprs and not fields_:
        return False
    labels = node.labels
    if not all(_requirement_matches(r, labels.get(r.key)) for r in exprs):
        return False
    return all(
        _requirement_matches(r, node.name if r.key == "metadata.name" else None) for r in fields_
    )


def selector_matches(selector: NodeSelector, node: NodeLike) -> bool:
    """Some term of the selector matches the node."""
    return any(term_matches(t, node) for t in selector.node_selector_terms)


def _node_matches(
    node: NodeLike, name: str | None, all_nodes: bool | None, selector: NodeSelector | None
) -> bool:
    if name:
        return name == node.name
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(selector, node)
    return False


def device_visible(device: Device, node: NodeLike) -> bool:
    """Per-device node selection (``perDeviceNodeSelection`` slices)."""
    return _node_matches(node, device.node_name, device.all_nodes, device.node_selector)


def slice_visible(slice_: ResourceSlice, node: NodeLike) -> bool:
    """Whether a slice is relevant for the node (rule 1 of the module docstring)."""
    spec = slice_.spec
    if spec.node_name or spec.all_nodes or spec.node_selector is not None:
        return _node_matches(node, spec.node_name, spec.all_nodes, spec.node_selector)
    if spec.per_device_node_selection:
        return any(device_visible(d, node) for d in spec.devices or [])
    return False


_NOTHING: Mapping[str, Any] = MappingProxyType({})  # no counters, no capacities


class Candidate:
    """One device the search may visit, with what the checks read of it, computed once.

    ``visible`` is False for a device of a ``perDeviceNodeSelection`` slice that does not
    select the node (rejected after the selectors, as upstream does). ``multi`` is the
    device's allowMultipleAllocations as written (the gate is the search's), ``need`` what it
    takes per counter set and counter, ``blocking`` its NoSchedule/NoExecute taints,
    ``binding`` whether it declares bindingConditions, ``caps`` its capacities.
    """

    __slots__ = (
        "_caps",
        "binding",
        "blocking",
        "device",
        "driver",
        "id",
        "multi",
        "need",
        "pool",
        "slice",
        "visible",
    )

    def __init__(self, pool: Pool, slice_: ResourceSlice, device: Device, node: NodeLike) -> None:
        self.id: DeviceID = (pool.driver, pool.name, device.name)
        self.driver = pool.driver
        self.device = device
        self.slice = slice_
        self.pool = pool
        self.visible = (
            device_visible(device, node) if slice_.spec.per_device_node_selection else True
        )
        self.multi = bool(device.allow_multiple_allocations)
        self.need: Mapping[str, Mapping[str, Fraction]] = (
            counter_need(device) if device.consumes_counters else _NOTHING
        )
        self.blocking: tuple[DeviceTaint, ...] = (
            tuple(t for t in device.taints if t.effect in _BLOCKING) if device.taints else ()
        )
        self.binding = device.binding_conditions is not None
        self._caps: Mapping[str, Capacity] | None = None if device.capacity else _NOTHING

    @property
    def caps(self) -> Mapping[str, Capacity]:
        """The device's capacities, parsed when first read (the search reads few devices)."""
        caps = self._caps
        if caps is None:
            caps = self._caps = {
                k: parse_capacity(v) for k, v in (self.device.capacity or {}).items()
            }
        return caps

    def __repr__(self) -> str:
        return f"Candidate({'/'.join(self.id)})"


def counter_need(device: Device) -> dict[str, dict[str, Fraction]]:
    """What a device takes from its pool's counter sets, per set and counter."""
    out: dict[str, dict[str, Fraction]] = {}
    for use in device.consumes_counters or []:
        mine = out.setdefault(use.counter_set, {})
        for name, counter in use.counters.items():
            mine[name] = mine.get(name, Fraction(0)) + parse_quantity(counter.value)
    return out


@dataclass(slots=True, eq=False)
class Pool:
    """One (driver, pool name) at its chosen generation, as seen from a node.

    ``slices``: the relevant device slices, by name (what the search visits); ``others``: the
    pool's other device slices of this generation (counters of their allocated devices
    count). An incomplete or invalid pool has neither.
    """

    driver: str
    name: str
    generation: int
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[ResourceSlice] = field(default_factory=list)
    others: list[ResourceSlice] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    binding: bool = False  # some device of ``slices`` declares bindingConditions
    raw: list[ResourceSlice] = field(default_factory=list)  # every slice of the generation
    _by_name: dict[str, Device] | None = field(default=None, repr=False)
    _grouped: bool | None = field(default=None, repr=False)

    @property
    def id(self) -> PoolID:
        """(driver, pool name)."""
        return (self.driver, self.name)

    @property
    def complete(self) -> bool:
        """All slices of the generation are known."""
        return not self.incomplete

    @property
    def usable(self) -> bool:
        """Complete and valid: the search visits its devices."""
        return not self.incomplete and not self.invalid

    @property
    def all_devices(self) -> dict[str, Device]:
        """Every device of the generation in the whole cluster, by name (first wins)."""
        if self._by_name is None:
            out: dict[str, Device] = {}
            for s in self.raw:
                for d in s.spec.devices or []:
                    out.setdefault(d.name, d)
            self._by_name = out
        return self._by_name

    @property
    def grouped(self) -> bool:
        """Some device of the pool declares compatibility groups (KEP-5963)."""
        if self._grouped is None:
            self._grouped = any(uses_groups(s) for s in (*self.slices, *self.others))
        return self._grouped

    def devices(self) -> list[tuple[str, Device]]:
        """(name, device) of relevant and other slices: whose counters allocated devices take."""
        return [(d.name, d) for s in (*self.slices, *self.others) for d in s.spec.devices or []]


def _candidates(pool: Pool, node: NodeLike) -> list[Candidate]:
    return [Candidate(pool, s, d, node) for s in pool.slices for d in s.spec.devices or []]


def _invalid(pool: Pool, reason: str) -> Pool:
    pool.invalid, pool.invalid_reason = True, reason
    pool.slices, pool.others = [], []
    return pool


def _duplicate_device(slices: Sequence[ResourceSlice]) -> str | None:
    seen: set[str] = set()
    for s in slices:
        for d in s.spec.devices or []:
            if d.name in seen:
                return f"duplicate device name {d.name}"
            seen.add(d.name)
    return None


def _counter_sets(slices: Sequence[ResourceSlice]) -> dict[str, dict[str, Fraction]] | str:
    sets: dict[str, dict[str, Fraction]] = {}
    for s in slices:
        for cs in s.spec.shared_counters or []:
            if cs.name in sets:
                return f"duplicate counter set name {cs.name}"
            sets[cs.name] = {n: parse_quantity(c.value) for n, c in cs.counters.items()}
    return sets


def _unknown_counter(
    slices: Sequence[ResourceSlice], sets: Mapping[str, Mapping[str, Fraction]]
) -> str | None:
    for s in slices:
        for d in s.spec.devices or []:
            for use in d.consumes_counters or []:
                counters = sets.get(use.counter_set)
                if counters is None:
                    return f"counter set {use.counter_set} not found"
                missing = next((n for n in use.counters if n not in counters), None)
                if missing is not None:
                    return f"counter {missing} not found in counter set {use.counter_set}"
    return None


def _validate(pool: Pool, counter_slices: Sequence[ResourceSlice]) -> Pool:
    duplicate = _duplicate_device(pool.slices)
    if duplicate is not None:
        return _invalid(pool, duplicate)
    sets = _counter_sets(counter_slices)
    if isinstance(sets, str):
        return _invalid(pool, sets)
    unknown = _unknown_counter([*pool.slices, *pool.others], sets)
    if unknown is not None:
        return _invalid(pool, unknown)
    pool.counter_sets = sets
    return pool


def _build(
    pool: Pool,
    mine: list[ResourceSlice],
    everything: Sequence[ResourceSlice] | None,
    features: Features,
) -> Pool:
    """Split, validate and order one complete pool (upstream's buildPool)."""
    partitionable = features.DRAPartitionableDevices
    mine = sorted(mine, key=lambda s: s.metadata.name)
    counter_slices = [s for s in mine if partitionable and s.spec.shared_counters]
    pool.slices = [s for s in mine if not (partitionable and s.spec.shared_counters)]
    if everything is not None and len(mine) < len(everything):
        names = {s.metadata.name for s in mine}
        for s in everything:
            if s.metadata.name in names:
                continue
            if partitionable and s.spec.shared_counters:
                counter_slices.append(s)
            else:
                pool.others.append(s)
    if not partitionable:
        duplicate = _duplicate_device(pool.slices)
        return pool if duplicate is None else _invalid(pool, duplicate)
    return _validate(pool, counter_slices)


def uses_groups(s: ResourceSlice) -> bool:
    """Some device of the slice declares compatibility groups (KEP-5963)."""
    return any(
        use.compatibility_groups for d in s.spec.devices or () for use in d.consumes_counters or ()
    )


def _relevant(s: ResourceSlice, node: NodeLike, features: Features) -> bool:
    spec = s.spec
    if not features.DRAPartitionableDevices and (
        spec.per_device_node_selection is not None or spec.shared_counters
    ):
        return False
    if not features.DRADeviceCompatibilityGroups and uses_groups(s):
        # Upstream cannot check the groups with the gate off: it ignores the slice, which
        # leaves its pool incomplete (so none of the pool's devices is allocated).
        return False
    return slice_visible(s, node)


def _newest(
    node: NodeLike, slices: Sequence[ResourceSlice], features: Features
) -> dict[PoolID, list[ResourceSlice]]:
    """The node's relevant slices per pool, at the newest generation among them."""
    mine: list[ResourceSlice] = []
    shared: list[ResourceSlice] = []
    name = node.name
    for s in slices:
        on = s.spec.node_name
        if on == name:
            mine.append(s)
        elif not on:
            shared.append(s)
    found: dict[PoolID, list[ResourceSlice]] = {}
    for s in (*mine, *shared):
        if not _relevant(s, node, features):
            continue
        spec = s.spec
        pid = (spec.driver, spec.pool.name)
        have = found.get(pid)
        if have is None or spec.pool.generation > have[0].spec.pool.generation:
            found[pid] = [s]
        elif spec.pool.generation == have[0].spec.pool.generation:
            have.append(s)
    return found


def gather_pools(
    node: NodeLike,
    slices: Sequence[ResourceSlice],
    features: Features | None = None,
    *,
    cluster: Mapping[PoolID, Sequence[ResourceSlice]] | None = None,
) -> list[Pool]:
    """The pools visible from ``node``, in search order (obsolete pools dropped).

    ``slices``: the cluster's slices (only those naming the node or no node are read for
    relevance). ``cluster``: every slice per pool, when the caller has it indexed (else it is
    taken from ``slices``). Incomplete and invalid pools are returned flagged, without
    candidates.
    """
    feats = features or Features()
    found = _newest(node, slices, feats)
    plain: list[Pool] = []
    last: list[Pool] = []
    for (driver, name), mine in found.items():
        pool = _pool(driver, name, mine, slices, cluster, feats)
        if pool is None:
            continue  # obsolete: a newer generation exists elsewhere
        if pool.usable:
            pool.candidates = _candidates(pool, node)
            pool.binding = any(c.binding for c in pool.candidates)
        (last if pool.binding else plain).append(pool)
    plain.sort(key=lambda p: (p.driver, p.name))
    last.sort(key=lambda p: (p.driver, p.name))
    return plain + last


def _pool(
    driver: str,
    name: str,
    mine: list[ResourceSlice],
    slices: Sequence[ResourceSlice],
    cluster: Mapping[PoolID, Sequence[ResourceSlice]] | None,
    features: Features,
) -> Pool | None:
    """One pool from the node's slices of it (None: obsolete), completed from the cluster."""
    generation = mine[0].spec.pool.generation
    count = mine[0].spec.pool.resource_slice_count
    if len(mine) == count:
        pool = Pool(driver=driver, name=name, generation=generation, raw=mine)
        return _build(pool, mine, None, features)
    everything = cluster.get((driver, name), ()) if cluster is not None else None
    if everything is None:
        everything = [s for s in slices if (s.spec.driver, s.spec.pool.name) == (driver, name)]
    if any(s.spec.pool.generation > generation for s in everything):
        return None
    raw = [s for s in everything if s.spec.pool.generation == generation]
    if not features.DRADeviceCompatibilityGroups:
        raw = [s for s in raw if not uses_groups(s)]  # ignored: as for _relevant
    pool = Pool(driver=driver, name=name, generation=generation, raw=raw)
    if len(raw) != count:
        pool.incomplete = True
        return pool
    return _build(pool, mine, raw, features)


class PoolIndex:
    """Slices indexed once; ``pools_for(node)`` equals ``gather_pools(node, slices)``.

    A pool is relevant to a node when one of its slices names the node (``nodeName``) or
    names no node (``nodeSelector``, ``allNodes``, ``perDeviceNodeSelection``); only those
    pools' slices are handed to ``gather_pools``, with the whole pool per pool id.
    """

    def __init__(self, slices: Sequence[ResourceSlice], features: Features | None = None) -> None:
        self.features = features or Features()
        self._by_pool: dict[PoolID, list[ResourceSlice]] = {}
        self._by_node: dict[str, list[ResourceSlice]] = {}
        self._floating: list[ResourceSlice] = []  # slices naming no node
        self._pools: dict[tuple[str, tuple[tuple[str, str], ...]], list[Pool]] = {}
        for s in slices:
            pid = (s.spec.driver, s.spec.pool.name)
            self._by_pool.setdefault(pid, []).append(s)
            if s.spec.node_name:
                self._by_node.setdefault(s.spec.node_name, []).append(s)
            else:
                self._floating.append(s)

    @classmethod
    def of(cls, slices: Sequence[ResourceSlice], features: Features) -> PoolIndex:
        """The index of ``slices``, reused while the same snapshot is asked for again.

        The snapshot is the slices in order (compared as a tuple: the same objects match at
        the cost of a pointer comparison each; the models are frozen, so equal ones index
        alike) and ``features``. One entry: the last snapshot.
        """
        global _last_index  # noqa: PLW0603 - the one-entry snapshot cache
        key = tuple(slices)
        last = _last_index
        if last is not None and last[1] == features and last[0] == key:
            return last[2]
        index = cls(key, features)
        _last_index = (key, features, index)
        return index

    def pools_for(self, node: NodeLike) -> list[Pool]:
        """The pools visible from ``node``, in search order (as ``gather_pools``).

        Found once per node name and labels (all a node's pools depend on); the pools are
        never changed by a search, so calls share them.
        """
        key = (node.name, tuple(sorted(node.labels.items())))
        found = self._pools.get(key)
        if found is None:
            mine = [*self._by_node.get(node.name, ()), *self._floating]
            found = self._pools[key] = gather_pools(
                node, mine, self.features, cluster=self._by_pool
            )
        return list(found)


_last_index: tuple[tuple[ResourceSlice, ...], Features, PoolIndex] | None = None
