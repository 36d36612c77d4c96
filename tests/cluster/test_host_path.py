"""The whole host path on the real control plane, with the controller as its ServiceAccount.

A DeviceClass and a ResourceSlice published as objects; a virt-launcher pod with a claim and a
ResourceClaimTemplate, its template claim made by the real ResourceClaim controller and both
allocated by the real kube-scheduler's DRA plugin on a kubelet-less Node; the VMI using them;
``kvdev-<vmi>`` rendered (the VMI's pod network named as a protected NIC); the driver's
``status.devices`` network data changed -> the ConfigMap follows; the claim re-created under
the same name -> its stream's generation restarts at 1; the VMI deleted -> the real garbage
collector deletes the ConfigMap.
"""

import hashlib
import json

import pytest
from clusterlab import SYSTEM, kvdev_host, refusals, wait_for

from kvdev.host.contract import configmap_name, vmi_label


@pytest.fixture
def controller(controller_config, tmp_path):
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": "ctl-host-path"}
    args = ("controller", "--kubeconfig", str(controller_config), "--leader-elect")
    with kvdev_host(tmp_path / "controller.log", *args, env=env) as ctl:
        yield ctl
    assert refusals(ctl.text()) == []


def test_the_whole_host_path(world, controller, capsys):
    world.claim()
    world.template()
    vmi = world.vmi()
    pod = world.launcher(vmi)
    pod, claims = world.scheduled(pod.metadata.name)
    assert pod.spec.node_name == world.node
    for claim in claims.values():
        (result,) = claim.status.allocation.devices.results
        assert (result.driver, result.pool) == (world.driver, f"{world.node}-vfs")
    # virt-handler's part: the VMI runs on the pod's node
    world.custom.patch_namespaced_custom_object(
        "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1",
        {"status": {"nodeName": world.node, "phase": "Running", "interfaces": [
            {"name": "default", "mac": "52:54:00:12:34:56", "interfaceName": "eth0"},
            {"name": "data0", "mac": "02:00:00:3b:02:01"},
        ]}},
    )  # fmt: skip
    devices_key = f"vm1-devices.nic-1.{world.driver}-metadata.json"
    fast_key = f"fast-nic.nic.{world.driver}-metadata.json"

    def rendered():
        assert controller.alive(), controller.text()
        cm = world.configmap()
        return cm if cm is not None and {devices_key, fast_key} <= set(cm.data or {}) else None

    cm = wait_for("kvdev-vm1 with both claims' streams", rendered)
    assert set(cm.data) == {devices_key, fast_key, "guest-hints.json"}
    (owner,) = cm.metadata.owner_references
    assert (owner.uid, owner.controller, owner.block_owner_deletion) == (
        vmi.metadata.uid,
        True,
        True,
    )
    first = world.stream(devices_key, cm)
    assert first["metadata"]["uid"] == claims["devices"].metadata.uid
    assert first["metadata"]["generation"] == 1
    hints = json.loads(cm.data["guest-hints.json"])
    by_request = {h["request"]: h.get("guest", {}) for h in hints["devices"]}
    # a DRA SR-IOV interface's macAddress is not KubeVirt's to give: only its tag is a hint
    assert by_request["nic-1"] == {"tag": "data0"}
    assert "02:00:00:3b:02:01" not in json.dumps(hints)
    # the VMI's own interface (its pod network) is a NIC the guest agent never touches
    assert hints["protectedNICs"] == [{"macAddress": "52:54:00:12:34:56"}]

    # The driver reports the NIC's network data: the ConfigMap follows (generation 2).
    world.report_network(claims["devices"], "10.1.0.5/24")
    followed = world.stream_with("10.1.0.5/24")
    assert followed["metadata"]["generation"] == 2

    # The claim re-created under the same name (the launcher pod replaced): generation 1 again.
    world.core.delete_namespaced_pod(pod.metadata.name, world.ns, grace_period_seconds=0)
    world.resource.delete_namespaced_resource_claim("vm1-devices", world.ns)

    def gone():
        names = {
            c.metadata.name for c in world.resource.list_namespaced_resource_claim(world.ns).items
        }
        return "vm1-devices" not in names

    wait_for("the old claim deleted (reservation lifted by the ResourceClaim controller)", gone)
    again = world.claim()
    assert again.metadata.uid != claims["devices"].metadata.uid
    world.scheduled(world.launcher(vmi, suffix="fghij").metadata.name)
    restarted = wait_for(
        "the new claim's stream",
        lambda: (
            (s := world.stream(devices_key)) and s["metadata"]["uid"] == again.metadata.uid and s
        ),
    )
    assert restarted["metadata"]["generation"] == 1

    # The VMI deleted: the real garbage collector deletes its ConfigMap.
    world.custom.delete_namespaced_custom_object(
        "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1"
    )
    wait_for("the garbage collector deletes kvdev-vm1", lambda: world.configmap() is None)


def test_vmi_names_at_the_length_limit_get_valid_distinct_configmaps(world, controller):
    """253 characters (the most a VMI name may have): kvdev-<name> would be 259; the real API
    server accepts the derived names, and two names sharing 252 characters stay apart."""
    names = ["v" * 252 + "1", "v" * 252 + "2"]
    for name in names:
        world.vmi(name)
    expected = {configmap_name(n) for n in names}

    def both():
        assert controller.alive(), controller.text()
        return expected <= {
            c.metadata.name for c in world.core.list_namespaced_config_map(world.ns).items
        }

    wait_for("both ConfigMaps", both)
    for name in names:
        cm = world.configmap(configmap_name(name))
        assert len(cm.metadata.name) == 253
        assert cm.metadata.owner_references[0].name == name
        assert cm.metadata.labels["kvdev.io/vmi"] == vmi_label(name)


def test_vmi_names_that_once_shared_a_configmap_each_get_their_own(world, controller):
    """A 253-character name was cut to ``kvdev-<242 characters>-<hash>``, which is also
    ``kvdev-`` and a 247-character name: the two VMIs then took turns at one ConfigMap. Now
    each has its own, and neither's sync rewrites the other's."""
    long = "v" * 253
    whole = f"kvdev-{long}"
    old = f"{whole[:242].rstrip('-._')}-{hashlib.sha256(whole.encode()).hexdigest()[:10]}"
    short = old.removeprefix("kvdev-")  # 247 characters: its ConfigMap was exactly ``old``
    assert len(short) == 247
    assert configmap_name(short) == old
    assert configmap_name(long) != old
    vmis = {name: world.vmi(name) for name in (long, short)}

    def both():
        assert controller.alive(), controller.text()
        found = {n: world.configmap(configmap_name(n)) for n in vmis}
        return found if all(found.values()) else None

    found = wait_for("a ConfigMap for each VMI", both)
    versions = {}
    for name, cm in found.items():
        (owner,) = cm.metadata.owner_references
        assert (owner.name, owner.uid) == (name, vmis[name].metadata.uid)
        hints = json.loads(cm.data["guest-hints.json"])
        assert hints["metadata"]["name"] == name
        versions[name] = cm.metadata.resource_version
    # both VMIs synced again (a label each), then a third one after them: nothing rewritten
    for name in vmis:
        world.custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", world.ns, "virtualmachineinstances", name,
            {"metadata": {"labels": {"resynced": "yes"}}},
        )  # fmt: skip
    world.vmi("after")
    wait_for("the later VMI's ConfigMap", lambda: world.configmap(configmap_name("after")))
    for name, vmi in vmis.items():
        cm = world.configmap(configmap_name(name))
        assert cm.metadata.resource_version == versions[name]
        assert cm.metadata.owner_references[0].uid == vmi.metadata.uid
