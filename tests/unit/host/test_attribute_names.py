"""``X`` from driver D and ``D/X`` are one key wherever kvdev looks an attribute up: the reader,
the writer's derived standard attributes, the allocator's constraints and CEL view."""

import pytest

from kvdev.host.allocation.cel._view import device_view
from kvdev.host.allocation.constraints import attribute_value
from kvdev.host.k8s.resource import Device as SliceDevice
from kvdev.host.publish.metadata import PCI_BUS_ID, device_attributes
from kvdev.schema.fields import attribute_names, lookup_attribute

DRIVER = "nic.example.com"


@pytest.mark.parametrize(
    ("name", "spellings"),
    [
        ("mtu", ("mtu", "nic.example.com/mtu")),
        ("nic.example.com/mtu", ("nic.example.com/mtu", "mtu")),
        ("resource.kubernetes.io/pciBusID", ("resource.kubernetes.io/pciBusID",)),
        ("other.example.com/mtu", ("other.example.com/mtu",)),
    ],
)
def test_the_spellings_of_a_name(name, spellings):
    assert attribute_names(DRIVER, name) == spellings


def test_either_spelling_finds_the_value():
    assert lookup_attribute({"mtu": 1}, DRIVER, f"{DRIVER}/mtu") == 1
    assert lookup_attribute({f"{DRIVER}/mtu": 2}, DRIVER, "mtu") == 2
    assert lookup_attribute({"other.example.com/mtu": 3}, DRIVER, "mtu") is None


def slice_device(attributes):
    return SliceDevice.model_validate({"name": "vf-0", "attributes": attributes})


def test_the_writer_derives_pci_bus_id_from_either_spelling():
    for name in ("dra.net/pciAddress", "pciAddress"):
        attrs = device_attributes(slice_device({name: {"string": "0000:5E:00.1"}}), "dra.net")
        assert attrs[PCI_BUS_ID].string == "0000:5e:00.1", name


def test_a_constraint_on_d_x_sees_an_unqualified_x():
    device = slice_device({"mtu": {"int": 1500}})
    assert attribute_value(DRIVER, device, f"{DRIVER}/mtu") == ("int", False, frozenset([1500]))


def test_the_cel_view_gives_the_qualified_value_when_both_are_there():
    device = slice_device({f"{DRIVER}/mtu": {"int": 9000}, "mtu": {"int": 1500}})
    view = device_view(DRIVER, device)
    assert view.attributes[DRIVER]["mtu"] == 9000
