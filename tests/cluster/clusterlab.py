"""Helpers the cluster tests share: waiting on the API with a failure guard, Nodes without a
kubelet."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from controlplane import ready_node

T = TypeVar("T")
# A failure guard for the cluster's own controllers (scheduler, GC, ours) to act: generous,
# never a speed claim (a busy 2-core machine may be slow).
GUARD = 120.0


def wait_for(what: str, check: Callable[[], T], guard: float = GUARD) -> T:
    """Poll ``check()`` until it returns something truthy; fail after ``guard`` seconds."""
    deadline = time.monotonic() + guard
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {guard:.0f} s")
        time.sleep(0.05)


def add_node(core: Any, name: str, labels: dict[str, str] | None = None) -> None:
    """A Ready Node object, schedulable: admission's node.kubernetes.io/not-ready taint removed
    (the node lifecycle controller would lift it once a kubelet reports Ready; it is off)."""
    core.create_node(ready_node(name, labels))
    node = core.read_node(name)
    taints = [t for t in node.spec.taints or [] if t.key != "node.kubernetes.io/not-ready"]
    core.patch_node(name, {"spec": {"taints": taints or None}})
