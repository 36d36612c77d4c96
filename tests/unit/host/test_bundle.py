"""host.bundle (+ bundle_xml, bundle_plan): the example tree and libvirt fixtures -> guest hints.

The bundle is checked with the guest's own reader (kvdev.schema, guest.sources) and matcher:
every pinned device must bind to a guest PCI device at its pinned address.
"""

import json
from pathlib import Path

import pytest

from kvdev.errors import SchemaError
from kvdev.guest.core import sources
from kvdev.guest.core.matching import MatchState, match
from kvdev.guest.core.observed import GuestDevice, RawFile
from kvdev.host.bundle import build
from kvdev.host.bundle.domainxml import parse_domain
from kvdev.host.bundle.plan import load_plan
from kvdev.host.commands.bundle import make_bundle
from kvdev.schema import DEVICE_METADATA, GUEST_HINTS, Role, check_file, decode_stream, role_of

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "packaging/examples/dra-device-attributes"
LIBVIRT = REPO / "tests/data/libvirt"
GPU = "vm1-devices/gpu/gpu.nvidia.com/node-a/gpu-vfio-0"
VF1 = "vm1-devices/nic-1/sriov.example.com/node-a/vf-1"
VF2 = "vm1-devices/nic-2/sriov.example.com/node-a/vf-2"
FAST = "fast-nic/nic/dra.net/node-a/pci-0000-5e-00-1"


def example_files():
    return {
        p.relative_to(EXAMPLE).as_posix(): p.read_bytes()
        for p in sorted(EXAMPLE.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def tree():
    return build.read_tree(example_files(), "ex")


def domain_bundle(tree, xml: bytes, generation=1):
    placement = build.place_by_domain(tree, parse_domain(xml, "vm1.xml"), "vm1.xml")
    return build.build(tree, placement, generation=generation)


def hints_of(bundle):
    return decode_stream(bundle.files[build.HINTS_FILE], GUEST_HINTS).document


def by_ref(bundle):
    return {d.ref: d for d in bundle.devices}


# --------------------------------------------------------------------------- domain XML


def test_domain_xml_pins_every_described_device(tree):
    bundle = domain_bundle(tree, (LIBVIRT / "vm1-domain.xml").read_bytes())
    got = {ref: (d.guest_pci, d.matched_by, d.origin, d.tag) for ref, d in by_ref(bundle).items()}
    assert got == {
        GPU: (
            "0000:09:00.0",
            "hostdev source = pciBusID",
            "vm1.xml: hostdev[1] (alias ua-gpu-gpu1)",
            "dra:vm1-devices/gpu/0",
        ),
        VF1: (
            "0000:07:00.0",
            "interface mac = hardwareAddress",
            "vm1.xml: interface[1] (alias ua-sriov-data0)",
            "dra:vm1-devices/nic-1/0",
        ),
        VF2: (
            "0000:08:00.0",
            "hostdev source = pciBusID",
            "vm1.xml: hostdev[0] (alias ua-hostdevice-vf2)",
            "dra:vm1-devices/nic-2/0",
        ),
        FAST: (
            "0000:0a:00.0",
            "interface mac = hardwareAddress",
            "vm1.xml: interface[2] (alias ua-fast-nic)",
            "dra:fast-nic/nic/0",
        ),
    }
    assert bundle.unpinned == ()
    assert bundle.unused == (
        "interface[0] (alias ua-default): no described device has its MAC",
        "hostdev[2] (alias ua-gpu-spare): no described device has its host PCI address",
    )


def test_hints_select_exactly_each_device(tree):
    hints = hints_of(domain_bundle(tree, (LIBVIRT / "vm1-domain.xml").read_bytes()))
    rows = [
        (
            h.claim.resource_claim_name or h.claim.pod_claim_name,
            h.request,
            h.driver,
            h.pool,
            h.device,
            h.guest.pci_address if h.guest else None,
        )
        for h in hints.devices
    ]
    assert rows == [
        ("vm1-devices", "gpu", "gpu.nvidia.com", "node-a", "gpu-vfio-0", "0000:09:00.0"),
        ("vm1-devices", "nic-1", "sriov.example.com", "node-a", "vf-1", "0000:07:00.0"),
        ("vm1-devices", "nic-2", "sriov.example.com", "node-a", "vf-2", "0000:08:00.0"),
        ("fast-nic", "nic", "dra.net", "node-a", "pci-0000-5e-00-1", "0000:0a:00.0"),
    ]
    assert hints.devices[3].claim.pod_claim_name == "fast-nic"  # a template claim


def test_the_guest_reader_and_matcher_accept_the_bundle(tree):
    bundle = domain_bundle(tree, (LIBVIRT / "vm1-domain.xml").read_bytes())
    for relpath, data in bundle.files.items():
        result = check_file(relpath, role_of(relpath), data)
        assert result.ok, result.errors
        assert result.warnings == ()
    raws = [RawFile(f"/b/{r}", r, role_of(r), d) for r, d in sorted(bundle.files.items())]
    belief = sources.update(sources.Sources(), raws, listing_complete=True)
    assert belief.errors() == {}
    guest = [GuestDevice(d.guest_pci) for d in bundle.devices]
    matching = match(belief.described(), guest, belief.hints(), belief.tagged())
    outcome = {
        b.device.name: (b.state, b.guest.pci_address if b.guest else None, b.evidence[0].kind)
        for b in matching.bindings
    }
    assert outcome == {
        "gpu-vfio-0": (MatchState.BOUND, "0000:09:00.0", "pinned"),
        "vf-1": (MatchState.BOUND, "0000:07:00.0", "pinned"),
        "vf-2": (MatchState.BOUND, "0000:08:00.0", "pinned"),
        "pci-0000-5e-00-1": (MatchState.BOUND, "0000:0a:00.0", "pinned"),
    }


def test_metadata_files_are_copied_byte_for_byte_and_others_dropped(tree):
    bundle = domain_bundle(tree, (LIBVIRT / "vm1-domain.xml").read_bytes())
    files = example_files()
    meta = {r for r in files if role_of(r) is Role.DEVICE_METADATA}
    assert set(bundle.files) == {*meta, build.HINTS_FILE}
    assert all(bundle.files[r] == files[r] for r in meta)
    assert bundle.files[build.HINTS_FILE] != files[build.HINTS_FILE]
    assert [str(w) for w in tree.warnings] == [
        "ex/kvdev/guest-hints.json: not copied (guest hints, replaced by the bundle's)"
    ]


def test_device_without_guest_address_or_match_is_unpinned_and_reported(tree):
    xml = (LIBVIRT / "vm1-domain.xml").read_text()
    # the GPU loses its guest address; the fast NIC's interface disappears
    xml = xml.replace(
        "<alias name='ua-gpu-gpu1'/>\n      <address type='pci' domain='0x0000' bus='0x09' "
        "slot='0x00' function='0x0'/>",
        "<alias name='ua-gpu-gpu1'/>",
    )
    xml = xml.replace("0c:42:a1:5e:00:01", "0c:42:a1:5e:00:99")
    bundle = domain_bundle(tree, xml.encode())
    assert [d.ref for d in bundle.unpinned] == [GPU, FAST]
    assert by_ref(bundle)[GPU].matched_by == "hostdev source = pciBusID"  # found, no address
    assert by_ref(bundle)[FAST].matched_by is None
    hints = {h.device: h for h in hints_of(bundle).devices}
    assert hints["gpu-vfio-0"].guest.pci_address is None
    assert hints["gpu-vfio-0"].guest.tag == "dra:vm1-devices/gpu/0"


def test_two_hostdevs_with_one_source_pin_nothing_and_warn(tree):
    xml = (LIBVIRT / "vm1-domain.xml").read_text().replace("bus='0xcb'", "bus='0xca'")
    bundle = domain_bundle(tree, xml.encode())
    assert [d.ref for d in bundle.unpinned] == [GPU]
    assert [str(w) for w in bundle.warnings][-1] == (
        "vm1.xml: " + GPU + ": hostdev source = pciBusID matches hostdev[1] (alias ua-gpu-gpu1), "
        "hostdev[2] (alias ua-gpu-spare); not pinned"
    )


@pytest.mark.parametrize("name", ["billion-laughs.xml", "external-entity.xml"])
def test_hostile_xml_is_refused(name):
    with pytest.raises(SchemaError) as e:
        parse_domain((LIBVIRT / name).read_bytes(), name)
    assert str(e.value) == (
        f"{name}: line 2: a document type declaration (DOCTYPE) refused (libvirt never writes one)"
    )


def test_internal_entity_without_doctype_is_not_expanded():
    # an undeclared entity is an error of its own, never a lookup
    with pytest.raises(SchemaError, match=r"undefined entity"):
        parse_domain(b"<domain><name>&x;</name></domain>", "d.xml")


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (b"<domain><devices>", "d.xml: not well-formed XML: no element found (line 1 column 17)"),
        (b"<network/>", "d.xml: the root element is <network>, not <domain>"),
        (
            (
                b"<domain><devices><hostdev><source><address bus='0x100' slot='0'/></source>"
                b"</hostdev></devices></domain>"
            ),
            "d.xml: hostdev[0].source.address (line 1): bus='0x100' is not a PCI bus (0 to 0xff)",
        ),
        (
            b"<domain><devices>\n<interface><mac address='zz'/></interface></devices></domain>",
            "d.xml: interface[0].mac.address (line 2): 'zz' is not a MAC address",
        ),
        (b"<a>" * 70 + b"</a>" * 70, "d.xml: line 1: nested deeper than 64"),
    ],
)
def test_bad_domain_xml_names_file_element_and_line(xml, message):
    with pytest.raises(SchemaError) as e:
        parse_domain(xml, "d.xml")
    assert str(e.value).startswith(message)


def test_mdev_hostdev_keeps_its_uuid_and_no_host_pci():
    xml = (
        b"<domain><devices><hostdev mode='subsystem' type='mdev'><source>"
        b"<address uuid='C2177883-F1BB-47F0-914D-32A22E3A8804'/></source>"
        b"<address type='pci' domain='0x0000' bus='0x0c' slot='0x00' function='0x0'/>"
        b"</hostdev></devices></domain>"
    )
    (dev,) = parse_domain(xml)
    assert (dev.mdev_uuid, dev.host_pci, dev.guest_pci) == (
        "c2177883-f1bb-47f0-914d-32a22e3a8804",
        None,
        "0000:0c:00.0",
    )


# --------------------------------------------------------------------------- guest plan


def test_guest_plan_pins_names_and_routes(tree):
    plan = load_plan((LIBVIRT / "vm1-plan.yaml").read_bytes(), "plan.yaml")
    bundle = build.build(tree, build.place_by_plan(tree, plan, "plan.yaml"))
    hints = {h.device: h for h in hints_of(bundle).devices}
    vf1 = hints["vf-1"]
    assert (vf1.guest.pci_address, vf1.network.interface_name, vf1.network.mtu) == (
        "0000:07:00.0",
        "data0",
        9000,
    )
    assert [r.to_json_dict() for r in vf1.network.routes] == [
        {"destination": "10.3.0.0/16", "gateway": "10.1.0.1", "metric": 100}
    ]
    assert hints["gpu-vfio-0"].guest.tag == "gpu-main"
    assert hints["pci-0000-5e-00-1"].network.interface_name == "fast0"
    assert hints["pci-0000-5e-00-1"].guest.pci_address is None
    assert [d.ref for d in bundle.unpinned] == [VF2, FAST]
    assert by_ref(bundle)[VF1].origin == "plan.yaml: devices[0]"


PLAN_HEAD = "apiVersion: bundle.kvdev.io/v1alpha1\nkind: GuestPlan\ndevices:\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "- {claim: vm1-devices, request: gpu, pciAddres: '0000:09:00.0'}\n",
            "plan.yaml: devices[0].pciAddres: unknown field",
        ),
        (
            "- {claim: vm1-devices, request: gpu, pciAddress: 0000:09:00.9}\n",
            "plan.yaml: devices[0].pciAddress: ",
        ),
        (
            "- {claim: vm1-devices, request: gpu, mtu: 9000000}\n",
            "plan.yaml: devices[0].mtu: Input should be less than or equal to 65535",
        ),
        (
            "- {claim: vm1-devices, request: gpu, mtu: '9000'}\n",
            "plan.yaml: devices[0].mtu: Input should be a valid integer",
        ),
        ("- {request: gpu}\n", "plan.yaml: devices[0].claim: required field is missing"),
        (
            (
                "- {claim: vm1-devices, request: gpu, routes: [{destination: 10.0.0.0/8, "
                "gateway: 'fe80::1'}]}\n"
            ),
            (
                "plan.yaml: devices[0].routes[0]: gateway fe80::1 and destination 10.0.0.0/8 "
                "are of different IP families"
            ),
        ),
    ],
)
def test_invalid_plan_names_file_and_field(body, message):
    with pytest.raises(SchemaError) as e:
        load_plan((PLAN_HEAD + body).encode(), "plan.yaml")
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "- {claim: vm1-devics, request: gpu}\n",
            (
                "plan.yaml: devices[0]: selects no described device (claim 'vm1-devics', request "
                "'gpu'); check the claim directory and request names"
            ),
        ),
        (
            (
                "- {claim: vm1-devices, request: gpu}\n- {claim: vm1-devices, request: gpu, "
                "driver: gpu.nvidia.com}\n"
            ),
            "plan.yaml: devices[1]: selects " + GPU + ", as devices[0] does",
        ),
    ],
)
def test_plan_entries_must_each_pick_one_device(tree, body, message):
    plan = load_plan((PLAN_HEAD + body).encode(), "plan.yaml")
    with pytest.raises(SchemaError) as e:
        build.place_by_plan(tree, plan, "plan.yaml")
    assert str(e.value) == message


def test_a_plan_entry_that_selects_two_devices_must_name_one():
    files = example_files()
    nic1 = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"
    doc = decode_stream(files[nic1], DEVICE_METADATA).document.to_json_dict()
    second = {**doc["requests"][0]["devices"][0], "name": "vf-9"}
    doc["requests"][0]["devices"].append(second)  # one request for two devices
    files[nic1] = (json.dumps(doc) + "\n").encode()
    tree = build.read_tree(files, "ex")
    plan = load_plan((PLAN_HEAD + "- {claim: vm1-devices, request: nic-1}\n").encode(), "p.yaml")
    with pytest.raises(SchemaError) as e:
        build.place_by_plan(tree, plan, "p.yaml")
    assert str(e.value) == (
        "p.yaml: devices[0]: selects 2 described devices (vm1-devices/nic-1/sriov.example.com/"
        "node-a/vf-1, vm1-devices/nic-1/sriov.example.com/node-a/vf-9); name driver and device"
    )


def test_plan_asking_one_name_twice_is_refused_by_the_hints_rules(tree):
    body = (
        "- {claim: vm1-devices, request: nic-1, device: vf-1, interfaceName: data0}\n"
        "- {claim: vm1-devices, request: nic-2, device: vf-2, interfaceName: data0}\n"
    )
    plan = load_plan((PLAN_HEAD + body).encode(), "plan.yaml")
    with pytest.raises(SchemaError, match=r"asks for interface name 'data0', as devices\[1\]"):
        build.build(tree, build.place_by_plan(tree, plan, "plan.yaml"))


def test_plan_as_json_and_yaml_unquoted_addresses_stay_strings():
    doc = {"apiVersion": "bundle.kvdev.io/v1alpha1", "kind": "GuestPlan", "devices": []}
    assert load_plan(json.dumps(doc).encode()).devices == []
    yaml_text = PLAN_HEAD + "- {claim: c, request: r, pciAddress: 0000:07:00.0, tag: 1:30}\n"
    (item,) = load_plan(yaml_text.encode()).devices
    assert (item.pci_address, item.tag) == ("0000:07:00.0", "1:30")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "p: not valid JSON: Expecting property name"),
        (b"a: [", "p: not valid YAML:"),
        (b"- 1\n", "p: expected a mapping (a GuestPlan object)"),
        (b"kind: GuestPlan\n---\nkind: GuestPlan\n", "p: expected one document, found 2"),
        (b"\xff", "p: not UTF-8 text"),
    ],
)
def test_unreadable_plan_names_the_file(data, message):
    with pytest.raises(SchemaError) as e:
        load_plan(data, "p")
    assert str(e.value).startswith(message)


# --------------------------------------------------------------------------- tree, generation


def test_invalid_metadata_file_fails_the_bundle_naming_it():
    files = example_files()
    files["resourceclaims/x/r/d.example.com-metadata.json"] = b'{"apiVersion": 1}'
    with pytest.raises(SchemaError) as e:
        build.read_tree(files, "ex")
    assert str(e.value) == (
        "ex/resourceclaims/x/r/d.example.com-metadata.json: stream[0]: apiVersion: "
        "must be a non-empty string"
    )


def test_bad_name_in_a_metadata_path_is_refused():
    with pytest.raises(SchemaError, match=r"request directory: 'R_1' is not a DNS label"):
        build.read_tree({"resourceclaims/x/R_1/d.example.com-metadata.json": b"{}"})


def test_generation_grows_only_when_the_content_changes(tree):
    xml = (LIBVIRT / "vm1-domain.xml").read_bytes()
    placement = build.place_by_domain(tree, parse_domain(xml))
    first = make_bundle(tree, placement, None)
    again = make_bundle(tree, placement, first.files)
    changed = make_bundle(tree, build.Placement({}), again.files)
    gens = [build.hints_generation(b.files[build.HINTS_FILE]) for b in (first, again, changed)]
    assert gens == [1, 1, 2]
    assert again.files == first.files
