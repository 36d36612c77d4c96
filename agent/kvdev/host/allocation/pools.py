"""Which devices a node can see: slice visibility, pools, generations and search order.

Owns node-selector matching, grouping slices into pools by (driver, pool name), picking the
generation, classifying each pool as complete / incomplete / invalid, per-device node
selection, and the deterministic order in which candidates are searched. ``PoolIndex``
indexes slices once (by pool, and node-local slices by node name) so that finding one node's
pools among thousands of slices costs what that node sees, not the whole cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from kvdev.host.k8s.common import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import CounterSet, Device, ResourceSlice

DeviceID = tuple[str, str, str]  # (driver, pool, device)
PoolID = tuple[str, str]  # (driver, pool)


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


def device_visible(device: Device, node: NodeLike) -> bool:
    """Per-device node selection (``perDeviceNodeSelection`` slices)."""
    if device.node_name is not None:
        return device.node_name == node.name
    if device.node_selector is not None:
        return selector_matches(device.node_selector, node)
    return bool(device.all_nodes)


def slice_visible(slice_: ResourceSlice, node: NodeLike) -> bool:
    """Whether a slice's devices may be used on the node (rule 1 of the search order)."""
    spec = slice_.spec
    if spec.node_name is not None:
        return spec.node_name == node.name
    if spec.node_selector is not None:
        return selector_matches(spec.node_selector, node)
    if spec.all_nodes:
        return True
    if spec.per_device_node_selection:
        return any(device_visible(d, node) for d in spec.devices or [])
    return False


@dataclass(frozen=True, slots=True)
class Candidate:
    """One device the node may use, with where it came from."""

    id: DeviceID
    device: Device
    slice: ResourceSlice
    pool: Pool = field(repr=False, compare=False)

    @property
    def driver(self) -> str:
        """The device's driver."""
        return self.id[0]


@dataclass(slots=True)
class Pool:
    """One (driver, pool name) at its chosen generation, as seen from a node."""

    driver: str
    name: str
    generation: int
    complete: bool
    invalid: bool = False
    candidates: list[Candidate] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    # every device of the generation in the whole cluster, for counter accounting
    all_devices: dict[str, Device] = field(default_factory=dict)

    @property
    def id(self) -> PoolID:
        """(driver, pool name)."""
        return (self.driver, self.name)

    @property
    def has_binding_conditions(self) -> bool:
        """Some candidate declares binding conditions (the pool is searched last)."""
        return any(c.device.binding_conditions for c in self.candidates)


def _counter_sets(slices: Sequence[ResourceSlice]) -> tuple[dict[str, CounterSet], bool]:
    sets: dict[str, CounterSet] = {}
    duplicate = False
    for s in slices:
        for cs in s.spec.shared_counters or []:
            if cs.name in sets:
                duplicate = True
            sets[cs.name] = cs
    return sets, duplicate


def _consumption_valid(devices: Sequence[Device], sets: Mapping[str, CounterSet]) -> bool:
    for d in devices:
        for use in d.consumes_counters or []:
            cs = sets.get(use.counter_set)
            if cs is None or any(name not in cs.counters for name in use.counters):
                return False
    return True


def _fill(
    pool: Pool, node: NodeLike, current: Sequence[ResourceSlice], cluster: Sequence[ResourceSlice]
) -> None:
    """Counters, candidates in slice-name order, and the invalid flag of one pool."""
    sets, duplicate_sets = _counter_sets(cluster)
    pool.counter_sets = {
        k: {n: parse_quantity(c.value) for n, c in v.counters.items()} for k, v in sets.items()
    }
    for s in cluster:
        for d in s.spec.devices or []:
            pool.all_devices.setdefault(d.name, d)
    seen: set[str] = set()
    duplicate = False
    for s in sorted(current, key=lambda x: x.metadata.name):
        for d in s.spec.devices or []:
            if d.name in seen:
                duplicate = True
            seen.add(d.name)
            if s.spec.per_device_node_selection and not device_visible(d, node):
                continue
            pool.candidates.append(Candidate((pool.driver, pool.name, d.name), d, s, pool))
    all_devs = [d for s in cluster for d in s.spec.devices or []]
    pool.invalid = duplicate or duplicate_sets or not _consumption_valid(all_devs, sets)


def gather_pools(node: NodeLike, slices: Sequence[ResourceSlice]) -> list[Pool]:
    """The pools visible from ``node``, in search order (obsolete pools dropped).

    Incomplete and invalid pools are returned flagged, never with usable candidates.
    """
    visible: dict[PoolID, list[ResourceSlice]] = {}
    for s in slices:
        if slice_visible(s, node):
            visible.setdefault((s.spec.driver, s.spec.pool.name), []).append(s)
    pools: list[Pool] = []
    for (driver, name), mine in visible.items():
        generation = max(s.spec.pool.generation for s in mine)
        current = [s for s in mine if s.spec.pool.generation == generation]
        count = current[0].spec.pool.resource_slice_count
        cluster = [
            s
            for s in slices
            if (s.spec.driver, s.spec.pool.name) == (driver, name)
            and s.spec.pool.generation == generation
        ]
        complete = len(current) >= count
        if not complete:
            newest = max(
                s.spec.pool.generation
                for s in slices
                if (s.spec.driver, s.spec.pool.name) == (driver, name)
            )
            if newest > generation:
                continue  # obsolete: a newer generation exists elsewhere
            complete = len(cluster) >= count
        pool = Pool(driver=driver, name=name, generation=generation, complete=complete)
        _fill(pool, node, current, cluster)
        pools.append(pool)
    pools.sort(key=lambda p: (p.has_binding_conditions, p.driver, p.name))
    return pools


class PoolIndex:
    """Slices indexed once; ``pools_for(node)`` equals ``gather_pools(node, slices)``.

    A pool is relevant to a node when one of its slices names the node (``nodeName``) or
    does not pin one node (``nodeSelector``, ``allNodes``, ``perDeviceNodeSelection``); all
    slices of relevant pools are handed to ``gather_pools`` in input order, because counters,
    completeness and obsolete generations look at the pool's slices across the cluster.
    """

    def __init__(self, slices: Sequence[ResourceSlice]) -> None:
        self._by_pool: dict[PoolID, list[ResourceSlice]] = {}
        self._by_node: dict[str, list[PoolID]] = {}
        self._floating: list[PoolID] = []  # pools with a slice not pinned to one node
        for s in slices:
            pid = (s.spec.driver, s.spec.pool.name)
            self._by_pool.setdefault(pid, []).append(s)
            if s.spec.node_name is not None:
                mine = self._by_node.setdefault(s.spec.node_name, [])
                if pid not in mine:
                    mine.append(pid)
            elif pid not in self._floating:
                self._floating.append(pid)

    def pools_for(self, node: NodeLike) -> list[Pool]:
        """The pools visible from ``node``, in search order (as ``gather_pools``)."""
        wanted = dict.fromkeys([*self._by_node.get(node.name, ()), *self._floating])
        relevant = [s for pid in wanted for s in self._by_pool[pid]]
        return gather_pools(node, relevant)
