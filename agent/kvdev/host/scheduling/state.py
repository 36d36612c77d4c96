"""The scheduler's mutable view of the cluster while pods are placed one after another.

Owns the nodes (labels, ``status.allocatable``, what placed pods and their devices use), each
node's pools (found once through ``PoolIndex``, lazily), the devices and shared capacity in
use per pool, and version counters: a node's version moves when a pod lands on it, a pool's
when one of its devices is allocated. ``stamp(node)`` combines both, so a cached filter
decision stays valid exactly as long as the stamp is unchanged. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from kvdev.host.allocation.features import Features
from kvdev.host.allocation.pools import DeviceID, NodeInfo, Pool, PoolID, PoolIndex
from kvdev.host.k8s import Node, ResourceSlice, parse_quantity
from kvdev.host.k8s.claim import AllocationResult
from kvdev.host.k8s.resource import Device
from kvdev.host.scheduling.accounting import add_amounts


@dataclass(slots=True)
class NodeState:
    """One node: identity, allocatable (None: not accounted), usage and version."""

    info: NodeInfo
    allocatable: dict[str, Fraction] | None
    used: dict[str, Fraction] = field(default_factory=dict)
    version: int = 0
    pools: list[Pool] | None = None

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.info.name

    def listed(self) -> frozenset[str]:
        """The resource names the node's ``status.allocatable`` lists."""
        return frozenset(self.allocatable or ())

    def charge(self, amounts: Mapping[str, Fraction]) -> None:
        """Add ``amounts`` to what the node's pods use."""
        add_amounts(self.used, amounts)
        self.version += 1

    def uncharge(self, amounts: Mapping[str, Fraction]) -> None:
        """Give ``amounts`` back (a pod left the node)."""
        add_amounts(self.used, {k: -v for k, v in amounts.items()})
        self.version += 1


def node_state(node: Node) -> NodeState:
    """A NodeState from a Node object."""
    alloc = node.status.allocatable if node.status else None
    return NodeState(
        NodeInfo(node.metadata.name, dict(node.metadata.labels or {})),
        None if alloc is None else {k: parse_quantity(v) for k, v in alloc.items()},
    )


class ClusterView:
    """Nodes in input order, their pools, and what is in use (module docstring)."""

    def __init__(
        self, nodes: Iterable[Node], slices: list[ResourceSlice], features: Features | None = None
    ) -> None:
        self.nodes = [node_state(n) for n in nodes]
        self.by_name = {n.name: n for n in self.nodes}
        self.features = features or Features()
        self.slices = list(slices)
        self._index = PoolIndex(self.slices, self.features)
        self.devices: dict[PoolID, set[DeviceID]] = {}
        self.capacity: dict[PoolID, dict[DeviceID, dict[str, Fraction]]] = {}
        self._shares: dict[DeviceID, int] = {}
        self.versions: dict[PoolID, int] = {}

    def pools(self, node: NodeState) -> list[Pool]:
        """The node's pools in search order (computed once)."""
        if node.pools is None:
            node.pools = self._index.pools_for(node.info)
        return node.pools

    def stamp(self, node: NodeState) -> tuple[int, ...]:
        """Changes whenever anything the node's filter reads changes."""
        versions = self.versions
        return (node.version, *(versions.get(p.id, 0) for p in self.pools(node)))

    def in_use(
        self, node: NodeState
    ) -> tuple[frozenset[DeviceID], dict[DeviceID, dict[str, Fraction]]]:
        """Devices taken and shared capacity consumed in the node's pools."""
        taken: set[DeviceID] = set()
        shared: dict[DeviceID, dict[str, Fraction]] = {}
        for pool in self.pools(node):
            taken.update(self.devices.get(pool.id, ()))
            shared.update(self.capacity.get(pool.id, {}))
        return frozenset(taken), shared

    def device(self, node: NodeState, ident: DeviceID) -> Device | None:
        """A device of the node's pools by (driver, pool, name)."""
        for pool in self.pools(node):
            if pool.id == ident[:2]:
                return pool.all_devices.get(ident[2])
        return None

    def take(self, allocation: AllocationResult, sign: int = 1) -> None:
        """Record an allocation's devices (exclusive) and shared capacity as in use.

        ``sign=-1``: give them back (the claim was deallocated).
        """
        for r in (allocation.devices.results if allocation.devices else None) or []:
            pid = (r.driver, r.pool)
            ident = (r.driver, r.pool, r.device)
            if r.share_id:
                used = self.capacity.setdefault(pid, {}).setdefault(ident, {})
                for k, v in (r.consumed_capacity or {}).items():
                    used[k] = used.get(k, Fraction(0)) + sign * parse_quantity(str(v))
                self._shares[ident] = self._shares.get(ident, 0) + sign
                if self._shares[ident] <= 0:
                    del self._shares[ident], self.capacity[pid][ident]
            elif not r.admin_access:
                if sign > 0:
                    self.devices.setdefault(pid, set()).add(ident)
                else:
                    self.devices.get(pid, set()).discard(ident)
            self.versions[pid] = self.versions.get(pid, 0) + 1

    def release(self, allocation: AllocationResult) -> None:
        """Give an allocation's devices and shared capacity back."""
        self.take(allocation, -1)

    def put_slice(self, slice_: ResourceSlice) -> None:
        """Add a slice, or replace the one of the same name."""
        self._set_slices(
            [s for s in self.slices if s.metadata.name != slice_.metadata.name] + [slice_]
        )

    def remove_slice(self, name: str) -> None:
        """Remove the slice of that name (nothing if there is none)."""
        self._set_slices([s for s in self.slices if s.metadata.name != name])

    def _set_slices(self, slices: list[ResourceSlice]) -> None:
        self.slices = slices
        self._index = PoolIndex(slices, self.features)
        for node in self.nodes:  # every node's pools are found again; cached answers expire
            node.pools = None
            node.version += 1

    def put_node(self, node: Node) -> None:
        """Add a node, or replace the labels and allocatable of the one of the same name."""
        fresh = node_state(node)
        known = self.by_name.get(fresh.name)
        if known is None:
            self.nodes.append(fresh)
            self.by_name[fresh.name] = fresh
            return
        known.info, known.allocatable = fresh.info, fresh.allocatable
        known.pools = None
        known.version += 1
