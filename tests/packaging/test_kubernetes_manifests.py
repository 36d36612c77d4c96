"""packaging/kubernetes/ and packaging/container/: checked against schemas, not by eye.

Kubernetes objects: each document is walked against the ``kubernetes`` client's model of its
kind (its ``openapi_types`` and ``attribute_map``, generated from the API's OpenAPI): an
unknown field or a wrong JSON type fails, naming the path; then the client deserializes it,
which checks the required fields. KubeVirt's VMI: no KubeVirt API package or OpenAPI document
is published on PyPI or in Debian, so it is checked against kvdev's own model and a closed
subset of KubeVirt's types (``staging/src/kubevirt.io/api/core/v1``) covering every field the
example uses, plus the sharing rules kvdev relies on. RBAC is checked for least privilege.
"""

import json
import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kvdev import __version__
from kvdev.host.contract import configmap_name
from kvdev.host.k8s.kubevirt import VirtualMachineInstance

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "packaging" / "kubernetes"
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("v1", "Service"): "V1Service",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "V1ValidatingAdmissionPolicy",
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
    ): "V1ValidatingAdmissionPolicyBinding",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "V1MutatingAdmissionPolicy",
    (
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicyBinding",
    ): "V1MutatingAdmissionPolicyBinding",
    ("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "V1ResourceClaimTemplate",
}


def documents():
    out = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                out.append(pytest.param(doc, id=f"{path.name}[{i}]:{doc['kind']}"))
    return out


def by_kind(kind, name=None):
    for param in documents():
        doc = param.values[0]
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name):
            return doc
    raise AssertionError(f"no {kind} {name or ''}")


def walk(value, type_name, path):
    """Fail on an unknown field or a wrong JSON type anywhere in ``value``."""
    # the client's type names: list[X] / List[X], dict(str, X) / Dict[str, X]
    if type_name.lower().startswith("list["):
        assert isinstance(value, list), f"{path}: expected a list"
        for i, item in enumerate(value):
            walk(item, type_name[5:-1], f"{path}[{i}]")
        return
    if type_name.lower().startswith(("dict(", "dict[")):
        assert isinstance(value, dict), f"{path}: expected a map"
        inner = type_name[type_name.index(",") + 1 : -1].strip()
        for key, item in value.items():
            walk(item, inner, f"{path}[{key}]")
        return
    scalars = {"str": str, "bool": bool, "float": (int, float), "datetime": str, "date": str}
    if type_name in scalars:
        assert isinstance(value, scalars[type_name]), f"{path}: expected {type_name}, {value!r}"
        return
    if type_name == "int":
        assert isinstance(value, int), f"{path}: expected int"
        assert not isinstance(value, bool), f"{path}: expected int, not a bool"
        return
    if type_name == "object":
        return  # IntOrString, RawExtension: anything
    model = getattr(client.models, type_name)
    assert isinstance(value, dict), f"{path}: expected an object ({type_name})"
    fields = {json_key: attr for attr, json_key in model.attribute_map.items()}
    for key, item in value.items():
        assert key in fields, f"{path}: unknown field {key!r} in {type_name}"
        walk(item, model.openapi_types[fields[key]], f"{path}.{key}")


@pytest.mark.parametrize(
    "doc", [d for d in documents() if d.values[0]["kind"] != "VirtualMachineInstance"]
)
def test_every_kubernetes_object_matches_its_openapi_model(doc):
    model = MODELS[(doc["apiVersion"], doc["kind"])]
    walk(doc, model, doc["kind"])
    parsed = client.ApiClient().deserialize(json.dumps(doc), model, "application/json")
    assert parsed.metadata.name == doc["metadata"]["name"]


def test_every_manifest_parses_and_names_its_namespace():
    for param in documents():
        doc = param.values[0]
        kind = (doc["apiVersion"], doc["kind"])
        assert kind in MODELS or kind == ("kubevirt.io/v1", "VirtualMachineInstance"), kind
        cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
        cluster_scoped |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        cluster_scoped |= {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
        if doc["kind"] in cluster_scoped:
            assert "namespace" not in doc["metadata"]
        else:
            assert doc["metadata"].get("namespace"), doc["metadata"]["name"]


# --------------------------------------------------------------------------- RBAC


def rules(kind, name):
    return {
        (group, resource): sorted(rule["verbs"])
        for rule in by_kind(kind, name)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_the_controller_may_read_what_it_watches_and_write_only_configmaps():
    assert rules("ClusterRole", "kvdev-host-controller") == {
        ("kubevirt.io", "virtualmachineinstances"): ["get", "list", "watch"],
        # blockOwnerDeletion under OwnerReferencesPermissionEnforcement (tests/cluster)
        ("kubevirt.io", "virtualmachineinstances/finalizers"): ["update"],
        ("", "pods"): ["get", "list", "watch"],
        ("resource.k8s.io", "resourceclaims"): ["get", "list", "watch"],
        ("resource.k8s.io", "resourceslices"): ["get", "list", "watch"],
        ("", "configmaps"): ["create", "get", "list", "update", "watch"],
        ("", "events"): ["create", "patch"],
    }
    assert rules("Role", "kvdev-host-controller-lease") == {
        ("coordination.k8s.io", "leases"): ["create", "get", "update"]
    }
    role = by_kind("Role", "kvdev-host-controller-lease")
    assert role["metadata"]["namespace"] == "kvdev-system"


def test_the_plugin_may_only_get_claims_list_slices_and_patch_claim_status():
    assert rules("ClusterRole", "kvdev-host-plugin") == {
        ("resource.k8s.io", "resourceclaims"): ["get"],
        ("resource.k8s.io", "resourceslices"): ["list"],
        # only of claims allocated on its own node: the ValidatingAdmissionPolicy (tests/cluster)
        ("resource.k8s.io", "resourceclaims/status"): ["patch"],
        # status.devices, for its driver only, on its own node only (the API server's check)
        ("resource.k8s.io", "resourceclaims/driver"): ["associated-node:patch"],
    }


def test_bindings_name_the_service_accounts_the_workloads_run_as():
    for binding, workload, kind in [
        ("kvdev-host-controller", "kvdev-host-controller", "Deployment"),
        ("kvdev-host-plugin", "kvdev-host-plugin", "DaemonSet"),
    ]:
        bound = by_kind("ClusterRoleBinding", binding)
        account = by_kind(kind, workload)["spec"]["template"]["spec"]["serviceAccountName"]
        assert bound["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": "kvdev-system"}
        ]
        assert bound["roleRef"]["name"] == binding
        by_kind("ServiceAccount", account)


# --------------------------------------------------------------------------- workloads


def test_the_controller_runs_with_leader_election_and_the_downward_api():
    pod = by_kind("Deployment", "kvdev-host-controller")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][:2] == ["controller", "--leader-elect"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_relay_runs_as_a_dedicated_uid_and_reads_only_beneath_its_host_dirs():
    pod = by_kind("DaemonSet", "kvdev-host-relay")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] != 0
    assert context["capabilities"] == {"drop": ["ALL"]}
    mounted = {m["mountPath"] for m in container["volumeMounts"] if m["name"].startswith("files-")}
    given = {a.removeprefix("--host-dir=") for a in container["args"] if "--host-dir=" in a}
    assert given == mounted == {"/var/lib/kubelet/plugins"}


def test_the_plugin_mounts_kubelets_directories_and_knows_its_node():
    pod = by_kind("DaemonSet", "kvdev-host-plugin")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "serve"
    assert "--kube" in container["args"]
    assert "--node-name=$(NODE_NAME)" in container["args"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_UID": "metadata.uid"}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert host == mounts
    assert sorted(host.values()) == [
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
    ]


# --------------------------------------------------------------------------- KubeVirt

# The fields of KubeVirt's API types the example uses, and nothing else: the closed subset.
VMI_FIELDS = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"resourceClaims", "networks", "domain", "volumes"},
    "spec.resourceClaims[]": {"name", "resourceClaimName", "resourceClaimTemplateName"},
    "spec.networks[]": {"name", "pod", "multus", "resourceClaim"},
    "spec.networks[].resourceClaim": {"claimName", "requestName"},
    "spec.domain": {"resources", "devices"},
    "spec.domain.resources": {"requests", "limits"},
    "spec.domain.devices": {"disks", "interfaces", "gpus", "hostDevices", "filesystems"},
    "spec.domain.devices.disks[]": {"name", "disk"},
    "spec.domain.devices.disks[].disk": {"bus"},
    "spec.domain.devices.interfaces[]": {
        "name",
        "masquerade",
        "bridge",
        "sriov",
        "binding",
        "macAddress",
        "pciAddress",
        "tag",
        "model",
    },
    "spec.domain.devices.interfaces[].binding": {"name"},
    "spec.domain.devices.gpus[]": {"name", "deviceName", "claimName", "requestName", "tag"},
    "spec.domain.devices.filesystems[]": {"name", "virtiofs"},
    "spec.volumes[]": {"name", "containerDisk", "configMap"},
    "spec.volumes[].containerDisk": {"image"},
    "spec.volumes[].configMap": {"name", "optional", "volumeLabel"},
}
EMPTY_STRUCTS = {"pod", "masquerade", "bridge", "sriov", "virtiofs"}


def closed(value, path=""):
    if isinstance(value, list):
        for item in value:
            closed(item, f"{path}[]")
        return
    if not isinstance(value, dict) or path.endswith((".metadata", ".requests", ".limits")):
        return
    if path.rsplit(".", 1)[-1] in EMPTY_STRUCTS:
        assert value == {}, f"{path}: an empty struct in KubeVirt"
        return
    if path == ".metadata":
        return
    allowed = VMI_FIELDS.get(path.lstrip("."))
    assert allowed is not None, f"{path}: not in the checked subset"
    for key, item in value.items():
        assert key in allowed, f"{path}: unknown field {key!r}"
        closed(item, f"{path}.{key}")


@pytest.mark.parametrize("name", ["vm1", "vm1-sriov"])
def test_the_example_vmi_uses_only_kubevirt_fields_with_their_types(name):
    vmi = by_kind("VirtualMachineInstance", name)
    closed(vmi)
    walk(vmi["metadata"], "V1ObjectMeta", "metadata")
    for i, claim in enumerate(vmi["spec"]["resourceClaims"]):  # core/v1 PodResourceClaim
        walk(claim, "V1PodResourceClaim", f"spec.resourceClaims[{i}]")
    walk(vmi["spec"]["domain"]["resources"]["requests"], "dict(str, str)", "requests")
    model = VirtualMachineInstance.model_validate(vmi, strict=True)
    assert model.metadata.name == name
    for iface in model.devices.interfaces or []:
        for value in (iface.mac_address, iface.pci_address, iface.tag):
            assert value is None or isinstance(value, str)
    for iface in vmi["spec"]["domain"]["devices"]["interfaces"]:
        if "pciAddress" in iface:  # KubeVirt's own pattern for pciAddress
            assert re.fullmatch(r"[\da-f]{4}:[\da-f]{2}:[\da-f]{2}\.[0-7]", iface["pciAddress"])


@pytest.mark.parametrize("name", ["vm1", "vm1-sriov"])
def test_the_example_vmi_shares_its_configmap_as_kvdev_metadata_over_virtiofs(name):
    vmi = by_kind("VirtualMachineInstance", name)
    spec = vmi["spec"]
    devices = spec["domain"]["devices"]
    assert {"name": "kvdev-metadata", "virtiofs": {}} in devices["filesystems"]
    volume = next(v for v in spec["volumes"] if v["name"] == "kvdev-metadata")
    assert volume["configMap"] == {"name": configmap_name(name)}
    assert "items" not in volume["configMap"]  # KubeVirt's ConfigMap volume has none
    # every volume is used by exactly one disk or filesystem
    used = [d["name"] for d in devices["disks"]] + [f["name"] for f in devices["filesystems"]]
    assert sorted(used) == sorted(v["name"] for v in spec["volumes"])
    # each DRA device names a claim entry of the VMI and a request of that claim
    entries = {e["name"]: e for e in spec["resourceClaims"]}
    claim = by_kind("ResourceClaim", "vm1-devices")
    template = by_kind("ResourceClaimTemplate", "fast-nic")
    requests = {
        "devices": {r["name"] for r in claim["spec"]["devices"]["requests"]},
        "fast-nic": {r["name"] for r in template["spec"]["spec"]["devices"]["requests"]},
    }
    refs = [n["resourceClaim"] for n in spec["networks"] if "resourceClaim" in n]
    refs += list(devices.get("gpus", []))
    for ref in refs:
        assert ref["claimName"] in entries
        assert ref["requestName"] in requests[ref["claimName"]]
    assert {i["name"] for i in devices["interfaces"]} == {n["name"] for n in spec["networks"]}


def test_dra_nics_come_through_a_binding_plugin_and_sriov_only_in_the_v1_9_example():
    """The v1.9 example keeps `sriov: {}` DRA NICs; the main one goes through a binding plugin."""
    for name, shape in (("vm1", "binding"), ("vm1-sriov", "sriov")):
        spec = by_kind("VirtualMachineInstance", name)["spec"]
        dra = {n["name"] for n in spec["networks"] if "resourceClaim" in n}
        interfaces = [i for i in spec["domain"]["devices"]["interfaces"] if i["name"] in dra]
        assert interfaces
        assert all(shape in i for i in interfaces)
        if shape == "binding":  # KubeVirt sets the MAC: the hint's macAddress is the guest's
            assert all(i["binding"]["name"] and "macAddress" in i for i in interfaces)
    text = (MANIFESTS / "vmi-example.yaml").read_text()
    assert "KubeVirt <= v1.9, alpha" in text


def test_the_example_vmi_is_the_one_the_controller_example_renders():
    example = yaml.safe_load_all(
        (REPO / "packaging" / "examples" / "host" / "vmi.yaml").read_text()
    )
    rendered_from = next(d for d in example if d["kind"] == "VirtualMachineInstance")
    shipped = by_kind("VirtualMachineInstance", "vm1")
    assert rendered_from["spec"]["networks"] == shipped["spec"]["networks"]
    assert rendered_from["spec"]["resourceClaims"] == shipped["spec"]["resourceClaims"]
    for key in ("interfaces", "gpus", "filesystems"):
        assert (
            rendered_from["spec"]["domain"]["devices"][key]
            == shipped["spec"]["domain"]["devices"][key]
        )


# --------------------------------------------------------------------------- the image


def test_the_manifests_run_the_image_make_dist_builds_by_its_name():
    """The image is built one way (packaging/container/build-image.sh, tagged with kvdev's
    version in its OCI layout) and the chart's defaults name exactly it: kvdev-host:<version>."""
    assert sorted(p.name for p in (REPO / "packaging" / "container").iterdir()) == [
        "build-image.sh"
    ]
    recipe = (REPO / "packaging" / "container" / "build-image.sh").read_text()
    assert "'/tmp/kvdev-wheels/$whl[host]'" in recipe
    assert "--config.entrypoint kvdev-host" in recipe
    assert 'umoci new --image "$layout:$version"' in recipe
    values = yaml.safe_load((REPO / "packaging" / "helm" / "kvdev" / "values.yaml").read_text())
    assert values["image"]["repository"] == "kvdev-host"
    assert values["image"]["tag"] == ""  # the chart's appVersion: kvdev's version
    for param in documents():
        doc = param.values[0]
        if doc["kind"] in {"Deployment", "DaemonSet"}:
            for container in doc["spec"]["template"]["spec"]["containers"]:
                assert container["image"] == f"kvdev-host:{__version__}"


def test_the_check_itself_catches_unknown_fields_wrong_types_and_missing_ones():
    import copy  # noqa: PLC0415

    good = by_kind("Deployment", "kvdev-host-controller")
    unknown = copy.deepcopy(good)
    unknown["spec"]["template"]["spec"]["containers"][0]["imagePolicy"] = "x"
    with pytest.raises(AssertionError, match=r"containers\[0\]: unknown field 'imagePolicy'"):
        walk(unknown, "V1Deployment", "Deployment")
    wrong = copy.deepcopy(good)
    wrong["spec"]["replicas"] = "1"
    with pytest.raises(AssertionError, match=r"spec.replicas: expected int"):
        walk(wrong, "V1Deployment", "Deployment")
    missing = copy.deepcopy(good)
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        client.ApiClient().deserialize(json.dumps(missing), "V1Deployment", "application/json")
    vmi = copy.deepcopy(by_kind("VirtualMachineInstance", "vm1"))
    vmi["spec"]["domain"]["devices"]["filesystems"][0]["virtiofs"] = {"queue": 1}
    with pytest.raises(AssertionError, match="an empty struct"):
        closed(vmi)
