"""The binding-plugin contract (docs/reference/binding-plugin-contract.md), from the VMI to the NIC.

The controller's hints from a VMI whose DRA NIC comes through a network binding plugin interface
(``binding: {name}``, with ``tag`` and ``macAddress``), handed to the guest's own matcher with
the config drive's tagged entry and the guest's NICs: which guest NIC each device binds, and by
what evidence. Plain values only.
"""

import copy

from kvdev.guest.core.matching import MatchState, match
from kvdev.guest.core.observed import GuestDevice, Nic
from kvdev.host.controller.vmihints import vmi_hints
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.schema.configdrive import TaggedDevice
from kvdev.schema.described import DescribedDevice

GUEST_MAC = "02:00:00:3b:02:01"  # the VMI's macAddress: KubeVirt sets it on the domain NIC
DRIVER_MAC = "0a:11:22:33:44:55"  # what the driver reports as networkData.hardwareAddress
TAG = "dra:vm1-nics/nic-1/0"

VMI = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": {"name": "vm1", "namespace": "vms", "uid": "u-1"},
    "spec": {
        "resourceClaims": [{"name": "nics", "resourceClaimName": "vm1-nics"}],
        "networks": [
            {"name": "data0", "resourceClaim": {"claimName": "nics", "requestName": "nic-1"}}
        ],
        "domain": {
            "devices": {
                "interfaces": [
                    {
                        "name": "data0",
                        "binding": {"name": "sriov-dra"},
                        "macAddress": GUEST_MAC,
                        "tag": TAG,
                    }
                ]
            }
        },
    },
}


def vmi(**interface):
    body = copy.deepcopy(VMI)
    iface = body["spec"]["domain"]["devices"]["interfaces"][0]
    iface.update(interface)
    for key in [k for k, v in iface.items() if v is None]:
        del iface[key]
    return VirtualMachineInstance.model_validate(body)


# the driver's stream for the claim vm1-nics, request nic-1: one VF
DEVICE = {"claim": "vm1-nics", "namespace": "vms", "pod_claim_name": None, "request": "nic-1"}
DEVICE |= {"driver": "sriov.example.com", "pool": "node-a", "name": "vf-1", "generation": 1}


def described(mac=DRIVER_MAC):
    return DescribedDevice(**DEVICE, mac=mac)


def nic(address, mac, ifname):
    return GuestDevice(
        address, "15b3", "101e", "020000", "mlx5_core", None, (), (Nic(ifname, 2, mac, mac),)
    )


GUEST = [
    nic("0000:09:00.0", GUEST_MAC, "enp9s0"),
    nic("0000:0a:00.0", "02:00:00:00:00:aa", "enp10s0"),
    nic("0000:0b:00.0", DRIVER_MAC, "enp11s0"),  # a NIC that happens to carry the driver's MAC
]


def test_the_hint_of_a_binding_plugin_nic_carries_its_mac_and_tag():
    hints, warnings = vmi_hints(vmi())
    assert warnings == ()
    (hint,) = hints.devices
    assert hint.to_json_dict() == {
        "claim": {"resourceClaimName": "vm1-nics"},
        "request": "nic-1",
        "guest": {"macAddress": GUEST_MAC, "tag": TAG},
    }


def test_the_config_drives_tagged_entry_picks_the_guest_nic():
    hints, _ = vmi_hints(vmi())
    drive = [TaggedDevice(type="nic", bus="pci", address="0000:09:00.0", mac=GUEST_MAC, tags=[TAG])]
    (b,) = match([described()], GUEST, hints.devices, drive).bindings
    assert (b.state, b.guest.pci_address) == (MatchState.BOUND, "0000:09:00.0")
    assert b.evidence[0].kind == "tag"


def test_without_a_tag_entry_the_vmis_mac_beats_the_drivers_hardware_address():
    hints, _ = vmi_hints(vmi(tag=None))
    (b,) = match([described()], GUEST, hints.devices).bindings
    assert (b.state, b.guest.pci_address) == (MatchState.BOUND, "0000:09:00.0")
    assert GUEST_MAC in b.evidence[0].detail


def test_an_sriov_interface_on_kubevirt_1_9_is_matched_by_the_drivers_mac():
    """KubeVirt gives a DRA SR-IOV VF no MAC: the hint leaves it out, the driver's MAC decides."""
    hints, warnings = vmi_hints(vmi(binding=None, sriov={}, tag=None))
    assert [w.path for w in warnings] == ["spec.domain.devices.interfaces[0].macAddress"]
    (b,) = match([described()], GUEST, hints.devices).bindings
    assert (b.state, b.guest.pci_address) == (MatchState.BOUND, "0000:0b:00.0")


def test_a_pci_address_and_a_tag_that_disagree_configure_nothing():
    hints, _ = vmi_hints(vmi(pciAddress="0000:0a:00.0"))
    drive = [TaggedDevice(type="nic", bus="pci", address="0000:09:00.0", mac=GUEST_MAC, tags=[TAG])]
    (b,) = match([described()], GUEST, hints.devices, drive).bindings
    assert b.state is MatchState.AMBIGUOUS
    assert b.guest is None
