"""A VMI's ``status.interfaces[]`` from qemu-guest-agent's answer, as KubeVirt computes it.

What the cluster would carry out of the guest, without a cluster: the answer of
``guest-network-get-interfaces`` (read over the agent's channel by ``e2e_qemu.Qga``) turned into
``VMI.status.interfaces[]`` by the steps KubeVirt takes, as read from its source (HEAD of
kubevirt/kubevirt, 2026-08):

* virt-launcher (``pkg/virt-launcher/virtwrap/agent-poller/agent_poller.go``,
  ``convertToInterfaces``, after libvirt's ``virDomainGetGuestInfo`` parsed the agent's
  JSON): ``lo`` is dropped; each interface keeps ``hardware-address`` as its MAC, its
  ``name`` as ``InterfaceName`` and every ``ip-address`` (no prefix length) in order;
* virt-handler (``pkg/network/setup/netstat.go``, ``UpdateStatus``): one entry per domain
  interface of the VMI spec (``name``, the spec's ``macAddress``, ``infoSource: domain``,
  ``queueCount`` 1, ``linkState: up``); then each guest-agent interface whose MAC equals an
  entry's exactly (``LookupInterfaceStatusByMac``) fills that entry's ``interfaceName`` and,
  per family, its addresses (IPv4 first, then IPv6; ``ipAddress`` the first) and becomes
  ``domain, guest-agent``; any other is appended as a guest-only entry (``infoSource:
  guest-agent``, no name), at most 10 of them (``guestOnlyInterfaceLimit``).

The pod-network cache, multus and masquerade's link-local filter do not apply to the e2e VMI
(no pod network). Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

GUEST_ONLY_LIMIT = 10


def agent_interfaces(answer: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """virt-launcher's ``InterfaceStatus`` list from the agent's answer."""
    out = []
    for iface in answer:
        if iface.get("name") == "lo":
            continue
        ips = [a["ip-address"] for a in iface.get("ip-addresses") or [] if "ip-address" in a]
        out.append(
            {"mac": iface.get("hardware-address", ""), "name": iface.get("name"), "ips": ips}
        )
    return out


def _by_family(ips: Sequence[str]) -> list[str]:
    def family(ip: str) -> int | None:
        try:
            return ipaddress.ip_address(ip).version
        except ValueError:
            return None

    return [ip for ip in ips if family(ip) == 4] + [ip for ip in ips if family(ip) == 6]


def status_interfaces(
    spec_interfaces: Sequence[Mapping[str, Any]], answer: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``status.interfaces[]`` for a VMI with these spec interfaces, from the agent's answer."""
    statuses: list[dict[str, Any]] = [
        {
            "name": i["name"],
            "mac": i.get("macAddress", ""),
            "infoSource": "domain",
            "queueCount": 1,
            "linkState": "up",
        }
        for i in spec_interfaces
    ]
    guest_only = 0
    for ga in agent_interfaces(answer):
        ips = _by_family(ga["ips"])
        known = next((s for s in statuses if s["mac"] and s["mac"] == ga["mac"]), None)
        if known is not None:
            known["interfaceName"] = ga["name"]
            known.pop("ipAddress", None)
            known.pop("ipAddresses", None)
            if ips:
                known["ipAddress"], known["ipAddresses"] = ips[0], ips
            known["infoSource"] = "domain, guest-agent"
            continue
        if guest_only >= GUEST_ONLY_LIMIT:
            continue
        guest_only += 1
        entry: dict[str, Any] = {"mac": ga["mac"], "interfaceName": ga["name"]}
        if ga["ips"]:
            entry["ipAddress"] = next((ip for ip in ips if ":" not in ip), ga["ips"][0])
            entry["ipAddresses"] = ga["ips"]
        entry["infoSource"] = "guest-agent"
        statuses.append(entry)
    return statuses


__all__ = ["GUEST_ONLY_LIMIT", "agent_interfaces", "status_interfaces"]
