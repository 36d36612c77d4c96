"""``kvdev-host serve --kube`` writes the device status of the claims it prepares, on the real
API server (v1.37.2), driven by kubelet's own DRA client (``kubeletdra``), as the plugin
DaemonSet's ServiceAccount with the shipped RBAC: a token bound to a plugin Pod on the claim's
node (what the ``associated-node:`` verb of v1.36+'s granular status authorization needs).

After kubelet's PrepareResources the claim's ``status.devices`` holds serve's entry and
``managedFields`` names ``kvdev-host/<driver>``; another manager's field on the same entry is
kept; after UnprepareResources serve's fields are gone. With a token bound to no node the
status write is refused and the prepare still succeeds (the failure logged and counted).
"""

import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path

import pytest
from clusterlab import SYSTEM, add_node, apply, resource_slice, token_for
from controlplane import token_kubeconfig
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hostlab import start_serve_line
from upstreamlab import KubeletDRA

DRIVER = "sriov.example.com"  # the shipped plugin.yaml's driver (its RBAC names it)
MANAGER = f"kvdev-host/{DRIVER}"
PLUGIN_SA = "kvdev-host-plugin"


class Node:
    """A Node, its plugin Pod (never run: no kubelet) and a slice of two VFs on it."""

    def __init__(self, kube, namespace):
        self.kube, self.ns = kube, namespace
        self.core, self.resource = client.CoreV1Api(kube), client.ResourceV1Api(kube)
        self.name = f"node-{namespace}"
        self.pod = f"plugin-{namespace}"
        self.slice = f"{self.name}-vfs"
        self.root = Path(tempfile.mkdtemp(prefix="kvdev-status-", dir="/tmp"))

    def publish(self):
        add_node(self.core, self.name)
        devices = [
            {"name": f"vf-{i}", "attributes": {"dra.net/pciAddress": {"string": f"0000:3b:02.{i}"}}}
            for i in range(2)
        ]
        apply(self.kube, [resource_slice(self.slice, DRIVER, devices, nodeName=self.name)])
        body = {
            "metadata": {"name": self.pod, "namespace": SYSTEM},
            "spec": {
                "serviceAccountName": PLUGIN_SA,
                "nodeName": self.name,
                "containers": [{"name": "plugin", "image": "kvdev-host:0.1.0"}],
            },
        }
        self.core.create_namespaced_pod(SYSTEM, body)

    def unpublish(self):
        self.core.delete_namespaced_pod(self.pod, SYSTEM, grace_period_seconds=0)
        self.resource.delete_resource_slice(self.slice)
        self.core.delete_node(self.name)
        shutil.rmtree(self.root, ignore_errors=True)

    def token(self, *, bound: bool) -> str:
        """The plugin ServiceAccount's token: bound to the Pod on this node, or to nothing."""
        if not bound:
            return token_for(self.kube, SYSTEM, PLUGIN_SA)
        pod = self.core.read_namespaced_pod(self.pod, SYSTEM)
        ref = {"kind": "Pod", "apiVersion": "v1", "name": self.pod, "uid": pod.metadata.uid}
        body = {"spec": {"expirationSeconds": 3600, "boundObjectRef": ref}}
        made = self.core.create_namespaced_service_account_token(PLUGIN_SA, SYSTEM, body)
        return str(made.status.token)

    def claim(self, name):
        """An allocated claim (vf-0, on this node) reserved for a virt-launcher pod on the node
        (a real Pod, so the claim controller keeps the reservation); the claim and the pod."""
        request = {"name": "nic", "exactly": {"deviceClassName": "vf"}}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"devices": {"requests": [request]}},
        }
        apply(self.kube, [body])
        pod = {
            "metadata": {"name": f"virt-launcher-{name}", "namespace": self.ns},
            "spec": {
                "nodeName": self.name,
                "resourceClaims": [{"name": "nic", "resourceClaimName": name}],
                "containers": [
                    {
                        "name": "compute",
                        "image": "virt-launcher",
                        "resources": {"claims": [{"name": "nic"}]},
                    }
                ],
            },
        }
        made = self.core.create_namespaced_pod(self.ns, pod)
        pod_uid = made.metadata.uid
        result = {"request": "nic", "driver": DRIVER, "pool": self.slice, "device": "vf-0"}
        on_node = {"key": "metadata.name", "operator": "In", "values": [self.name]}
        status = {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [on_node]}]},
            },
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod_uid}],
        }
        self.resource.patch_namespaced_resource_claim_status(name, self.ns, {"status": status})
        pod["metadata"]["uid"] = pod_uid
        pod["status"] = {}
        return self.read(name), pod

    def read(self, name):
        raw = self.resource.read_namespaced_resource_claim(name, self.ns, _preload_content=False)
        return json.loads(raw.data)

    def serve(self, token):
        config = token_kubeconfig(
            self.root / f"plugin-{uuid.uuid4().hex[:6]}.kubeconfig",
            self.kube.configuration.host,
            Path(self.kube.configuration.ssl_ca_cert),
            token,
        )
        args = [sys.executable, "-m", "kvdev.host", "serve", "--driver", DRIVER, "--kube"]
        args += ["--kubeconfig", str(config), "--node-name", self.name]
        args += [
            "--plugin-data-dir",
            str(self.root / "plugin"),
            "--cdi-dir",
            str(self.root / "cdi"),
        ]
        args += ["--registry-dir", str(self.root / "registry"), "--metrics-address", "127.0.0.1:0"]
        proc, line = start_serve_line(args)
        return proc, line.split(" metrics=")[1].strip()

    def kubelet(self):
        return KubeletDRA(self.root / "registry", self.root / "kubelet")


@pytest.fixture
def node(kube, namespace, shipped):
    n = Node(kube, namespace)
    n.publish()
    yield n
    n.unpublish()


def ours(claim):
    return [e for e in claim["status"].get("devices") or [] if e["driver"] == DRIVER]


def managers(claim):
    return {
        (m["manager"], m["operation"], m.get("subresource"))
        for m in claim["metadata"]["managedFields"]
    }


def stop(proc):
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=60)  # a failure guard
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def scrape(url):
    with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 - our own URL
        return answer.read().decode()


def test_kubelets_prepare_applies_our_device_status_and_unprepare_removes_it(node):
    claim, pod = node.claim("vm1-nic")
    # Another manager (a network driver's controller, say) owns networkData on the same entry.
    other = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "vm1-nic", "namespace": node.ns},
        "status": {
            "devices": [
                {
                    "driver": DRIVER,
                    "pool": node.slice,
                    "device": "vf-0",
                    "networkData": {"interfaceName": "net1", "ips": ["10.1.0.5/24"]},
                }
            ]
        },
    }
    node.resource.patch_namespaced_resource_claim_status(
        "vm1-nic",
        node.ns,
        other,
        field_manager="net-controller",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    proc, metrics = node.serve(node.token(bound=True))
    try:
        with node.kubelet() as kubelet:
            kubelet.call("claims", objects=[node.read("vm1-nic")])
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.root / "plugin" / "dra.sock")])
            got = kubelet.call("prepare", pod=pod)["containers"]
            prepared = node.read("vm1-nic")
            kubelet.call("unprepare", pod=pod)
            unprepared = node.read("vm1-nic")
        text = scrape(metrics)
    finally:
        err = stop(proc)
    assert got["compute"] == [f"{DRIVER}/metadata={claim['metadata']['uid']}_nic"]
    (entry,) = ours(prepared)
    assert (entry["pool"], entry["device"]) == (node.slice, "vf-0")
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "DevicePrepared")
    assert entry["networkData"]["interfaceName"] == "net1"  # the other manager's, kept
    assert (MANAGER, "Apply", "status") in managers(prepared)
    assert ("net-controller", "Apply", "status") in managers(prepared)
    # Unprepared: our fields are gone, the other manager's entry and field stay.
    (left,) = ours(unprepared)
    assert not left.get("conditions")  # ours alone: gone
    assert left["networkData"]["interfaceName"] == "net1"
    assert MANAGER not in {m for m, _, _ in managers(unprepared)}
    assert "device status not written" not in err, err
    assert 'kvdev_plugin_errors_total{operation="device_status"' not in text
    took = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("kvdev_plugin_prepare_claim_duration_seconds_sum")
    )
    print(f"serve: one claim prepared (GET, 2 LISTs, files, status apply) in {took * 1000:.0f} ms")


def test_a_refused_status_write_does_not_fail_the_prepare(node):
    claim, pod = node.claim("vm2-nic")
    proc, metrics = node.serve(node.token(bound=False))  # no node in it: not associated-node
    try:
        with node.kubelet() as kubelet:
            kubelet.call("claims", objects=[claim])
            kubelet.call("wait", driver=DRIVER, plugins=[str(node.root / "plugin" / "dra.sock")])
            got = kubelet.call("prepare", pod=pod)["containers"]
            kubelet.call("unprepare", pod=pod)
        after = node.read("vm2-nic")
        text = scrape(metrics)
    finally:
        err = stop(proc)
    assert got["compute"] == [f"{DRIVER}/metadata={claim['metadata']['uid']}_nic"]
    assert ours(after) == []
    assert "device status not written (the next prepare applies it again)" in err
    assert "resourceclaims/driver" in err  # the API server's reason, in serve's log
    # The unprepare's clear is refused as well (the shipped node policy admits no token without
    # a node), and is not retried: two refusals counted, neither failing kubelet's call.
    assert "device status not written (not retried)" in err
    assert 'kvdev_plugin_errors_total{operation="device_status",reason="invalid"} 2.0' in text
    assert 'kvdev_plugin_prepare_claims_total{result="success"} 1.0' in text


def test_the_plugins_rbac_allows_its_status_entries_and_nothing_more(node):
    node.claim("vm3-nic")
    from kubernetes import config  # noqa: PLC0415

    path = node.root / "bound.kubeconfig"
    host, ca = node.kube.configuration.host, Path(node.kube.configuration.ssl_ca_cert)
    as_plugin = client.ResourceV1Api(
        config.new_client_from_config(str(token_kubeconfig(path, host, ca, node.token(bound=True))))
    )

    def apply_status(driver, device="vf-0"):
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "vm3-nic", "namespace": node.ns},
            "status": {"devices": [{"driver": driver, "pool": node.slice, "device": device}]},
        }
        return as_plugin.patch_namespaced_resource_claim_status(
            "vm3-nic",
            node.ns,
            body,
            field_manager=MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    apply_status(DRIVER)  # its own driver's entry: allowed
    with pytest.raises(ApiException) as refused:
        as_plugin.patch_namespaced_resource_claim(
            "vm3-nic", node.ns, {"metadata": {"labels": {"a": "b"}}}
        )
    assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:
        as_plugin.delete_namespaced_resource_claim("vm3-nic", node.ns)
    assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:
        as_plugin.replace_namespaced_resource_claim_status("vm3-nic", node.ns, node.read("vm3-nic"))
    assert refused.value.status == 403  # update is not granted, only patch
