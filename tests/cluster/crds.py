"""The CRDs the test control plane serves: KubeVirt's own VMI CRD, as its operator generates it
at the release the docs name (recorded by the KubeVirt judge, ``tests/data/kubevirt/``),
installed and waited for until the API server reports them Established."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
# the released version's CRD; the judge records main's beside it
CRDS = (REPO / "tests" / "data" / "kubevirt" / "v1.9.0" / "crd.yaml",)
GUARD = 120.0  # a failure guard, not a speed claim


def install(kubeconfig: Path) -> list[str]:
    """Create (or replace) every CRD of ``CRDS``; their names once each is Established."""
    from kubernetes import client, config  # noqa: PLC0415 - the host extra

    api = client.ApiextensionsV1Api(config.new_client_from_config(str(kubeconfig)))
    names = []
    for path in CRDS:
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        try:
            api.create_custom_resource_definition(body)
        except client.exceptions.ApiException as e:
            if e.status != 409:
                raise
            body["metadata"]["resourceVersion"] = api.read_custom_resource_definition(
                name
            ).metadata.resource_version
            api.replace_custom_resource_definition(name, body)
        names.append(name)
    deadline = time.monotonic() + GUARD
    for name in names:
        while not _established(api.read_custom_resource_definition(name)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not Established after {GUARD:.0f} s")
            time.sleep(0.1)
    _wait_served(client, client.CustomObjectsApi(api.api_client), deadline)
    return names


def _wait_served(client: Any, objects: Any, deadline: float) -> None:
    """Until the API server lists every served version of each CRD."""
    for path in CRDS:
        body = yaml.safe_load(path.read_text())
        group, plural = body["spec"]["group"], body["spec"]["names"]["plural"]
        for version in (v["name"] for v in body["spec"]["versions"] if v.get("served")):
            while not _served(client, objects, group, version, plural):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{plural}.{group}/{version} not served after {GUARD:.0f} s")
                time.sleep(0.1)


def _served(client: Any, objects: Any, group: str, version: str, plural: str) -> bool:
    """Whether the API server lists the kind yet (Established comes before it is served)."""
    try:
        objects.list_cluster_custom_object(group, version, plural, limit=1)
    except client.exceptions.ApiException as e:
        if e.status in (404, 503):
            return False
        raise
    return True


def _established(crd: object) -> bool:
    conditions = getattr(getattr(crd, "status", None), "conditions", None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)
