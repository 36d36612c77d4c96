"""packaging/helm/kvdev: helm lint, helm template with default and other values, and every
rendered object walked against the kubernetes client's OpenAPI model of its kind (the walk of
test_kubernetes_manifests.py). helm is built from tests/helm (its own Go module), cached."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "kvdev"
_spec = importlib.util.spec_from_file_location(
    "manifest_checks", Path(__file__).with_name("test_kubernetes_manifests.py")
)
assert _spec is not None
assert _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)
MODELS = {
    **checks.MODELS,
    ("v1", "Service"): "V1Service",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "V1ValidatingAdmissionPolicy"
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "V1ValidatingAdmissionPolicyBinding"
    ),
}


@pytest.fixture(scope="session")
def helm():
    subprocess.run([REPO / "tests" / "helm" / "build.sh"], check=True)
    return REPO / "build" / "helm" / "bin" / "helm"


def template(helm, namespace, *sets):
    args = [helm, "template", "kvdev", CHART, "-n", namespace, "--kube-version", "1.37.2"]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    return done, [d for d in yaml.safe_load_all(done.stdout or "") if d]


def test_helm_lint_passes(helm):
    done = subprocess.run(
        [helm, "lint", CHART, "-n", "kvdev-system"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "sets",
    [
        ("namespace.create=true",),
        (
            "plugin.drivers={a.example.com,b.example.com}",
            "logging.format=json",
            "controller.replicas=2",
            "image.digest=sha256:" + "0" * 64,
        ),
    ],
    ids=["defaults", "other-values"],
)
def test_every_rendered_object_matches_its_openapi_model(helm, sets):
    done, docs = template(helm, "kvdev-system", *sets)
    assert done.returncode == 0, done.stderr
    assert {d["kind"] for d in docs} >= {"Deployment", "DaemonSet", "PodDisruptionBudget"}
    for doc in docs:
        model = MODELS[(doc["apiVersion"], doc["kind"])]
        checks.walk(doc, model, doc["kind"])
        client.ApiClient().deserialize(json.dumps(doc), model, "application/json")
        labels = doc["metadata"]["labels"]
        for key in ("name", "instance", "version", "part-of", "managed-by"):
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)
        assert labels["helm.sh/chart"] == "kvdev-0.1.0"


def test_the_default_namespace_is_refused(helm):
    done, _ = template(helm, "default")
    assert done.returncode != 0
    assert "not `default`" in done.stderr


def test_the_plugin_upgrades_with_a_surge_and_the_controller_is_cluster_critical(helm):
    _, docs = template(helm, "kvdev-system", "namespace.create=true")
    kinds = {d["kind"]: d for d in docs}
    (plugin,) = [
        d["spec"]
        for d in docs
        if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("-plugin")
    ]
    assert plugin["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert plugin["template"]["spec"]["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    controller = kinds["Deployment"]["spec"]["template"]["spec"]
    assert controller["priorityClassName"] == "system-cluster-critical"
    assert "podAntiAffinity" in controller["affinity"]
    assert kinds["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "privileged"
    )


@pytest.mark.parametrize("grace", ["180", "0", "86400", "30"])
def test_the_controller_args_the_chart_renders_are_what_kvdev_host_accepts(helm, grace):
    """The rendered Deployment's args parse with kvdev-host's own parser and pass its
    settings check; controller.guestGrace reaches --guest-grace."""
    from kvdev.host.cli import build_parser  # noqa: PLC0415
    from kvdev.host.commands import controller  # noqa: PLC0415

    _, docs = template(helm, "kvdev-system", f"controller.guestGrace={grace}")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = build_parser("controller").parse_args(args)
    assert parsed.guest_grace == float(grace)
    assert controller._settings_error(parsed) is None


def test_a_grace_beyond_a_day_is_refused_by_the_chart_schema(helm):
    done, _ = template(helm, "kvdev-system", "controller.guestGrace=86401")
    assert done.returncode != 0
    assert "guestGrace" in done.stderr
