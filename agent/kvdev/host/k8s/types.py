"""The value rules of ``kvdev.schema.fields`` as pydantic ``Annotated`` types (the host's).

Each type applies one plain rule (``check_x``/``normalize_x``) inside a model; the rules
themselves are shared with the guest's plain reader, which applies the same functions.

No I/O here.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from kvdev.schema.fields import (
    check_canonical_interface_address,
    check_dns_label,
    check_dns_subdomain,
    check_driver_name,
    check_ifname,
    check_pool_name,
    check_request_name,
    normalize_interface_address,
    normalize_ip,
    normalize_mac,
    normalize_network,
    normalize_pci_address,
)

DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
DriverName = Annotated[str, AfterValidator(check_driver_name)]
PoolName = Annotated[str, AfterValidator(check_pool_name)]
RequestName = Annotated[str, AfterValidator(check_request_name)]
PciAddress = Annotated[str, AfterValidator(normalize_pci_address)]
MacAddress = Annotated[str, AfterValidator(normalize_mac)]
CanonicalInterfaceAddress = Annotated[str, AfterValidator(check_canonical_interface_address)]
InterfaceAddress = Annotated[str, AfterValidator(normalize_interface_address)]
Network = Annotated[str, AfterValidator(normalize_network)]
IpAddress = Annotated[str, AfterValidator(normalize_ip)]
IfName = Annotated[str, AfterValidator(check_ifname)]
