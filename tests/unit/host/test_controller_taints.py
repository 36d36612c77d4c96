"""Device taints reach the guest: the controller puts each allocated device's taints, and what
tolerates them, in the sources index; the agent's ``kvdev explain`` shows them."""

import copy

from test_controller_render import by_kind, docs, rendered

from kvdev.guest.core.matching import match
from kvdev.guest.core.observed import NetState
from kvdev.guest.core.planning import plan
from kvdev.guest.core.status import MetadataState, summarize
from kvdev.guest.views.encode import device_json
from kvdev.guest.views.tables import explain_text
from kvdev.schema import Role, check_file, metadata_location
from kvdev.schema.origins import SOURCES_KEY, read_index

KEY = "vm1-devices.nic-1.sriov.example.com-metadata.json"
GPU_KEY = "vm1-devices.gpu.gpu.nvidia.com-metadata.json"


def tainted():
    objects = copy.deepcopy(docs())
    sriov = by_kind(objects, "ResourceSlice", "node-a-sriov.example.com-x1")
    vf1 = next(d for d in sriov["spec"]["devices"] if d["name"] == "vf-1")
    vf1["taints"] = [{"key": "example.com/maintenance", "value": "soon", "effect": "NoExecute"}]
    gpu = by_kind(objects, "ResourceSlice", "node-a-gpu.nvidia.com-k2")
    gpu["spec"]["devices"][0]["taints"] = [{"key": "example.com/broken", "effect": "NoExecute"}]
    claim = by_kind(objects, "ResourceClaim", "vm1-devices")
    claim["status"]["allocation"]["devices"]["results"][0]["tolerations"] = [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
    ]
    return objects


def test_the_index_carries_each_allocated_devices_taints_and_toleration():
    result = rendered(tainted())
    origins, problem = read_index(result.data[SOURCES_KEY].encode(), SOURCES_KEY)
    assert problem is None
    tolerated = (
        "example.com/maintenance=soon:NoExecute: tolerated by "
        "example.com/maintenance (Exists), NoExecute"
    )
    assert origins.taints_of(KEY, "node-a", "vf-1") == (tolerated,)
    evicted = (
        "example.com/broken:NoExecute: NOT tolerated: the pods using it "
        "(the VM's launcher pod) are evicted"
    )
    assert origins.taints_of(GPU_KEY, "node-a", "gpu-vfio-0") == (evicted,)
    assert origins.taints_of(KEY, "node-a", "vf-2") == ()
    assert set(origins.sources.values()) <= {"reconstructed"}  # no driver's file: all rebuilt


def test_without_taints_or_a_drivers_file_no_index_is_written():
    assert SOURCES_KEY not in rendered(docs()).data


def test_explain_shows_the_taints():
    body = {
        "ref": "vm1-devices/nic-1/sriov.example.com/node-a/vf-1",
        "phase": "Configured",
        "taints": ["example.com/maintenance=soon:NoExecute: tolerated by x (Exists), NoExecute"],
    }
    assert "  taints:     example.com/maintenance=soon:NoExecute: tolerated by" in explain_text(
        body
    )


def test_the_agents_status_gives_each_device_its_taints():
    data = rendered(tainted()).data
    origins, _ = read_index(data[SOURCES_KEY].encode(), SOURCES_KEY)
    read = check_file(
        KEY,
        Role.DEVICE_METADATA,
        data[KEY].encode(),
        metadata_location("resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"),
        stream_key=True,
    )
    matching = match(read.described, ())
    status = summarize(
        matching, plan(matching, NetState(())), (), MetadataState(origins=origins), reconcile=1
    )
    (device,) = status.devices
    assert device_json(device)["taints"] == list(origins.taints_of(KEY, "node-a", "vf-1"))
