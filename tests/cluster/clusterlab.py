"""Helpers the cluster tests share: waiting on the API with a failure guard, Nodes without a
kubelet, applying manifests (dry run, then for real), ServiceAccount tokens, kvdev-host runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from controlplane import ready_node

T = TypeVar("T")
KVDEV_HOST = Path(sys.executable).with_name("kvdev-host")
MANIFESTS = Path(__file__).resolve().parents[2] / "packaging" / "kubernetes"
SYSTEM = "kvdev-system"  # the shipped manifests' namespace
# A failure guard for the cluster's own controllers (scheduler, GC, ours) to act: generous,
# never a speed claim (a busy 2-core machine may be slow).
GUARD = 120.0


def refusals(log: str) -> list[str]:
    """The lines of a kvdev-host log where RBAC or the owner-reference admission refused it
    (not a 403 for a namespace being deleted: the real server refuses writes there too)."""
    marks = ('forbidden: User "', "cannot set blockOwnerDeletion", "cannot set an ownerRef")
    return [line for line in log.splitlines() if any(m in line for m in marks)]


def documents(name: str) -> list[dict[str, Any]]:
    """The objects of ``packaging/kubernetes/<name>``, as shipped."""
    import yaml  # noqa: PLC0415

    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


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


def apply(kube: Any, docs: list[dict[str, Any]], *, namespace: str | None = None) -> list[Any]:
    """Each document dry-run on the server (dryRun=All) and then created, in order.

    Returns what the server stored. A refusal raises the client's ApiException.
    """
    from kubernetes import dynamic  # noqa: PLC0415

    client = dynamic.DynamicClient(kube)
    made = []
    for doc in docs:
        resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        ns = doc["metadata"].get("namespace") or namespace if resource.namespaced else None
        resource.create(body=doc, namespace=ns, dry_run="All")
        made.append(resource.create(body=doc, namespace=ns))
    return made


def token_for(kube: Any, namespace: str, account: str) -> str:
    """A bound token of ServiceAccount ``namespace/account`` (TokenRequest, one hour)."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(kube)
    body = {"spec": {"expirationSeconds": 3600}}
    return str(core.create_namespaced_service_account_token(account, namespace, body).status.token)


@dataclass
class Program:
    """A ``kvdev-host`` process with its stderr in a file; ``stop()`` it (SIGTERM)."""

    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


@contextlib.contextmanager
def kvdev_host(log: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Program]:
    """Run ``kvdev-host ARGS`` for the block; stopped (SIGTERM) at its end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(KVDEV_HOST), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    program = Program(proc, log)
    try:
        yield program
    finally:
        program.stop()


def minimal_vmi(name: str, namespace: str) -> dict[str, Any]:
    """A VMI with one claim (``<name>-devices``) and no devices: the controller renders it."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimName": f"{name}-devices"}],
            "domain": {"devices": {}},
        },
    }


def resource_slice(
    name: str, driver: str, devices: list[dict[str, Any]], **where: object
) -> dict[str, Any]:
    """A ResourceSlice of one pool named like the slice; ``where``: nodeName=, allNodes=..."""
    spec = {"driver": driver, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}}
    return {**body, "spec": {**spec, **where, "devices": devices}}
