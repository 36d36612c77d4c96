"""The parts of a KubeVirt ``VirtualMachineInstance`` (kubevirt.io/v1) that kvdev reads.

Owns, from KubeVirt's API types (``staging/src/kubevirt.io/api/core/v1``): the VMI's claims
(``spec.resourceClaims[]``, core/v1 PodResourceClaim), which device uses which claim request
(``spec.networks[].resourceClaim``, ``spec.domain.devices.gpus[]`` / ``hostDevices[]`` with
``claimName`` + ``requestName``), what the guest is told about an interface (``macAddress``,
``pciAddress``, ``tag`` of ``spec.domain.devices.interfaces[]``), the shares
(``spec.volumes[].configMap``, ``spec.domain.devices.filesystems[]``), the node it runs on
(``status.nodeName``), its phase and conditions (``AgentConnected``: the guest agent answers)
and what KubeVirt reports of each interface (``status.interfaces[]``: the MAC, and from the
guest agent the name in the guest, its addresses, the link state and where each came from,
``infoSource``). Every other field is ignored, as for every kvdev model.

Values KubeVirt itself checks (MAC and PCI syntax) are kept as strings here: what kvdev cannot
use costs only that value (see ``kvdev.host.controller.vmihints``), never the VMI.

No I/O here.
"""

from __future__ import annotations

from typing import Final, Literal

from kvdev.host.k8s.common import ObjectMeta
from kvdev.host.k8s.core import PodResourceClaim
from kvdev.host.k8s.model import Document, Model

GROUP: Final = "kubevirt.io"
API_VERSION: Final = f"{GROUP}/v1"
KIND: Final = "VirtualMachineInstance"
PLURAL: Final = "virtualmachineinstances"


class ClaimRequest(Model):
    """KubeVirt's ``ClaimRequest``: a VMI claim entry's name and one request of that claim."""

    claim_name: str | None = None  # vmi.spec.resourceClaims[].name
    request_name: str | None = None  # the claim's spec.devices.requests[].name


class Network(Model):
    """``spec.networks[]``: a DRA NIC has ``resourceClaim``; others (pod, multus): the VM's own."""

    name: str
    resource_claim: ClaimRequest | None = None


class PluginBinding(Model):
    """``interfaces[].binding``: a network binding plugin, by name."""

    name: str | None = None


class Interface(Model):
    """``spec.domain.devices.interfaces[]``: named like its network.

    Of the binding methods, only two meet a DRA network: ``sriov`` (the VF becomes a plain PCI
    ``<hostdev>``: KubeVirt's ``CreateDRAHostDevices`` gives it the guest PCI address and boot
    order, never a MAC) and ``binding`` (a network binding plugin: KubeVirt writes the
    interface's ``macAddress`` into the domain's ``<interface>``).
    """

    name: str
    mac_address: str | None = None
    pci_address: str | None = None
    tag: str | None = None
    sriov: dict[str, object] | None = None
    binding: PluginBinding | None = None

    @property
    def kubevirt_sets_mac(self) -> bool:
        """Whether KubeVirt gives the guest this interface's ``macAddress``."""
        return self.sriov is None and self.binding is not None


class ClaimedDevice(Model):
    """A ``gpus[]`` or ``hostDevices[]`` entry (``claimName``/``requestName`` inline)."""

    name: str
    device_name: str | None = None  # a device-plugin device: no claim
    claim_name: str | None = None
    request_name: str | None = None
    tag: str | None = None


class Filesystem(Model):
    """``spec.domain.devices.filesystems[]``: a volume shared over virtiofs (tag = name)."""

    name: str
    virtiofs: dict[str, object] | None = None


class Devices(Model):
    """``spec.domain.devices``."""

    interfaces: list[Interface] | None = None
    gpus: list[ClaimedDevice] | None = None
    host_devices: list[ClaimedDevice] | None = None
    filesystems: list[Filesystem] | None = None


class Domain(Model):
    """``spec.domain``: only its devices."""

    devices: Devices | None = None


class ConfigMapVolumeSource(Model):
    """``spec.volumes[].configMap``: KubeVirt's has no ``items`` (every key is a file)."""

    name: str | None = None
    optional: bool | None = None


class Volume(Model):
    """``spec.volumes[]``: only ConfigMap volumes are read."""

    name: str
    config_map: ConfigMapVolumeSource | None = None


class VmiSpec(Model):
    """The VMI spec fields kvdev reads."""

    domain: Domain | None = None
    networks: list[Network] | None = None
    resource_claims: list[PodResourceClaim] | None = None
    volumes: list[Volume] | None = None


class InterfaceStatus(Model):
    """``status.interfaces[]``: one guest NIC as KubeVirt reports it.

    ``name`` is the VMI network's (empty for a NIC only the guest agent reports);
    ``interfaceName`` and ``ipAddresses`` (bare addresses, no prefix length) come from the
    guest agent; ``infoSource`` lists the sources, comma-separated (``domain``, ``guest-agent``,
    ``multus-status``).
    """

    name: str | None = None
    mac: str | None = None
    interface_name: str | None = None
    ip_addresses: list[str] | None = None
    link_state: str | None = None
    info_source: str | None = None


class VmiCondition(Model):
    """``status.conditions[]``: only the type and the status are read."""

    type: str | None = None
    status: str | None = None


class VmiStatus(Model):
    """``status``: the node the VMI runs on, its phase, conditions and interfaces."""

    node_name: str | None = None
    phase: str | None = None
    conditions: list[VmiCondition] | None = None
    interfaces: list[InterfaceStatus] | None = None


class VirtualMachineInstance(Document):
    """A KubeVirt VMI."""

    api_version: Literal["kubevirt.io/v1"]
    kind: Literal["VirtualMachineInstance"]
    metadata: ObjectMeta
    spec: VmiSpec
    status: VmiStatus | None = None

    @property
    def devices(self) -> Devices:
        """``spec.domain.devices``, empty when absent."""
        domain = self.spec.domain
        return domain.devices if domain is not None and domain.devices else Devices()
