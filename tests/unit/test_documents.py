import json

import pytest
from builders import (
    DEV0,
    HINTS_V1ALPHA1,
    V1ALPHA1,
    V1BETA1,
    V2,
    both,
    device,
    hint,
    hints_doc,
    metadata_doc,
    stream,
    with_attrs,
    with_device,
)

from kvdev.errors import Problem, SchemaError, Severity
from kvdev.schema import (
    ConfigDriveMetadata,
    DeviceMetadata,
    GuestHints,
    MetadataLocation,
    Role,
    check_file,
    decode_document,
    metadata_location,
    role_of,
    sniff_role,
)

SRC = "resourceclaims/vm1-nics/nic/sriov.example.com-metadata.json"
LOC = MetadataLocation(template=False, claim="vm1-nics", request="nic", driver="sriov.example.com")
TEMPLATE_LOC = MetadataLocation(
    template=True, claim="nic", request="nic", driver="sriov.example.com"
)


def found(problems):
    return [(p.path, p.message) for p in problems]


# --------------------------------------------------------------------------- check_file by role


def test_valid_device_metadata():
    result = check_file(SRC, Role.DEVICE_METADATA, both(metadata_doc(2)), LOC)
    assert result.ok
    assert (result.source, result.role, result.location) == (SRC, Role.DEVICE_METADATA, LOC)
    assert (result.api_version, result.skipped) == (V1BETA1, ())
    assert (result.errors, result.warnings) == ((), ())
    assert isinstance(result.document, DeviceMetadata)
    assert [d.ref for d in result.described] == [
        "vm1-nics/nic/sriov.example.com/node-a/vf-0",
        "vm1-nics/nic/sriov.example.com/node-a/vf-1",
    ]
    first = result.described[0]
    assert (first.namespace, first.pod_claim_name, first.generation) == ("vms", None, 1)
    assert (first.pci_address, first.mac, first.ips, first.numa_nodes) == (None, None, (), ())


def test_invalid_device_metadata():
    bad = with_device()
    bad["requests"][0]["devices"][0]["name"] = 7  # Go cannot decode a number into a string
    result = check_file(SRC, Role.DEVICE_METADATA, both(bad), LOC)
    assert not result.ok
    assert (result.document, result.described, result.api_version) == (None, (), None)
    assert result.location == LOC
    assert [(p.source, p.index, p.path) for p in result.errors] == [
        (SRC, 0, f"{DEV0}.name"),
        (SRC, 1, f"{DEV0}.name"),  # both versions tried
    ]


@pytest.mark.parametrize(
    "meta",
    [{}, {"namespace": "vms", "generation": 3}, None],
    ids=["empty", "no-name-no-uid", "null"],
)
@pytest.mark.parametrize("n_devices", [0, 1])
def test_an_object_without_claim_identity_is_read_as_upstream_reads_it(meta, n_devices):
    # upstream's reader decodes it (it checks nothing): kvdev is never stricter. The file's
    # place in the tree names the claim; a lone file's devices have none, so they are unusable.
    doc = metadata_doc(n_devices) | {"metadata": meta}
    result = check_file(SRC, Role.DEVICE_METADATA, both(doc), LOC)
    assert result.ok
    assert result.document is not None
    [warning] = [w for w in result.warnings if "neither name nor uid" in w.message]
    assert (warning.path, warning.severity, warning.upstream_invalid) == (
        "metadata",
        Severity.WARNING,
        True,
    )
    assert [d.claim for d in result.described] == ["vm1-nics"]  # no device: a pending request
    assert all(d.usable for d in result.described)
    alone = check_file("f.json", Role.DEVICE_METADATA, both(doc))
    assert alone.ok
    assert all(not d.usable for d in alone.described)  # whose claim, nothing says


@pytest.mark.parametrize("meta", [{"name": "vm1-nics"}, {"uid": "uid-1"}])
def test_a_name_or_a_uid_is_enough_claim_identity(meta):
    result = check_file(SRC, Role.DEVICE_METADATA, both(metadata_doc(1) | {"metadata": meta}))
    assert result.ok


def test_a_name_upstream_would_refuse_is_read_with_a_warning():
    result = check_file(SRC, Role.DEVICE_METADATA, both(with_device(name="VF0")), LOC)
    assert result.ok
    assert result.described[0].name == "VF0"
    assert [(p.index, p.path, p.upstream_invalid) for p in result.warnings] == [
        (0, f"{DEV0}.name", True)
    ]


def test_described_view_is_normalized():
    doc = with_attrs(
        {
            "resource.kubernetes.io/pciBusID": {"string": "3B:02.1"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:3a"},
            "resource.kubernetes.io/numaNode": {"ints": [1, 0]},
        }
    )
    doc["requests"][0]["devices"][0]["networkData"] = {
        "interfaceName": "net1",
        "ips": ["10.1.0.5/24"],
        "hardwareAddress": "02-00-00-3B-02-01",
    }
    [d] = check_file(SRC, Role.DEVICE_METADATA, both(doc)).described
    assert (d.pci_address, d.pcie_root, d.numa_nodes) == ("0000:3b:02.1", "pci0000:3a", (1, 0))
    assert (d.mac, d.ips, d.interface_name) == ("02:00:00:3b:02:01", ("10.1.0.5/24",), "net1")


def test_driver_local_pci_attribute_and_unusable_standard_one():
    doc = with_attrs(
        {
            "resource.kubernetes.io/pciBusID": {"string": "not-pci"},
            "pciAddress": {"string": "0000:3B:02.1"},
        }
    )
    result = check_file(SRC, Role.DEVICE_METADATA, both(doc))
    assert result.described[0].pci_address == "0000:3b:02.1"
    [w] = result.warnings
    assert (w.severity, w.index) == (Severity.WARNING, 0)
    assert w.path == f'{DEV0}.attributes["resource.kubernetes.io/pciBusID"]'
    assert w.message.endswith("; not used as the device's PCI address")


def test_valid_guest_hints():
    result = check_file("kvdev/guest-hints.json", Role.GUEST_HINTS, stream(hints_doc()))
    assert result.ok
    assert isinstance(result.document, GuestHints)
    assert (result.api_version, result.described, result.warnings) == (HINTS_V1ALPHA1, (), ())


def test_metadata_is_not_read_as_guest_hints():
    result = check_file("h.json", Role.GUEST_HINTS, both(metadata_doc()))
    [p] = result.errors
    assert result.document is None
    assert p.message.startswith(f"no object of a supported version: found {V1BETA1}, {V1ALPHA1}")


def test_unrelated_role_is_an_error():
    result = check_file("x.txt", Role.UNRELATED, b"anything")
    assert result.errors == (Problem("not a file kvdev reads", "x.txt"),)
    assert result.document is None


# --------------------------------------------------------------------------- placement


def _name(doc, value):
    doc["metadata"]["name"] = value


def _request(doc, value):
    doc["requests"][0]["name"] = value


def _driver(doc, value):
    doc["requests"][0]["devices"].append(device(1, driver=value))


def _pod_claim(doc, value):
    doc["podClaimName"] = value


WRONG_CLAIM = ("metadata.name", "is 'other' but the file is under resourceclaims/vm1-nics/")
WRONG_REQUEST = "but the file is in the directory of request 'nic'"
WRONG_DRIVER = "is 'other.example.com' but the file is sriov.example.com-metadata.json"
WRONG_POD_CLAIM = "but the file is under resourceclaimtemplates/nic/"


@pytest.mark.parametrize(
    ("mutate", "value", "location", "expected"),
    [
        (_name, "vm1-nics", LOC, []),
        (_request, "nic/sriov", LOC, []),
        (_name, "other", LOC, [WRONG_CLAIM]),
        (_request, "gpu", LOC, [("requests[0].name", f"is 'gpu' {WRONG_REQUEST}")]),
        (_request, "gpu/nic", LOC, [("requests[0].name", f"is 'gpu/nic' {WRONG_REQUEST}")]),
        (_driver, "other.example.com", LOC, [("requests[0].devices[1].driver", WRONG_DRIVER)]),
        (_pod_claim, "nic", TEMPLATE_LOC, []),
        (_pod_claim, "gpu", TEMPLATE_LOC, [("podClaimName", f"is 'gpu' {WRONG_POD_CLAIM}")]),
        (_name, "vm1-nics", TEMPLATE_LOC, [("podClaimName", f"is None {WRONG_POD_CLAIM}")]),
    ],
)
def test_placement(mutate, value, location, expected):
    doc = metadata_doc()
    mutate(doc, value)
    data = stream({"apiVersion": V2}, doc)  # the document used is stream[1]
    result = check_file(SRC, Role.DEVICE_METADATA, data, location)
    assert result.ok
    assert found(result.warnings) == expected
    assert {(w.severity, w.index, w.source) for w in result.warnings} <= {
        (Severity.WARNING, 1, SRC)
    }


def test_placement_is_not_checked_without_a_location():
    doc = metadata_doc()
    doc["metadata"]["name"] = "other"
    assert check_file(SRC, Role.DEVICE_METADATA, both(doc)).warnings == ()


# --------------------------------------------------------------------------- tree


@pytest.mark.parametrize(
    ("relpath", "location"),
    [
        ("resourceclaims/vm1-nics/nic/sriov.example.com-metadata.json", LOC),
        ("resourceclaimtemplates/nic/nic/sriov.example.com-metadata.json", TEMPLATE_LOC),
        (
            "resourceclaims/a.b/r/dra.net-metadata.json",
            MetadataLocation(template=False, claim="a.b", request="r", driver="dra.net"),
        ),
    ],
)
def test_metadata_location_parses(relpath, location):
    assert metadata_location(relpath) == location
    assert location.relpath == relpath


@pytest.mark.parametrize(
    "relpath",
    [
        "resourceclaims/c/r",
        "resourceclaims/c/r/d.json",
        "resourceclaims/c/r/-metadata.json",
        "resourceclaims/c/r/x/d-metadata.json",
        "/resourceclaims/c/r/d-metadata.json",
        "claims/c/r/d-metadata.json",
        "kvdev/guest-hints.json",
        "",
    ],
)
def test_metadata_location_of_other_paths(relpath):
    assert metadata_location(relpath) is None


@pytest.mark.parametrize(
    ("relpath", "message"),
    [
        ("resourceclaims/Vm1/nic/d-metadata.json", "claim directory: 'Vm1' is not a DNS subdomain"),
        ("resourceclaimtemplates/a.b/nic/d-metadata.json", "claim directory: 'a.b' is not a DNS"),
        ("resourceclaims/c/nic.x/d-metadata.json", "request directory: 'nic.x' is not a DNS"),
        ("resourceclaims/c//d-metadata.json", "request directory: must not be empty"),
        ("resourceclaims/c/nic/Drv-metadata.json", "driver in the file name: 'Drv' is not a DNS"),
        (
            f"resourceclaims/c/nic/{'d' * 64}-metadata.json",
            "driver in the file name: must be at most 63 characters, got 64",
        ),
    ],
)
def test_metadata_location_rejects_bad_names(relpath, message):
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")):
        metadata_location(relpath)


@pytest.mark.parametrize(
    ("relpath", "role"),
    [
        ("kvdev/guest-hints.json", Role.GUEST_HINTS),
        ("openstack/latest/meta_data.json", Role.CONFIG_DRIVE),
        ("meta_data.json", Role.CONFIG_DRIVE),
        ("resourceclaims/c/r/d-metadata.json", Role.DEVICE_METADATA),
        ("resourceclaimtemplates/c/r/d-metadata.json", Role.DEVICE_METADATA),
        ("resourceclaims/Bad/r/d-metadata.json", Role.DEVICE_METADATA),
        ("resourceclaims/c/r/d.json", Role.UNRELATED),
        ("resourceclaims/c/d-metadata.json", Role.UNRELATED),
        ("guest/root/kvdev/guest-hints.json", Role.GUEST_HINTS),
        ("xkvdev/guest-hints.json", Role.UNRELATED),
        ("guest-hints.json", Role.UNRELATED),
        ("index.json", Role.UNRELATED),
    ],
)
def test_role_of(relpath, role):
    assert role_of(relpath) is role


@pytest.mark.parametrize(
    ("name", "data", "role"),
    [
        ("x/meta_data.json", b"garbage", Role.CONFIG_DRIVE),
        ("hints.json", stream(hints_doc()), Role.GUEST_HINTS),
        ("hints.json", b"\n  " + stream(hints_doc()), Role.GUEST_HINTS),
        ("hints.json", b'{"apiVersion": "guest.kvdev.io/v1', Role.GUEST_HINTS),
        ("m.json", both(metadata_doc()), Role.DEVICE_METADATA),
        ("m.json", stream({**metadata_doc(), "note": "guest.kvdev.io/"}), Role.DEVICE_METADATA),
        ("m.json", b"\xff\xfe garbage", Role.DEVICE_METADATA),
        ("m.json", b"", Role.DEVICE_METADATA),
    ],
)
def test_sniff_role(name, data, role):
    assert sniff_role(name, data) is role


# --------------------------------------------------------------------------- guest hints


@pytest.mark.parametrize(
    ("devices", "path", "message"),
    [
        (
            [hint(claim={"resourceClaimName": "a", "podClaimName": "b"})],
            "devices[0].claim",
            "set exactly one of resourceClaimName and podClaimName",
        ),
        ([hint(claim={})], "devices[0].claim", "set exactly one of"),
        ([hint(), hint()], "", "devices[1] selects the same device(s) as devices[0]"),
        (
            [hint(device="a"), hint(device="b"), hint(device="a")],
            "",
            "devices[2] selects the same device(s) as devices[0]",
        ),
        (
            [
                hint(device="a", network={"interfaceName": "data0"}),
                hint(device="b", network={"interfaceName": "data0"}),
            ],
            "",
            "devices[1] asks for interface name 'data0', as devices[0]",
        ),
        (
            [hint(network={"mtu": 1279, "addresses": ["2001:db8::5/64"]})],
            "devices[0].network",
            "mtu 1279 is below 1280, the IPv6 minimum",
        ),
        (
            [hint(network={"routes": [{"destination": "10.0.0.0/8", "gateway": "2001:db8::1"}]})],
            "devices[0].network.routes[0]",
            "gateway 2001:db8::1 and destination 10.0.0.0/8 are of different IP families",
        ),
        (
            [hint(network={"interfaceName": "eth/0"})],
            "devices[0].network.interfaceName",
            "interface name 'eth/0' contains forbidden characters ['/']",
        ),
        (  # issue 23: the marks helper once split "data=1=1" at the first '='
            [hint(network={"interfaceName": "data=1"})],
            "devices[0].network.interfaceName",
            "interface name 'data=1' contains forbidden characters ['=']",
        ),
        (
            [hint(network={"addresses": ["2001:DB8::5/64", "2001:db8::5/64"]})],
            "devices[0].network",
            "addresses: an address is listed twice",
        ),
        ([hint(network={"mtu": 67})], "devices[0].network.mtu", "greater than or equal to 68"),
        (
            [hint(network={"routes": [{"destination": "10.0.0.1/8"}]})],
            "devices[0].network.routes[0].destination",
            "has host bits set",
        ),
        ([hint(guest={"tag": ""})], "devices[0].guest.tag", "at least 1 character"),
        ([hint(guest={"pciAddress": "07:20.0"})], "devices[0].guest.pciAddress", "above 1f"),
        ([hint(request="a/b/c")], "devices[0].request", "has more than one '/'"),
    ],
)
def test_hints_are_validated(devices, path, message):
    result = check_file("h.json", Role.GUEST_HINTS, stream(hints_doc(*devices)))
    [p] = result.errors
    assert (p.source, p.index, p.path) == ("h.json", 0, path)
    assert message in p.message


@pytest.mark.parametrize(
    "network",
    [
        {"mtu": 1279, "addresses": ["10.0.0.5/24"]},
        {"mtu": 1280, "addresses": ["2001:db8::5/64"]},
        {"routes": [{"destination": "::/0", "gateway": "fe80::1", "metric": 2**32 - 1}]},
    ],
)
def test_hints_limits_that_pass(network):
    assert check_file("h.json", Role.GUEST_HINTS, stream(hints_doc(hint(network=network)))).ok


def test_hints_are_normalized():
    h = hint(
        guest={"pciAddress": "07:00.0"},
        network={
            "addresses": ["2001:DB8::5/64"],
            "routes": [{"destination": "2001:DB8::/32", "gateway": "2001:DB8::1"}],
        },
    )
    doc = check_file("h.json", Role.GUEST_HINTS, stream(hints_doc(h))).document
    [out] = doc.to_json_dict()["devices"]
    assert out["guest"] == {"pciAddress": "0000:07:00.0"}
    assert out["network"] == {
        "addresses": ["2001:db8::5/64"],
        "routes": [{"destination": "2001:db8::/32", "gateway": "2001:db8::1"}],
    }


# --------------------------------------------------------------------------- config drive


def tagged(**extra):
    return {"type": "nic", "bus": "pci", "address": "07:00.0", "tags": [], **extra}


CONFIG_DRIVE = {
    "uuid": "6d3c",
    "instance_id": "i-1",
    "public_keys": {"k": "ssh-ed25519 AAAA"},
    "devices": [
        tagged(address="0000:07:00.0", mac="02-00-00-3B-02-01", tags=["dra:vm1-nics/nic/0"]),
        tagged(type="hostdev", address="08:1F.7", numaNode=1, alignedCPUs=[2, 3]),
        tagged(bus="ccw", address="0.0.0001"),
    ],
}


def test_config_drive_devices():
    result = check_file("meta_data.json", Role.CONFIG_DRIVE, json.dumps(CONFIG_DRIVE).encode())
    assert (result.errors, result.warnings, result.api_version) == ((), (), None)
    nic, hostdev, ccw = result.document.tagged()
    assert (nic.type, nic.pci_address, nic.mac) == ("nic", "0000:07:00.0", "02:00:00:3b:02:01")
    assert (nic.numa_node, nic.tags) == (None, ["dra:vm1-nics/nic/0"])
    assert (hostdev.type, hostdev.pci_address, hostdev.mac) == ("hostdev", "0000:08:1f.7", None)
    assert (hostdev.numa_node, hostdev.aligned_cp_us) == (1, [2, 3])
    assert (ccw.pci_address, ccw.address) == (None, "0.0.0001")


def test_config_drive_without_devices():
    result = check_file("meta_data.json", Role.CONFIG_DRIVE, b'{"uuid": "x"}')
    assert (result.ok, result.document.tagged(), result.warnings) == (True, [], ())


def test_config_drive_unknown_device_field_is_a_warning():
    data = {"devices": [tagged(x=1)]}
    result = check_file("meta_data.json", Role.CONFIG_DRIVE, json.dumps(data).encode())
    assert found(result.warnings) == [("devices[0].x", "unknown field, ignored")]


@pytest.mark.parametrize(
    ("entry", "path", "message"),
    [
        ({"type": "disk"}, "devices[0].type", "Input should be 'nic' or 'hostdev'"),
        ({"mac": "x"}, "devices[0].mac", "'x' is not a MAC address"),
        ({"address": "0000:07:20.0"}, "devices[0].address", "device number above 1f"),
        ({"numaNode": -1}, "devices[0].numaNode", "greater than or equal to 0"),
        ({"alignedCPUs": [2**32]}, "devices[0].alignedCPUs[0]", "less than or equal to"),
        ({"bus": None}, "devices[0].bus", "valid string"),
    ],
)
def test_config_drive_errors(entry, path, message):
    data = {"devices": [tagged(**entry)]}
    result = check_file("meta_data.json", Role.CONFIG_DRIVE, json.dumps(data).encode())
    [p] = result.errors
    assert (p.source, p.index, p.path) == ("meta_data.json", None, path)
    assert message in p.message
    assert result.document is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "expected one JSON object, found nothing"),
        (b"{} {}", "expected one JSON object, found 2 values"),
        (b"[]", "expected a JSON object, found an array"),
        (b"{", "not valid JSON: Expecting property name enclosed in double quotes"),
        (b'{"devices": {}}', "valid list"),
    ],
)
def test_decode_document_errors(data, message):
    with pytest.raises(SchemaError) as info:
        decode_document(data, ConfigDriveMetadata, source="meta_data.json")
    [p] = info.value.problems
    assert (p.source, p.index) == ("meta_data.json", None)
    assert message in p.message


def test_problem_str_names_file_position_and_path():
    assert str(Problem("bad", SRC, 2, "metadata.name")) == f"{SRC}: stream[2]: metadata.name: bad"
    assert str(Problem("bad")) == "bad"
