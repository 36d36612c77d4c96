"""guest.netlink.rtnl's bridge between pyroute2 0.7 (Debian 13) and 0.9 (PyPI).

The real proof is ``make test-compat``, which runs the netlink tests on both; these pin the
version switch and the address-attribute map of whichever pyroute2 is installed.
"""

import pytest
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg

from kvdev.guest.adapters.netlink import _rtnl as rtnl


@pytest.mark.parametrize(
    ("version", "takes_netns"),
    [
        ("0.7.7", False),
        ("0.7.12", False),
        ("0.8.1", False),
        ("0.9.1", True),
        ("0.9.7", True),
        ("1.0.0", True),
        ("0.10.0.post1", True),
        ("unknown", True),
        ("", True),
    ],
)
def test_netns_argument_only_from_0_9(version, takes_netns):
    assert rtnl._takes_netns(version) is takes_netns


def test_address_map_knows_ifa_proto_at_its_kernel_number():
    names = [entry[0] for entry in ifaddrmsg.nla_map]
    assert names.index("IFA_FLAGS") == 8
    assert names.index("IFA_PROTO") == 11
