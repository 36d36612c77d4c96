"""The session's real control plane (``controlplane.Cluster``) and helpers on it.

``cluster``: built (cached by tests/upstream/build.sh's key) and started once per pytest
session in a temporary directory, KubeVirt's VMI CRD installed, stopped at session end. It is
skipped, saying so, only where Go is absent (CI has Go); a failed build or start fails.
``kube``: an admin ``kubernetes`` ApiClient on it. ``namespace``: a fresh namespace per test
whose ``default`` ServiceAccount exists (pods need it), deleted afterwards.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterlab import SYSTEM, apply, documents, token_for, wait_for
from controlplane import Cluster, ClusterError, build, token_kubeconfig
from crds import install
from hostworld import World


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The real control plane, once per session."""
    if shutil.which("go") is None:
        pytest.skip("the real control plane is built from source and needs Go (1.26) on PATH")
    try:
        build()
    except ClusterError as e:
        pytest.fail(str(e))
    began = time.monotonic()
    plane = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        plane.start()
    except ClusterError as e:
        pytest.fail(str(e))
    try:
        install(plane.kubeconfig)
        started = time.monotonic() - began
        print(f"\ncontrol plane started in {started:.1f} s: {plane.started_in}")
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Any:
    """An admin ApiClient."""
    from kubernetes import config  # noqa: PLC0415

    return config.new_client_from_config(str(cluster.kubeconfig))


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace with its ``default`` ServiceAccount, deleted after the test."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(kube)
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})

    def has_default() -> bool:
        return any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items
        )

    wait_for(f"ServiceAccount {name}/default", has_default)
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def shipped(cluster: Cluster, kube: Any) -> set[tuple[str, str]]:
    """controller.yaml, plugin.yaml and relay.yaml applied as they are (dry run first, each)."""
    shipped = ("controller.yaml", "plugin.yaml", "relay.yaml")
    made = apply(kube, [d for name in shipped for d in documents(name)])
    return {(m.kind, m.metadata.name) for m in made}


@pytest.fixture(scope="session")
def controller_config(
    cluster: Cluster,
    kube: Any,
    shipped: set[tuple[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A kubeconfig with the controller ServiceAccount's token (not admin)."""
    token = token_for(kube, SYSTEM, "kvdev-host-controller")
    path = tmp_path_factory.mktemp("sa") / "controller.kubeconfig"
    return token_kubeconfig(path, cluster.server, cluster.pki / "ca.crt", token)


@pytest.fixture
def world(kube: Any, namespace: str) -> Iterator[World]:
    """A Node, a DeviceClass and a ResourceSlice of VFs for this test (``hostworld.World``)."""
    w = World(kube, namespace)
    w.publish()
    yield w
    w.unpublish()
