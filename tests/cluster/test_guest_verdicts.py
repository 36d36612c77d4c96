"""Whether a guest applied its NICs, on the real control plane: a VMI whose status carries
guest-agent interfaces (as virt-handler writes them) is judged by the live controller
(``--guest-grace 0``): the ``kvdev.io/guest`` annotation on its ConfigMap, a
``GuestNICDiffers`` Event when an address goes missing from the guest's report, the
``kvdev_controller_guest_*`` metrics, and ``kvdev-host guests`` with the controller's own
ServiceAccount token. The VMI's status is only ever written here, by the test (KubeVirt's part).
"""

import json
import subprocess

from clusterlab import KVDEV_HOST, wait_for
from kubernetes import client
from test_controller_operations import base_url, get, scrape, served, value, vmi_events

DATA0_MAC = "02:00:00:3b:02:01"  # the VMI's data0 macAddress: KubeVirt reports it (domain)
FAST_MAC = "02:00:00:07:00:01"


def interfaces(data0_ips):
    """status.interfaces[] as virt-handler merges the guest agent's answer into the domain's."""
    return [
        {"name": "default", "mac": "02:00:00:00:00:0a", "infoSource": "domain, guest-agent",
         "interfaceName": "enp1s0", "ipAddresses": ["10.0.2.2"]},
        {"name": "data0", "mac": DATA0_MAC, "infoSource": "domain, guest-agent",
         "interfaceName": "data0", "ipAddresses": data0_ips},
        {"name": "fast", "mac": FAST_MAC, "infoSource": "domain, guest-agent",
         "interfaceName": "fast0", "ipAddresses": []},
    ]  # fmt: skip


def annotation(world):
    cm = world.configmap()
    return ((cm.metadata.annotations or {}) if cm else {}).get("kvdev.io/guest")


def guests(config, world):
    """``kvdev-host guests -n NS vm1 -o json`` with the controller's token: exit, document."""
    argv = [str(KVDEV_HOST), "guests", "--kubeconfig", str(config), "-n", world.ns, "vm1"]
    done = subprocess.run([*argv, "-o", "json"], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_vmis_guest_agent_status_is_judged_annotated_evented_and_counted(
    world, controller_config, tmp_path, capsys
):
    core = client.CoreV1Api(world.kube)
    with served(
        controller_config, tmp_path, "ctl-guests", "--no-leader-elect", "--guest-grace", "0"
    ) as ctl:
        url = base_url(ctl)
        wait_for("/readyz 200", lambda: get(url, "/readyz") == (200, "ok\n"))
        vmi, _, claims = world.running()
        world.report_network(claims["devices"], "10.6.6.6/24")
        world.stream_with("10.6.6.6/24", "the claim's network data")
        status = {
            "status": {
                "nodeName": world.node,
                "phase": "Running",
                "conditions": [{"type": "AgentConnected", "status": "True"}],
                "interfaces": interfaces(["10.6.6.6", "fe80::1"]),
            }
        }
        world.custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1", status
        )
        applied = wait_for(
            "the annotation says Applied",
            lambda: (a := annotation(world)) == "Applied: 2/2 Applied" and a,
        )
        rc, doc = guests(controller_config, world)
        assert rc == 0
        (judged,) = doc["vmis"]
        nics = {n["nic"]: n for n in judged["nics"]}
        assert {k: n["state"] for k, n in nics.items()} == {"data0": "Applied", "fast": "Applied"}
        assert nics["data0"]["macFrom"] == "VMI status"  # SR-IOV: no MAC in the hints
        assert judged["annotation"] == applied

        status["status"]["interfaces"] = interfaces(["fe80::1"])  # the address is gone
        world.custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1", status
        )
        differs = wait_for(
            "the annotation says Differs",
            lambda: (a := annotation(world)) and a.startswith("Differs") and a,
        )
        assert (
            differs
            == "Differs: 1/2 Applied, 1 Differs (data0: 10.6.6.6/24 not on the guest's data0)"
        )

        def evented():
            return [
                e
                for e in vmi_events(core, world.ns, vmi.metadata.uid)
                if e.reason == "GuestNICDiffers"
            ]

        (event,) = wait_for("a GuestNICDiffers Event on the VMI", evented)
        assert event.type == "Warning"
        # was Unreported (the VMI Running before its status had the agent's interfaces) or
        # Applied: at most one Event per NIC a minute, the last state told
        assert event.message.startswith(
            f"NIC data0 (MAC {DATA0_MAC}): Differs: 10.6.6.6/24 not on the guest's data0 (was "
        )
        metrics = wait_for(
            "the oldest Differs ages",
            lambda: (
                (m := scrape(url))
                and value(m, "kvdev_controller_guest_differs_oldest_seconds") > 0
                and m
            ),
        )
        assert value(metrics, "kvdev_controller_guest_nics", state="Differs") >= 1
        assert value(metrics, "kvdev_controller_guest_vmis", state="Differs") >= 1
        assert ("kvdev_controller_guest_unreported_nics", (("reason", "mac_not_seen"),)) in metrics
        rc, doc = guests(controller_config, world)
        assert rc == 1
        (judged,) = doc["vmis"]
        data0 = next(n for n in judged["nics"] if n["nic"] == "data0")
        assert (data0["state"], data0["detail"]) == (
            "Differs",
            "10.6.6.6/24 not on the guest's data0",
        )
        assert data0["reported"]["addresses"] == ["fe80::1"]
    with capsys.disabled():
        print(f"\n  guest verdicts: {applied!r} -> {differs!r}; Event: {event.message}")
