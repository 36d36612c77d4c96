"""The live controller and the node relay's records: a record of the VMI's node wins, at once.

A record appearing, changing and going away (on the API double, through the real client and
the controller's one ConfigMap watch) moves the VMI's key to the driver's bytes, to the new
bytes, and back to the reconstruction; a record of another node, or outside the relay's
namespace, never reaches the VMI.
"""

from __future__ import annotations

import json

import pytest
from test_controller_live import NIC1, Running, configmap, example_objects, kubeconfig, until

from apidouble import ApiDouble
from kvdev.host.contract import HINTS_KEY
from kvdev.host.controller.guests import decode
from kvdev.host.controller.index import Index, Kind, parse
from kvdev.host.controller.render import render
from kvdev.host.kube.wire import KubeApi
from kvdev.host.publish.relayed import records
from kvdev.host.relay.finder import DriverFile

CLAIM_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"  # vm1-devices, the example's
DRIVER_BYTES = json.dumps(  # the driver's own file: a DeviceMetadata of that claim and request
    {
        "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "kind": "DeviceMetadata",
        "metadata": {"name": "vm1-devices", "namespace": "vms", "uid": CLAIM_UID},
        "requests": [
            {"name": "nic-1", "devices": [{"driver": "sriov.example.com", "name": "vf-1"}]}
        ],
    }
)


@pytest.fixture
def double():
    api = ApiDouble(bookmark_seconds=0.1)
    api.start()
    for obj in example_objects():
        api.put(obj)
    yield api
    api.stop()


@pytest.fixture
def api(double, tmp_path):
    return KubeApi.connect(kubeconfig(tmp_path / "kubeconfig", double.url))


def record(node, namespace="kvdev-system", text=DRIVER_BYTES):
    f = DriverFile(CLAIM_UID, "nic-1", "sriov.example.com", text.encode(), "/etc/cdi/x.json")
    (body,), _ = records(node, namespace, [f])
    return body


def sources(cm):
    return json.loads(cm["metadata"]["annotations"]["kvdev.io/sources"])


def test_a_record_of_the_vmis_node_wins_and_its_removal_restores_the_reconstruction(double, api):
    with Running(api, resync=3600, relay_namespace="kvdev-system") as controller:
        until(lambda: configmap(double) is not None, "the ConfigMap exists")
        until(controller.idle.is_set, "idle")
        rebuilt = configmap(double)["data"][NIC1]
        assert sources(configmap(double))[NIC1] == "reconstructed"

        for foreign in (record("node-b"), record("node-a", namespace="vms")):
            double.put(foreign)
        own = double.put(record("node-a"))
        until(lambda: configmap(double)["data"][NIC1] == DRIVER_BYTES, "the driver's bytes")
        assert sources(configmap(double))[NIC1] == "driver"
        assert "kvdev-sources.json" in configmap(double)["data"]  # for the guest, too

        changed = record("node-a", text=DRIVER_BYTES + "\n")
        changed["metadata"]["resourceVersion"] = own["metadata"]["resourceVersion"]
        double.put(changed)
        until(lambda: configmap(double)["data"][NIC1] == DRIVER_BYTES + "\n", "the new bytes")

        double.delete("v1", "ConfigMap", "kvdev-system", own["metadata"]["name"])
        until(lambda: configmap(double)["data"][NIC1] == rebuilt, "the reconstruction again")
        assert sources(configmap(double))[NIC1] == "reconstructed"
        assert "kvdev-sources.json" not in configmap(double)["data"]


def test_records_are_read_only_in_the_relay_namespace_and_no_foreign_data_is_cached(double, api):
    """A tenant's relay-labelled ConfigMaps are never listed or watched; a ConfigMap with the
    controller's label that is not of its shape is cached without its data."""
    big = "x" * 4096
    for n in range(5):
        tenant = record("node-a", namespace="tenant")
        tenant["metadata"]["name"] = f"flood-{n}"
        tenant["data"] = {"filler": big}
        double.put(tenant)
    double.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "imitation",
                "namespace": "tenant",
                "labels": {"app.kubernetes.io/managed-by": "kvdev-host-controller"},
            },
            "data": {"filler": big},
        }
    )
    double.put(record("node-a"))  # the relay's own: a record
    with Running(api, resync=3600, relay_namespace="kvdev-system") as controller:
        until(lambda: configmap(double) is not None, "the ConfigMap exists")
        until(controller.idle.is_set, "idle")
        index = controller.index
        records_cached = index.count(Kind.RECORD)
        own_record = index.get(Kind.RECORD, ("kvdev-system", record("node-a")["metadata"]["name"]))
        imitation = index.get(Kind.CONFIGMAP, ("tenant", "imitation"))
        own = index.get(Kind.CONFIGMAP, ("vms", "kvdev-vm1"))
    listed = [r for r in double.requests if r.method == "GET" and r.path.endswith("/configmaps")]
    paths = sorted({r.path for r in listed})
    print(f"ConfigMap list/watch paths: {paths}")
    assert records_cached == 1
    assert own_record is not None
    for r in listed:
        selector = r.query.get("labelSelector", "")
        if "kvdev-host-relay" in selector:
            assert r.path == "/api/v1/namespaces/kvdev-system/configmaps", r
    assert imitation is not None
    assert imitation.partial
    assert "data" not in imitation.raw
    assert own is not None
    assert own.raw["data"]  # its own: what the update decides on


def test_a_relayed_stream_is_decoded_from_its_text_not_from_a_document():
    index = Index(relay_namespace="kvdev-system")
    objects = [*example_objects(), record("node-a")]
    kinds = {o["kind"] for o in objects}
    for kind in Kind:
        if kind is Kind.CONFIGMAP or kind.kind not in kinds:
            continue
        index.replace(kind, [parse(kind, o) for o in objects if o["kind"] == kind.kind])
    index.replace(Kind.RECORD, [parse(Kind.RECORD, record("node-a"))])
    vmi = next(o for o in objects if o["kind"] == "VirtualMachineInstance")
    inputs = index.inputs((vmi["metadata"]["namespace"], vmi["metadata"]["name"]))
    result = render(inputs)
    assert result.data[NIC1] == DRIVER_BYTES
    assert NIC1 not in result.documents  # the driver's bytes: only their text says what they are
    assert HINTS_KEY in result.documents
    assert decode(result.data, result.documents) == decode(result.data)
