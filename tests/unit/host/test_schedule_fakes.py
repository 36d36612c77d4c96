"""Small model builders for the scheduler unit tests (pure, no files; holds no tests)."""

from kvdev.host.k8s import KINDS

GPU = "gpu.example.com"
NUMA = "resource.kubernetes.io/numaNode"


def obj(data):
    return KINDS[(data["apiVersion"], data["kind"])].model_validate(data, strict=True)


def device_class(name=GPU, driver=GPU, extended=None):
    spec = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def node(name, labels=None, allocatable=None):
    data = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    if labels:
        data["metadata"]["labels"] = labels
    if allocatable:
        data["status"] = {"allocatable": allocatable}
    return obj(data)


def gpu(name, **extra):
    return {"name": name, **extra}


def node_slice(node_name, devices, driver=GPU, pool=None):
    return obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}"},
            "spec": {
                "driver": driver,
                "pool": {"name": pool or node_name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": devices,
            },
        }
    )


def claim_spec(count=1, selector=None, class_name=GPU):
    exactly = {"deviceClassName": class_name, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def template(name="one-gpu", namespace="ns", spec=None):
    return obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": spec or claim_spec()},
        }
    )


def claim(name, namespace="ns", spec=None, status=None):
    data = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec or claim_spec(),
    }
    if status:
        data["status"] = status
    return obj(data)


def pod(name, claims=(), namespace="ns", requests=None, group=None, node_name=None, containers=1):
    spec = {
        "containers": [
            {"name": f"c{i}", **({"resources": {"requests": requests}} if requests else {})}
            for i in range(containers)
        ]
    }
    if claims:
        spec["resourceClaims"] = list(claims)
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node_name:
        spec["nodeName"] = node_name
    return obj(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def from_template(name="gpu", tmpl="one-gpu"):
    return {"name": name, "resourceClaimTemplateName": tmpl}


def by_name(name, claim_name):
    return {"name": name, "resourceClaimName": claim_name}


def pod_group(name, claims, namespace="ns", uid=None):
    meta = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return obj(
        {
            "apiVersion": "scheduling.k8s.io/v1alpha3",
            "kind": "PodGroup",
            "metadata": meta,
            "spec": {"resourceClaims": list(claims)},
        }
    )


def devices_of(claim_obj):
    return [(r.pool, r.device) for r in claim_obj.status.allocation.devices.results]
