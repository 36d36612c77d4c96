"""kvdev's Helm chart (packaging/helm/kvdev) on the real API server of the session's control
plane: ``helm lint``; ``helm template`` with default and other values, every rendered object
accepted by a server-side dry run and the values visible where they belong; the ``default``
namespace and a misspelled value refused with a message; the plain manifests are the chart's
defaults; ``helm install`` creates the objects and ``helm uninstall`` removes them; and the
plugin's ValidatingAdmissionPolicy lets its ServiceAccount write only the status of claims
allocated on its own node (a token bound to a Pod on a Node, as kubelet's would be)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from chartlab import (
    CHART,
    KUBE_VERSION,
    REPO,
    dry_run,
    helm,
    helm_binary,
    pod_token_kubeconfig,
    render,
    sets,
    wait_gone,
)
from clusterlab import add_node, apply, token_for, wait_for
from controlplane import token_kubeconfig
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

DIGEST = "sha256:" + "ab" * 32
DRY = "kvdev-dry"  # namespace and release of the dry runs (nothing is stored)
KUBE = ("--kube-version", KUBE_VERSION)


@pytest.fixture(scope="module")
def chart_helm(cluster: Any) -> None:
    """helm built (Go: where ``cluster`` skips for want of Go, these tests skip too)."""
    del cluster
    helm_binary()


@pytest.fixture(scope="module")
def dry_namespace(kube: Any, chart_helm: None) -> Iterator[str]:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": DRY}})
    yield DRY
    core.delete_namespace(DRY)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_spec(docs: list[dict[str, Any]], kind: str, component: str = "") -> dict[str, Any]:
    """The pod spec of the one ``kind`` (a DaemonSet: the plugin's, unless ``component``)."""
    component = component or ("plugin" if kind == "DaemonSet" else "")
    (workload,) = [
        d
        for d in by_kind(docs, kind)
        if not component or d["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return dict(workload["spec"]["template"]["spec"])


def check_defaults(docs: list[dict[str, Any]]) -> None:
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    controller, plugin = pod_spec(docs, "Deployment"), pod_spec(docs, "DaemonSet")
    spread = controller["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = spread[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == "controller"
    assert controller["priorityClassName"] == "system-cluster-critical"
    assert plugin["priorityClassName"] == "system-node-critical"
    relay = pod_spec(docs, "DaemonSet", "relay")
    (container,) = relay["containers"]
    assert {"--cdi-dir=/etc/cdi", "--cdi-dir=/var/run/cdi"} <= set(container["args"])
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for spec in (controller, plugin, relay):
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "imagePullSecrets" not in spec
    assert {d["kind"] for d in docs} >= {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    (binding,) = by_kind(docs, "MutatingAdmissionPolicyBinding")
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert selector == {"matchLabels": {"kvdev.io/wire-vmis": "true"}}
    assert "--workers=4" in controller["containers"][0]["args"]
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", doc["kind"]
        assert labels["helm.sh/chart"] == "kvdev-0.1.0"
        for key in ("name", "instance", "version", "part-of"):
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)


def check_digest(docs: list[dict[str, Any]]) -> None:
    for kind in ("Deployment", "DaemonSet"):
        for container in pod_spec(docs, kind)["containers"]:
            assert container["image"] == f"registry.example/kvdev-host@{DIGEST}"


def check_pull_secrets(docs: list[dict[str, Any]]) -> None:
    for kind in ("Deployment", "DaemonSet"):
        assert pod_spec(docs, kind)["imagePullSecrets"] == [{"name": "regcred"}]


def check_two_drivers(docs: list[dict[str, Any]]) -> None:
    containers = pod_spec(docs, "DaemonSet")["containers"]
    assert [c["name"] for c in containers] == ["plugin", "plugin-1"]
    drivers = ("a.example.com", "b.example.com")
    for container, driver, offset in zip(containers, drivers, (0, 1), strict=True):
        args = container["args"]
        assert f"--driver={driver}" in args
        assert f"--plugin-data-dir=/var/lib/kubelet/plugins/{driver}" in args
        assert f"--health-port={51515 + offset}" in args
        assert f"--metrics-address=:{8081 + offset}" in args
    (service,) = [
        s
        for s in by_kind(docs, "Service")
        if s["spec"].get("clusterIP") == "None" and "plugin" in s["metadata"]["name"]
    ]
    assert [p["port"] for p in service["spec"]["ports"]] == [8081, 8082]


def check_no_node_restriction(docs: list[dict[str, Any]]) -> None:
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        names = [d["metadata"]["name"] for d in by_kind(docs, kind)]
        assert "kvdev-dry-host-relay-kvdev-dry-node" in names  # the relay's own stays
        assert not [x for x in names if x.endswith("-node") and "-relay-" not in x], names


def check_no_relay(docs: list[dict[str, Any]]) -> None:
    assert [d["metadata"]["name"] for d in by_kind(docs, "DaemonSet")] == ["kvdev-dry-host-plugin"]
    assert not [d for d in docs if "host-relay" in d["metadata"]["name"]]


def check_no_vmi_wiring(docs: list[dict[str, Any]]) -> None:
    assert not by_kind(docs, "MutatingAdmissionPolicy")
    assert not by_kind(docs, "MutatingAdmissionPolicyBinding")
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        names = [d["metadata"]["name"] for d in by_kind(docs, kind)]
        assert names  # the plugin's own stays
        assert all(name.endswith("-node") for name in names), names


def check_no_pdb(docs: list[dict[str, Any]]) -> None:
    assert not by_kind(docs, "PodDisruptionBudget")


def check_tuned(docs: list[dict[str, Any]]) -> None:
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert "--leader-elect" not in args
    assert {"--log-format=json", "--log-level=debug", "--kube-api-qps=20"} <= set(args)
    spec = pod_spec(docs, "Deployment")
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "priorityClassName" not in spec
    assert pod_spec(docs, "DaemonSet")["tolerations"] == [{"operator": "Exists"}]


def check_namespace(docs: list[dict[str, Any]]) -> None:
    (namespace,) = by_kind(docs, "Namespace")
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"


VALUES: dict[str, tuple[tuple[str, ...], Callable[[list[dict[str, Any]]], None]]] = {
    "defaults": ((), check_defaults),
    "namespace": (("namespace.create=true",), check_namespace),
    "digest": (
        (f"image.digest={DIGEST}", "image.repository=registry.example/kvdev-host"),
        check_digest,
    ),
    "pull-secrets": (("imagePullSecrets[0].name=regcred",), check_pull_secrets),
    "two-drivers": (("plugin.drivers={a.example.com,b.example.com}",), check_two_drivers),
    "no-node-restriction": (("plugin.nodeRestriction=false",), check_no_node_restriction),
    "no-pdb": (("controller.podDisruptionBudget.enabled=false",), check_no_pdb),
    "no-relay": (("relay.enabled=false",), check_no_relay),
    "no-vmi-wiring": (("vmiWiring.enabled=false",), check_no_vmi_wiring),
    "tuned": (
        (
            "logging.format=json",
            "logging.level=debug",
            "controller.leaderElection.enabled=false",
            "controller.replicas=2",
            "controller.priorityClassName=",
            "controller.nodeSelector.kubernetes\\.io/os=linux",
            "plugin.tolerations[0].operator=Exists",
            "kubeApi.qps=20",
            "kubeApi.burst=40",
        ),
        check_tuned,
    ),
}


@pytest.mark.parametrize("name", list(VALUES))
def test_helm_lint_passes(chart_helm, name):
    done = helm("lint", "--strict", CHART, "-n", DRY, *sets(VALUES[name][0]))
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("name", list(VALUES))
def test_every_rendered_object_is_accepted_by_the_api_server(kube, dry_namespace, name):
    values, check = VALUES[name]
    docs = render(DRY, dry_namespace, values)
    accepted = dry_run(kube, docs)
    assert len(accepted) == len(docs)
    assert "Deployment/kvdev-dry-host-controller" in accepted
    assert "DaemonSet/kvdev-dry-host-plugin" in accepted
    assert ("DaemonSet/kvdev-dry-host-relay" in accepted) == (name != "no-relay")
    check(docs)


def test_the_default_namespace_is_refused_with_a_message(chart_helm):
    done = helm("template", "kvdev", CHART, "-n", "default", *KUBE, check=False)
    assert done.returncode != 0
    assert "kvdev: install into a namespace of its own" in done.stderr
    assert "not `default`" in done.stderr


def test_a_misspelled_or_mistyped_value_is_refused_naming_it(chart_helm):
    done = helm(
        "template", "kvdev", CHART, "-n", DRY, *KUBE, "--set", "logging.format=xml", check=False
    )
    assert done.returncode != 0
    assert "at '/logging/format': value must be one of 'text', 'json'" in done.stderr
    done = helm(
        "template", "kvdev", CHART, "-n", DRY, *KUBE, "--set", "controller.replica=2", check=False
    )
    assert done.returncode != 0
    assert "'replica'" in done.stderr  # additionalProperties: the misspelt key named


def test_the_plain_manifests_are_helm_template_of_the_defaults(chart_helm, tmp_path):
    script = REPO / "packaging" / "helm" / "manifests.sh"
    subprocess.run([script, tmp_path], check=True, capture_output=True)
    for name in ("controller.yaml", "plugin.yaml", "relay.yaml"):
        shipped = (REPO / "packaging" / "kubernetes" / name).read_text()
        assert shipped == (tmp_path / name).read_text(), f"{name}: run make manifests"
        assert shipped.startswith("# GENERATED by packaging/helm/manifests.sh (make manifests)")


# --------------------------------------------------------------------------- installed


def installed_objects(release: str, namespace: str, kubeconfig: str) -> list[dict[str, Any]]:
    import yaml  # noqa: PLC0415

    done = helm("get", "manifest", release, "-n", namespace, "--kubeconfig", kubeconfig)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_helm_install_creates_the_objects_and_uninstall_removes_them(cluster, kube, chart_helm):
    release = namespace = "kvdev-inst"
    kubeconfig = str(cluster.kubeconfig)
    helm(
        "install", release, CHART, "-n", namespace, "--create-namespace", "--kubeconfig", kubeconfig
    )
    try:
        docs = installed_objects(release, namespace, kubeconfig)
        refs = [
            (d["apiVersion"], d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
            for d in docs
        ]
        # the defaults: 8 of the controller, 7 of the plugin, 7 of the relay, 4 of the wiring
        assert len(refs) == 26
        wiring = f"kvdev-inst-{namespace}-vmi-wiring"
        assert ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", wiring, None) in refs
        apps = client.AppsV1Api(kube)
        deployment = apps.read_namespaced_deployment("kvdev-inst-host-controller", namespace)
        assert deployment.metadata.labels["app.kubernetes.io/instance"] == release
        daemonset = apps.read_namespaced_daemon_set("kvdev-inst-host-plugin", namespace)
        assert daemonset.spec.update_strategy.rolling_update.max_surge == 1
        admission = client.AdmissionregistrationV1Api(kube)
        policy = admission.read_validating_admission_policy(
            f"kvdev-inst-host-plugin-{namespace}-node"
        )
        assert policy.spec.failure_policy == "Fail"
        status = helm("status", release, "-n", namespace, "--kubeconfig", kubeconfig)
        assert "STATUS: deployed" in status.stdout
    finally:
        helm("uninstall", release, "-n", namespace, "--kubeconfig", kubeconfig)
    wait_gone(kube, refs)
    listed = helm("list", "-n", namespace, "-q", "--kubeconfig", kubeconfig)
    assert release not in listed.stdout.split()
    client.CoreV1Api(kube).delete_namespace(namespace)


# --------------------------------------------------------------------------- the node policy

VAP = "kvdev-vap"
DRIVER = "sriov.example.com"


@pytest.fixture(scope="module")
def vap_release(cluster, kube, chart_helm) -> Iterator[str]:
    kubeconfig = str(cluster.kubeconfig)
    helm("install", VAP, CHART, "-n", VAP, "--create-namespace", "--kubeconfig", kubeconfig)
    yield VAP
    helm("uninstall", VAP, "-n", VAP, "--kubeconfig", kubeconfig)
    client.CoreV1Api(kube).delete_namespace(VAP)


def allocated_claim(kube: Any, namespace: str, name: str, node: str) -> None:
    resource = client.ResourceV1Api(kube)
    request = {"name": "r", "exactly": {"deviceClassName": "vf"}}
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
    }
    apply(kube, [body])
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    result = {"request": "r", "driver": DRIVER, "pool": node, "device": "vf-0"}
    allocation = {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [term]}}
    resource.patch_namespaced_resource_claim_status(
        name, namespace, {"status": {"allocation": allocation}}
    )


def device_status(node: str) -> dict[str, Any]:
    return {"status": {"devices": [{"driver": DRIVER, "pool": node, "device": "vf-0"}]}}


@pytest.fixture
def nodes(kube, namespace) -> Iterator[tuple[str, str]]:
    core = client.CoreV1Api(kube)
    pair = (f"{namespace}-a", f"{namespace}-b")
    for node in pair:
        add_node(core, node)
    yield pair
    for node in pair:
        core.delete_node(node)


def as_user(kubeconfig: Any) -> Any:
    return client.ResourceV1Api(config.new_client_from_config(str(kubeconfig)))


def refusal_saying(text: str, call: Callable[[], object]) -> ApiException:
    """Poll until ``call`` is refused with ``text`` in the answer: RBAC changes reach the
    authorizer through its informers, a moment after they are written."""

    def saying() -> ApiException | None:
        try:
            call()
        except ApiException as denied:
            return denied if text in denied.body else None
        return None  # admitted: the policy (or the RBAC change) has not reached the server yet

    return wait_for(f"a refusal saying {text!r}", saying)


def admitted(call: Callable[[], Any]) -> Any:
    """Poll until ``call`` is admitted: the chart's RBAC, just installed, reaches the authorizer
    through its informers a moment after it is written (a refusal until then is not the answer)."""

    def answer() -> Any:
        try:
            return call()
        except ApiException as e:
            if e.status in (403, 422):
                return None
            raise

    return wait_for("the write admitted", answer)


def refused(call: Callable[[], object]) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value


def other_nodes_allowed(kube: Any, namespace: str, account: str) -> Callable[[], None]:
    """Grant the plugin's account ``arbitrary-node:patch`` (what an operator might do): the API
    server's own node check then passes for any node, and only the policy stands."""
    rbac = client.RbacAuthorizationV1Api(kube)
    name = f"{account}-arbitrary-node"
    rule = {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/driver"],
        "verbs": ["arbitrary-node:patch"],
    }
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [rule]})
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    binding = {"metadata": {"name": name}, "roleRef": ref, "subjects": [subject]}
    rbac.create_cluster_role_binding(binding)

    def revoke() -> None:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)

    return revoke


def test_the_plugin_writes_status_only_of_claims_on_its_own_node(
    cluster, kube, vap_release, namespace, nodes, tmp_path
):
    a, b = nodes
    allocated_claim(kube, namespace, "on-a", a)
    allocated_claim(kube, namespace, "on-b", b)
    account = f"{vap_release}-host-plugin"
    kubeconfig, _ = pod_token_kubeconfig(cluster, kube, vap_release, account, a, tmp_path / "kc")
    plugin = as_user(kubeconfig)
    written = admitted(
        lambda: plugin.patch_namespaced_resource_claim_status("on-a", namespace, device_status(a))
    )
    assert written.status.devices[0].device == "vf-0"

    def write_b() -> object:
        return plugin.patch_namespaced_resource_claim_status("on-b", namespace, device_status(b))

    # The chart's RBAC holds associated-node:patch only: the API server's own check refuses.
    refusal_saying("cannot arbitrary-node:patch", write_b)
    # With arbitrary-node granted too, the chart's admission policy still refuses.
    revoke = other_nodes_allowed(kube, vap_release, account)
    try:
        said = f"the plugin on node '{a}' may not change the status of a claim allocated on"
        denied = refusal_saying(said, write_b)
        assert f"{said} node(s) {b}" in denied.body
        assert denied.status in (403, 422)
        # Nor can it move a claim of its own node elsewhere: the server keeps an allocation.
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [b]}]}
        moved = {"status": {"allocation": {"nodeSelector": {"nodeSelectorTerms": [term]}}}}
        denied = refused(
            lambda: plugin.patch_namespaced_resource_claim_status("on-a", namespace, moved)
        )
        assert "field cannot be modified once set" in denied.body
    finally:
        revoke()
    # RBAC: not the claim itself.
    labels = {"metadata": {"labels": {"x": "y"}}}
    denied = refused(lambda: plugin.patch_namespaced_resource_claim("on-a", namespace, labels))
    assert denied.status == 403


def test_a_plugin_token_that_names_no_node_is_refused(
    cluster, kube, vap_release, namespace, nodes, tmp_path
):
    a, _ = nodes
    allocated_claim(kube, namespace, "on-a", a)
    account = f"{vap_release}-host-plugin"
    token = token_for(kube, vap_release, account)  # not bound to a pod: no node
    plain = token_kubeconfig(tmp_path / "kc", cluster.server, cluster.pki / "ca.crt", token)
    # A pod not (yet) on a node: no node either.
    unscheduled, _ = pod_token_kubeconfig(
        cluster, kube, vap_release, account, None, tmp_path / "kc2"
    )
    writes = [
        lambda config=config: as_user(config).patch_namespaced_resource_claim_status(
            "on-a", namespace, device_status(a)
        )
        for config in (plain, unscheduled)
    ]
    for write in writes:  # the API server's own check: no node, so arbitrary-node is needed
        refusal_saying("cannot arbitrary-node:patch", write)
    revoke = other_nodes_allowed(kube, vap_release, account)
    try:
        said = "no node in the request's credentials"
        for write in writes:
            refusal_saying(said, write)
    finally:
        revoke()


def test_the_admin_is_not_bound_by_the_plugins_policy(kube, vap_release, namespace, nodes):
    _, b = nodes
    allocated_claim(kube, namespace, "on-b", b)
    resource = client.ResourceV1Api(kube)
    written = resource.patch_namespaced_resource_claim_status("on-b", namespace, device_status(b))
    assert written.status.devices[0].pool == b
