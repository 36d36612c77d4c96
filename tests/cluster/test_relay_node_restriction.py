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
from kvdev.host import contract
from kvdev.host.contract import node_selector
from kvdev.host.controller.index import Index, Kind, parse
from kvdev.host.controller.render import render
from kvdev.host.kube.client import api_client
from kvdev.host.kube.wire import KubeApi
from kvdev.host.publish import relayed
from kvdev.host.publish.relayed import records
from kvdev.host.relay.finder import DriverFile, Found
from kvdev.host.relay.live import Relay
from kvdev.schema.tree import ROOT

RELAY_SA = "kvdev-host-relay"
REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "packaging" / "examples" / "host"
CLAIM_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"  # the example's vm1-devices
OTHER_UID = "0b6f4c3e-91d4-4d2a-8f55-6a7e2c1d9b30"
THIRD_UID = "3f1e2d4c-5b6a-4978-8a9b-0c1d2e3f4a5b"
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
        # A name past 63 characters is no label value: the hostname label is a shorter name.
        add_node(self.core, self.name, {"kubernetes.io/hostname": contract.node_label(self.name)})
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
        return KubeApi(api_client(self.config(bound=bound)))


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
            relay.create_configmap(SYSTEM, body)
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
    (record_a,) = a.api().list_configmaps(SYSTEM, node_selector(a.name))

    as_b = b.api()
    policy_in_force(kube, as_b, a.name)
    f = DriverFile(CLAIM_UID, "nic-1", DRIVER, b'{"forged": true}', "/etc/cdi/x.json")
    (forged,), _ = records(a.name, SYSTEM, [f])  # names node A
    assert "may write only records of its own" in refused(
        lambda: as_b.create_configmap(SYSTEM, forged)
    )
    takeover = copy.deepcopy(record_a)
    takeover["data"] = forged["data"]
    assert "may write only records of its own" in refused(
        lambda: as_b.replace_configmap(SYSTEM, takeover)
    )
    moved = copy.deepcopy(record_a)
    moved["metadata"]["annotations"]["kvdev.io/node"] = b.name
    assert "may write only records of its own" in refused(
        lambda: as_b.replace_configmap(SYSTEM, moved)
    )
    gone = record_a["metadata"]["name"]
    assert "may write only records of its own" in refused(
        lambda: as_b.delete_configmap(SYSTEM, gone)
    )

    # Not a record: the namespace's other ConfigMaps are not the relay's to write.
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"x-{namespace}"}}
    assert "only relay records" in refused(lambda: as_b.create_configmap(SYSTEM, plain))
    # A VMI's ConfigMap, in its own namespace: RBAC grants nothing there.
    vmi_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kvdev-vm1"}}
    assert "answered 403" in refused(lambda: as_b.create_configmap(namespace, vmi_cm))
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api_client(b.config())).list_namespaced_config_map(namespace)
    assert e.value.status == 403
    # A token bound to no node writes nothing.
    unbound = b.api(bound=False)
    own = records(b.name, SYSTEM, [f])[0][0]
    assert "no node in the request's credentials" in refused(
        lambda: unbound.create_configmap(SYSTEM, own)
    )

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
        index.upsert(Kind.RECORD, parse(Kind.RECORD, raw))
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
        node.api().create_configmap(SYSTEM, records(node.name, SYSTEM, [f])[0][0])
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


# --------------------------------------------------------------------------- names and labels


def forged_as(body, *, name=None, label=None, node=None):
    """``body`` with its name, node label or node annotation changed."""
    forged = copy.deepcopy(body)
    if name is not None:
        forged["metadata"]["name"] = name
    if label is not None:
        forged["metadata"]["labels"][contract.NODE_LABEL] = label
    if node is not None:
        forged["metadata"]["annotations"][contract.NODE_ANNOTATION] = node
    return forged


def test_a_node_cannot_take_another_nodes_record_name_or_label(kube, nodes):
    """Node B's token, writing a record annotated with its own node, is refused when the name
    or the node label is node A's (or of the earlier name form); node B's own is admitted."""
    a, b = nodes
    as_b = b.api()
    policy_in_force(kube, as_b, a.name)
    f = DriverFile(CLAIM_UID, "nic-1", DRIVER, b'{"forged": true}', "/etc/cdi/x.json")
    (own_b,), _ = records(b.name, SYSTEM, [f])
    (of_a,), _ = records(a.name, SYSTEM, [f])
    named_a = forged_as(own_b, name=of_a["metadata"]["name"])  # annotation and label: B
    labelled_a = forged_as(own_b, label=contract.node_label(a.name))
    old_form = forged_as(own_b, name=f"kvdev-relay-{CLAIM_UID}-0123456789")
    other_uid = forged_as(own_b, name=contract.record_name(b.name, OTHER_UID))
    for forged in (named_a, labelled_a, old_form, other_uid):
        message = refused(lambda forged=forged: as_b.create_configmap(SYSTEM, forged))
        assert f"the relay on node '{b.name}' may write only records of its own" in message
    assert f"not {of_a['metadata']['name']}" in refused(
        lambda: as_b.create_configmap(SYSTEM, named_a)
    )
    stored = as_b.create_configmap(SYSTEM, own_b)
    relabel = forged_as(stored, label=contract.node_label(a.name))
    assert "may write only records of its own" in refused(
        lambda: as_b.replace_configmap(SYSTEM, relabel)
    )
    as_b.delete_configmap(SYSTEM, own_b["metadata"]["name"])


def test_a_nodes_relay_publishes_past_a_record_of_another_node_holding_its_name(
    kube, nodes, tmp_path, caplog
):
    """Records an earlier version's policy admitted (written here as the administrator): one
    named and labelled as node A's claim but of node B, one holding the name of node A's
    other claim without a label; and node A's own record of the earlier name form. Node A's
    relay publishes its third claim, deletes its old-form record, reports both taken names
    (naming both nodes) and touches neither of node B's."""
    a, b = nodes
    core = client.CoreV1Api(kube)
    uids = (CLAIM_UID, OTHER_UID, THIRD_UID)
    files = [DriverFile(u, "nic-1", DRIVER, A_BYTES, "/etc/cdi/x.json") for u in uids]
    made = records(a.name, SYSTEM, files)[0]
    own = {r["metadata"]["labels"][contract.CLAIM_UID_LABEL]: r for r in made}
    listed_b = forged_as(own[CLAIM_UID], node=b.name)
    listed_b["data"] = {f"nic-1.{DRIVER}-metadata.json": '{"forged": true}'}
    unlabelled_b = forged_as(own[OTHER_UID], node=b.name)
    del unlabelled_b["metadata"]["labels"][contract.NODE_LABEL]
    old_form = forged_as(own[THIRD_UID], name=f"kvdev-relay-{THIRD_UID}-0123456789")
    for body in (listed_b, unlabelled_b, old_form):
        core.create_namespaced_config_map(SYSTEM, body)
    try:
        relay = Relay(a.api(), a.name, SYSTEM, [], finder=lambda *_: Found(files, claims=set(uids)))
        with caplog.at_level("WARNING", "kvdev.host.relay"):
            done = relay.sync()
        assert (done.created, done.taken, done.legacy, done.failed) == (1, 2, 1, 0)
        taken = [r.getMessage() for r in caplog.records if "is taken by" in r.getMessage()]
        assert len(taken) == 2
        assert all(f"'{a.name}'" in t and f"'{b.name}'" in t for t in taken)
        for body in (listed_b, unlabelled_b):
            name = body["metadata"]["name"]
            assert core.read_namespaced_config_map(name, SYSTEM).data == body["data"]
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_config_map(old_form["metadata"]["name"], SYSTEM)
        assert gone.value.status == 404
        (mine,) = [
            o
            for o in a.api().list_configmaps(SYSTEM, node_selector(a.name))
            if relayed.read_record(o)
        ]
        assert mine["metadata"]["name"] == contract.record_name(a.name, THIRD_UID)
        again = relay.sync()
        assert (again.created, again.updated, again.deleted, again.taken) == (0, 0, 0, 2)
    finally:
        for body in (listed_b, unlabelled_b):
            core.delete_namespaced_config_map(body["metadata"]["name"], SYSTEM)


@pytest.fixture
def long_nodes(kube, namespace, shipped, tmp_path):
    """Nodes whose names the policy's CEL cuts or whose names fill a record name: two of 72
    characters that share their first 63 (a '-' at the 63rd: the label is their first 62),
    and one of exactly ``NODE_NAME_MAX`` (204)."""
    stem = f"{namespace}-" + "n" * (62 - len(namespace) - 1)
    longest = (f"{namespace}-" + ("l" * 60 + ".") * 4)[: contract.NODE_NAME_MAX - 1] + "l"
    made = [RelayNode(kube, n, tmp_path) for n in (f"{stem}-one-1234", f"{stem}-two-1234", longest)]
    for n in made:
        n.publish()
    yield made
    for n in made:
        n.unpublish()
    core = client.CoreV1Api(kube)
    core.delete_collection_namespaced_config_map(
        SYSTEM, label_selector=f"{contract.CLAIM_UID_LABEL}={CLAIM_UID}"
    )


def test_the_policy_admits_the_names_and_labels_python_makes_for_long_node_names(kube, long_nodes):
    """The CEL's cut of a long node name is Python's (the label), a 204-character node fills a
    253-character name, and a relay never trusts nor deletes the record of another node that
    shares its label."""
    one, two, longest = long_nodes
    assert len(longest.name) == contract.NODE_NAME_MAX
    assert contract.node_label(one.name) == contract.node_label(two.name) == one.name[:62]
    f = DriverFile(CLAIM_UID, "nic-1", DRIVER, A_BYTES, "/etc/cdi/x.json")
    policy_in_force(kube, two.api(), one.name)
    for node in (two, longest, one):
        done = Relay(
            node.api(), node.name, SYSTEM, [], finder=lambda *_: Found([f], claims={CLAIM_UID})
        ).sync()
        assert (done.created, done.failed, done.taken) == (1, 0, 0), node.name
    stored = client.CoreV1Api(kube).list_namespaced_config_map(
        SYSTEM, label_selector=f"{contract.CLAIM_UID_LABEL}={CLAIM_UID}"
    )
    names = sorted(cm.metadata.name for cm in stored.items)
    assert names == sorted(contract.record_name(n.name, CLAIM_UID) for n in long_nodes)
    assert len(contract.record_name(longest.name, CLAIM_UID)) == 253
    # Node one's claim is gone: its relay deletes its own record, never node two's.
    done = Relay(one.api(), one.name, SYSTEM, [], finder=lambda *_: Found()).sync()
    assert (done.deleted, done.failed) == (1, 0)
    left = one.api().list_configmaps(SYSTEM, node_selector(one.name))
    assert [o["metadata"]["name"] for o in left] == [contract.record_name(two.name, CLAIM_UID)]
