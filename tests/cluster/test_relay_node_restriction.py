"""The node relay's least privilege on the real API server, with the shipped relay.yaml.

Two nodes, a relay Pod on each (never run: no kubelet) and tokens bound to those Pods (the
node name is in them, as ServiceAccountTokenPodNodeInfo puts it). The relay of node A writes
its node's records (``Relay.sync`` over a CDI directory, the real client); the relay of node B
cannot create, change or delete a record naming node A (the ValidatingAdmissionPolicy), cannot
touch any other ConfigMap of its namespace, nor any ConfigMap of a VMI's namespace (RBAC), and
a token bound to no node writes nothing. The record node B may write for the same claim (its
own node's) never reaches a VMI on node A: the controller's render, over the records as the
API server holds them, copies only node A's bytes; and the live controller, as its own
ServiceAccount, copies node A's record into the ConfigMap of a VMI on node A at once.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from clusterlab import (
    SYSTEM,
    add_node,
    apply,
    kvdev_host,
    minimal_vmi,
    refusals,
    token_for,
    wait_for,
)
from controlplane import token_kubeconfig
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvdev.errors import PermanentError
from kvdev.host.controller.index import Index, Kind, parse
from kvdev.host.controller.render import render
from kvdev.host.kubeclient import api_client
from kvdev.host.publish.relayed import node_selector, records
from kvdev.host.relay.finder import DriverFile
from kvdev.host.relay.kube import RelayApi
from kvdev.host.relay.live import Relay
from kvdev.schema.tree import ROOT

RELAY_SA = "kvdev-host-relay"
REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "packaging" / "examples" / "host"
CLAIM_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"  # the example's vm1-devices
DRIVER = "sriov.example.com"
NIC1 = f"vm1-devices.nic-1.{DRIVER}-metadata.json"


def driver_bytes(uid=CLAIM_UID, namespace="vms", request="nic-1", generation=1):
    """A driver's file of the claim ``vm1-devices``: what the controller copies (only that)."""
    meta = {"name": "vm1-devices", "namespace": namespace, "uid": uid, "generation": generation}
    device = {"driver": DRIVER, "pool": "p", "name": "d"}
    body = {
        "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "kind": "DeviceMetadata",
        "metadata": meta,
        "requests": [{"name": request, "devices": [device]}],
    }
    return (json.dumps(body) + "\n").encode()


A_BYTES, B_BYTES = driver_bytes(), driver_bytes(generation=20)  # two lengths: two CDI dirs


class RelayNode:
    """A Node and a relay Pod on it; ``api()`` is the relay with a token bound to that Pod."""

    def __init__(self, kube, name, tmp):
        self.kube, self.name, self.tmp = kube, name, tmp
        self.core = client.CoreV1Api(kube)
        self.pod = f"relay-{name}"

    def publish(self):
        add_node(self.core, self.name)
        body = {
            "metadata": {"name": self.pod, "namespace": SYSTEM},
            "spec": {
                "serviceAccountName": RELAY_SA,
                "nodeName": self.name,
                "containers": [{"name": "relay", "image": "kvdev-host:0.1.0"}],
            },
        }
        self.core.create_namespaced_pod(SYSTEM, body)

    def unpublish(self):
        self.core.delete_namespaced_pod(self.pod, SYSTEM, grace_period_seconds=0)
        self.core.delete_node(self.name)

    def config(self, *, bound=True):
        if bound:
            pod = self.core.read_namespaced_pod(self.pod, SYSTEM)
            ref = {"kind": "Pod", "apiVersion": "v1", "name": self.pod, "uid": pod.metadata.uid}
            body = {"spec": {"expirationSeconds": 3600, "boundObjectRef": ref}}
            made = self.core.create_namespaced_service_account_token(RELAY_SA, SYSTEM, body)
            token = str(made.status.token)
        else:
            token = token_for(self.kube, SYSTEM, RELAY_SA)
        path = self.tmp / f"{self.name}-{'bound' if bound else 'unbound'}.kubeconfig"
        host = self.kube.configuration.host
        return token_kubeconfig(path, host, Path(self.kube.configuration.ssl_ca_cert), token)

    def api(self, *, bound=True):
        return RelayApi(api_client(self.config(bound=bound)))


@pytest.fixture
def nodes(kube, namespace, shipped, tmp_path):
    made = [RelayNode(kube, f"{namespace}-{n}", tmp_path) for n in ("a", "b")]
    for n in made:
        n.publish()
    yield made
    for n in made:
        n.unpublish()
    core = client.CoreV1Api(kube)
    for n in made:
        core.delete_collection_namespaced_config_map(SYSTEM, label_selector=node_selector(n.name))


def cdi_dir(tmp, data):
    """A CDI directory with one metadata spec of the example claim's nic-1 (``data``)."""
    cdi, file = tmp / f"cdi-{len(data)}", tmp / f"file-{len(data)}.json"
    cdi.mkdir()
    file.write_bytes(data)
    mount = {
        "hostPath": str(file),
        "containerPath": f"{ROOT}/resourceclaims/vm1-devices/nic-1/{DRIVER}-metadata.json",
    }
    spec = {
        "cdiVersion": "0.5.0",
        "kind": f"{DRIVER}/metadata",
        "devices": [{"name": f"{CLAIM_UID}_nic-1", "containerEdits": {"mounts": [mount]}}],
    }
    (cdi / f"{DRIVER}_metadata_{CLAIM_UID}_nic-1.json").write_text(json.dumps(spec))
    return cdi


def policy_in_force(kube, relay, node):
    """Wait until the relay's admission policy refuses a record naming ``node``: a policy
    reaches the API server's admission through its informers, a moment after it is written.
    A probe admitted before that (another claim's record) is deleted again."""
    probe = DriverFile("0badc0de-0000-4000-8000-000000000001", "p", DRIVER, b"{}", "/x.json")
    ((body,), _) = records(node, SYSTEM, [probe])

    def refusing():
        try:
            relay.create(SYSTEM, body)
        except PermanentError as e:
            return "may write only records of its own" in str(e)
        client.CoreV1Api(kube).delete_namespaced_config_map(body["metadata"]["name"], SYSTEM)
        return False

    wait_for("the relay's admission policy in force", refusing)


def refused(call):
    with pytest.raises(PermanentError) as e:
        call()
    return str(e.value)


def test_a_nodes_relay_writes_only_its_own_nodes_records(kube, namespace, nodes, tmp_path):
    a, b = nodes
    done = Relay(a.api(), a.name, SYSTEM, [cdi_dir(tmp_path, A_BYTES)], [tmp_path]).sync()
    assert (done.created, done.failed) == (1, 0)
    (record_a,) = a.api().list(SYSTEM, node_selector(a.name))

    as_b = b.api()
    policy_in_force(kube, as_b, a.name)
    f = DriverFile(CLAIM_UID, "nic-1", DRIVER, b'{"forged": true}', "/etc/cdi/x.json")
    (forged,), _ = records(a.name, SYSTEM, [f])  # names node A
    assert "may write only records of its own" in refused(lambda: as_b.create(SYSTEM, forged))
    takeover = copy.deepcopy(record_a)
    takeover["data"] = forged["data"]
    assert "may write only records of its own" in refused(lambda: as_b.replace(SYSTEM, takeover))
    moved = copy.deepcopy(record_a)
    moved["metadata"]["annotations"]["kvdev.io/node"] = b.name
    assert "may write only records of its own" in refused(lambda: as_b.replace(SYSTEM, moved))
    gone = record_a["metadata"]["name"]
    assert "may write only records of its own" in refused(lambda: as_b.delete(SYSTEM, gone))

    # Not a record: the namespace's other ConfigMaps are not the relay's to write.
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"x-{namespace}"}}
    assert "only relay records" in refused(lambda: as_b.create(SYSTEM, plain))
    # A VMI's ConfigMap, in its own namespace: RBAC grants nothing there.
    vmi_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kvdev-vm1"}}
    assert "answered 403" in refused(lambda: as_b.create(namespace, vmi_cm))
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api_client(b.config())).list_namespaced_config_map(namespace)
    assert e.value.status == 403
    # A token bound to no node writes nothing.
    unbound = b.api(bound=False)
    own = records(b.name, SYSTEM, [f])[0][0]
    assert "no node in the request's credentials" in refused(lambda: unbound.create(SYSTEM, own))

    # Node B's own record of the claim is accepted, and changes nothing for a VMI on node A.
    done = Relay(as_b, b.name, SYSTEM, [cdi_dir(tmp_path, B_BYTES)], [tmp_path]).sync()
    assert (done.created, done.failed) == (1, 0)
    stored = client.CoreV1Api(kube).list_namespaced_config_map(
        SYSTEM, label_selector="app.kubernetes.io/managed-by=kvdev-host-relay"
    )
    raws = [client.ApiClient().sanitize_for_serialization(i) for i in stored.items]
    assert data_for_vmi_on(a.name, raws)[NIC1].encode() == A_BYTES
    assert data_for_vmi_on(b.name, raws)[NIC1].encode() == B_BYTES


def data_for_vmi_on(node, relay_configmaps):
    """The example VMI's ConfigMap data were it on ``node``, with these records in store."""
    objects = []
    for name in ("claims.yaml", "slices.yaml", "vmi.yaml"):
        for doc in yaml.safe_load_all((HOST / name).read_text()):
            objects.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    kinds = {
        "VirtualMachineInstance": Kind.VMI,
        "Pod": Kind.POD,
        "ResourceClaim": Kind.CLAIM,
        "ResourceSlice": Kind.SLICE,
    }
    index = Index(relay_namespace=SYSTEM)
    for o in objects:
        if o["kind"] in ("VirtualMachineInstance", "Pod"):
            o.setdefault("status", {})["nodeName"] = node
            o["spec"]["nodeName"] = node if o["kind"] == "Pod" else o["spec"].get("nodeName")
        index.upsert(kinds[o["kind"]], parse(kinds[o["kind"]], o))
    for raw in relay_configmaps:
        index.upsert(Kind.CONFIGMAP, parse(Kind.CONFIGMAP, raw))
    inputs = index.inputs(("vms", "vm1"))
    assert inputs is not None
    return render(inputs).data


def test_the_live_controller_copies_the_vmis_nodes_record(
    kube, controller_config, namespace, nodes, tmp_path
):
    a, b = nodes
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "vm1-devices", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "x"}}]}},
    }
    (made,) = apply(kube, [claim])
    uid = made.metadata.uid
    result = {"request": "nic", "driver": DRIVER, "pool": "p", "device": "d"}  # in no slice
    allocation = {"devices": {"results": [result]}}
    client.ResourceV1Api(kube).patch_namespaced_resource_claim_status(
        "vm1-devices", namespace, {"status": {"allocation": allocation}}
    )
    apply(kube, [minimal_vmi("vm1", namespace)])
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstances", "vm1",
        {"status": {"nodeName": a.name, "phase": "Running"}},
    )  # fmt: skip
    a_bytes = driver_bytes(uid, namespace, "nic")
    for node, data in ((b, driver_bytes(uid, namespace, "nic", 2)), (a, a_bytes)):
        f = DriverFile(uid, "nic", DRIVER, data, "/etc/cdi/x.json")
        node.api().create(SYSTEM, records(node.name, SYSTEM, [f])[0][0])
    core = client.CoreV1Api(kube)
    key = f"vm1-devices.nic.{DRIVER}-metadata.json"
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": "ctl-relay"}
    args = ("controller", "--kubeconfig", str(controller_config))
    with kvdev_host(tmp_path / "controller.log", *args, env=env) as ctl:

        def copied():
            assert ctl.alive(), ctl.text()
            found = core.list_namespaced_config_map(
                namespace, field_selector="metadata.name=kvdev-vm1"
            ).items
            return found if found and (found[0].data or {}).get(key) == a_bytes.decode() else None

        (cm,) = wait_for("node A's bytes in kvdev-vm1", copied)
    assert json.loads(cm.metadata.annotations["kvdev.io/sources"]) == {key: "driver"}
    assert json.loads(cm.data["kvdev-sources.json"])["sources"] == {key: "driver"}
    assert refusals(ctl.text()) == []
