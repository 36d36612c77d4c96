"""Helm and kvdev's chart on the real control plane, for the chart tests.

``helm_binary`` (built by tests/helm/build.sh, cached), ``render`` (``helm template`` -> the
objects), ``dry_run`` (each object through a server-side dry run, naming the one refused),
``pod_token_kubeconfig`` (a kubeconfig holding the token of a chart's ServiceAccount bound to a
Pod on a Node: the API server then puts the node's name in the request's user info, which the
plugin's admission policy reads; there is no kubelet to run the pod) and ``expand`` (the
``$(VAR)`` references kubelet expands in container args).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from clusterlab import wait_for
from controlplane import token_kubeconfig

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "kvdev"
HELM = REPO / "build" / "helm" / "bin" / "helm"
KUBE_VERSION = "1.37.2"  # what `helm template` assumes without a cluster: the test plane's
FIELD_MANAGER = "kvdev-chart-test"


def helm_binary() -> Path:
    """helm, built from tests/helm's pinned module when its key changed."""
    subprocess.run([REPO / "tests" / "helm" / "build.sh"], check=True, capture_output=True)
    return HELM


def helm(*args: object, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm ARGS``; with ``check``, a failure fails the test with helm's stderr."""
    done = subprocess.run([HELM, *map(str, args)], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"helm {' '.join(map(str, args))}: exit {done.returncode}\n{done.stderr}")
    return done


def sets(values: tuple[str, ...] | list[str]) -> list[str]:
    """``--set`` arguments for each ``key=value``."""
    return [arg for item in values for arg in ("--set", item)]


def render(release: str, namespace: str, values: tuple[str, ...] | list[str] = ()) -> list[Any]:
    """The objects ``helm template`` renders (documents in order, empty ones left out)."""
    import yaml  # noqa: PLC0415

    args = ["template", release, CHART, "-n", namespace, "--kube-version", KUBE_VERSION]
    done = helm(*args, *sets(values))
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def dry_run(kube: Any, docs: list[dict[str, Any]]) -> list[str]:
    """Each object server-side applied with dryRun=All; ``Kind/name`` of each accepted.

    An object the API server refuses fails the test, naming it and the server's answer.
    """
    from kubernetes import dynamic  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    client = dynamic.DynamicClient(kube)
    accepted = []
    for doc in docs:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        try:
            client.server_side_apply(
                resource,
                body=doc,
                namespace=namespace,
                field_manager=FIELD_MANAGER,
                dry_run="All",
            )
        except ApiException as e:
            pytest.fail(f"{what}: refused by the API server: {e.status} {e.body}")
        accepted.append(what)
    return accepted


def pod_token_kubeconfig(
    cluster: Any, kube: Any, namespace: str, account: str, node: str | None, path: Path
) -> tuple[Path, Any]:
    """A kubeconfig authenticating as ``namespace/account`` with a token bound to a new Pod
    of that account (on ``node`` when given, else never scheduled); returns it and the Pod."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(kube)
    spec: dict[str, Any] = {
        "serviceAccountName": account,
        "containers": [{"name": "c", "image": "registry.invalid/kvdev-host:test"}],
    }
    if node is not None:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = "kvdev-test-nobody"  # kube-scheduler leaves it unbound
    name = f"{account}-{uuid.uuid4().hex[:6]}"
    body = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    pod = core.create_namespaced_pod(namespace, body)
    ref = {"kind": "Pod", "apiVersion": "v1", "name": name, "uid": pod.metadata.uid}
    request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": ref}}
    token = core.create_namespaced_service_account_token(account, namespace, request).status.token
    return token_kubeconfig(path, cluster.server, cluster.pki / "ca.crt", str(token)), pod


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """``$(VAR)`` replaced by ``env[VAR]``, as kubelet does for a container's args."""
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], a) for a in args]


def wait_gone(kube: Any, objects: list[tuple[str, str, str, str | None]]) -> None:
    """Poll until none of ``(apiVersion, kind, name, namespace)`` exists (fail after GUARD)."""
    from kubernetes import dynamic  # noqa: PLC0415
    from kubernetes.dynamic.exceptions import NotFoundError  # noqa: PLC0415

    client = dynamic.DynamicClient(kube)

    def none_left() -> bool:
        for api_version, kind, name, namespace in objects:
            resource = client.resources.get(api_version=api_version, kind=kind)
            try:
                client.get(resource, name=name, namespace=namespace)
            except NotFoundError:
                continue
            return False
        return True

    wait_for("the release's objects deleted", none_left)
