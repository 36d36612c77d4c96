"""kvdev-host controller's pure half: the ConfigMap contract, generations, hints, the index."""

import copy
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from kvdev.errors import Severity
from kvdev.host import cli
from kvdev.host.commands.controller import index_of_files
from kvdev.host.contract import HINTS_KEY, SOURCES_KEY, configmap_name, vmi_label
from kvdev.host.controller.guests import decode
from kvdev.host.controller.index import Index, Kind, parse
from kvdev.host.controller.render import Inputs, Verb, render
from kvdev.host.controller.vmievents import Reason
from kvdev.host.controller.vmihints import vmi_hints
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.schema import GUEST_HINTS, decode_stream
from kvdev.schema.stream import DEVICE_METADATA

REPO = Path(__file__).resolve().parents[3]
HOST = REPO / "packaging" / "examples" / "host"
TREE = REPO / "packaging" / "examples" / "dra-device-attributes"
FILES = [str(HOST / "claims.yaml"), str(HOST / "slices.yaml"), str(HOST / "vmi.yaml")]
VMI_UID = "3e0c7a9b-6d1f-4b8e-a2c4-9f5d7e1b3a60"
KEY = ("vms", "vm1")
F_ARGS = [a for f in FILES for a in ("-f", f)]


def docs():
    out = []
    for f in FILES:
        for d in yaml.safe_load_all(Path(f).read_text()):
            out.extend(d["items"] if d.get("kind") == "List" else [d])
    return out


def index_of(objects):
    index = Index()
    kinds = {
        "VirtualMachineInstance": Kind.VMI,
        "Pod": Kind.POD,
        "ResourceClaim": Kind.CLAIM,
        "ResourceSlice": Kind.SLICE,
        "ConfigMap": Kind.CONFIGMAP,
    }
    for kind in Kind:
        index.replace(kind, [parse(kind, o) for o in objects if kinds[o["kind"]] is kind])
    return index


def rendered(objects):
    inputs = index_of(objects).inputs(KEY)
    assert inputs is not None
    return render(inputs)


def stored_from(result, resource_version="1"):
    body = copy.deepcopy(result.body)
    body["metadata"]["resourceVersion"] = resource_version
    body["metadata"]["uid"] = "cccccccc-0000-4000-8000-000000000001"
    return body


def by_kind(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def test_every_stream_is_the_host_writers_bytes_under_the_contract_key():
    result = rendered(docs())
    assert result.verb is Verb.CREATE
    expected = {}
    for path in TREE.rglob("*-metadata.json"):
        _, directory, request, filename = path.relative_to(TREE).parts
        # the example's dranet file was updated once (deferred network data): generation 2
        text = path.read_text().replace('"generation": 2', '"generation": 1')
        expected[f"{directory}.{request}.{filename}"] = text
    streams = {k: v for k, v in result.data.items() if k != HINTS_KEY}
    assert streams == expected
    assert set(streams) == {
        "vm1-devices.nic-1.sriov.example.com-metadata.json",
        "vm1-devices.nic-2.sriov.example.com-metadata.json",
        "vm1-devices.gpu.gpu.nvidia.com-metadata.json",
        "fast-nic.nic.dra.net-metadata.json",
    }
    assert result.problems == ()


def test_the_object_is_owned_by_the_vmi_and_labelled():
    body = rendered(docs()).body
    assert body["metadata"] == {
        "name": "kvdev-vm1",
        "namespace": "vms",
        "labels": {"app.kubernetes.io/managed-by": "kvdev-host-controller", "kvdev.io/vmi": "vm1"},
        "annotations": {
            # no node relay's record: every stream is the controller's reconstruction
            "kvdev.io/sources": json.dumps(
                {
                    "fast-nic.nic.dra.net-metadata.json": "reconstructed",
                    "vm1-devices.gpu.gpu.nvidia.com-metadata.json": "reconstructed",
                    "vm1-devices.nic-1.sriov.example.com-metadata.json": "reconstructed",
                    "vm1-devices.nic-2.sriov.example.com-metadata.json": "reconstructed",
                },
                separators=(",", ":"),
            )
        },
        "ownerReferences": [
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "name": "vm1",
                "uid": VMI_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    assert (body["apiVersion"], body["kind"]) == ("v1", "ConfigMap")


def test_hints_come_from_the_vmi_spec():
    data = rendered(docs()).data
    hints = decode_stream(data[HINTS_KEY], GUEST_HINTS).document
    assert hints.metadata.generation == 1
    assert hints.metadata.name == "vm1"
    assert [h.to_json_dict() for h in hints.devices] == [
        {
            "claim": {"resourceClaimName": "vm1-devices"},
            "request": "nic-1",
            "guest": {
                "macAddress": "02:00:00:3b:02:01",
                "pciAddress": "0000:07:00.0",
                "tag": "dra:vm1-devices/nic-1/0",
            },
        },
        {
            "claim": {"resourceClaimName": "vm1-devices"},
            "request": "nic-2",
            "guest": {
                "macAddress": "02:00:00:3b:02:02",
                "pciAddress": "0000:08:00.0",
                "tag": "dra:vm1-devices/nic-2/0",
            },
        },
        {
            "claim": {"podClaimName": "fast-nic"},
            "request": "nic",
            "guest": {
                "macAddress": "0c:42:a1:5e:00:01",
                "pciAddress": "0000:0a:00.0",
                "tag": "dra:fast-nic/nic/0",
            },
        },
        {
            "claim": {"resourceClaimName": "vm1-devices"},
            "request": "gpu",
            "guest": {"tag": "dra:vm1-devices/gpu/0"},
        },
    ]


def _with_binding_plugin(vmi, index, mac):
    """Interface ``index`` through a network binding plugin, with ``mac`` as its macAddress."""
    interface = vmi["spec"]["domain"]["devices"]["interfaces"][index]
    interface.pop("sriov", None)
    interface["binding"] = {"name": "kvdev-e2e-plugin"}
    interface["macAddress"] = mac
    return vmi


def _with_sriov(vmi, index, mac):
    """Interface ``index`` as a DRA SR-IOV interface (KubeVirt <= v1.9), with ``mac``."""
    interface = vmi["spec"]["domain"]["devices"]["interfaces"][index]
    interface.pop("binding", None)
    interface["sriov"] = {}
    interface["macAddress"] = mac
    return vmi


def test_a_dra_sriov_interfaces_mac_is_not_the_guests_and_stays_out_of_the_hint():
    """KubeVirt's CreateDRAHostDevices gives a DRA SR-IOV VF no MAC: the driver's is the one."""
    vmi = _with_sriov(by_kind(docs(), "VirtualMachineInstance", "vm1"), 1, "52:54:00:00:00:01")
    hints, warnings = vmi_hints(VirtualMachineInstance.model_validate(vmi))
    nic = hints.devices[0].to_json_dict()
    assert nic["request"] == "nic-1"
    assert "macAddress" not in nic["guest"]
    assert [w.path for w in warnings] == ["spec.domain.devices.interfaces[1].macAddress"]
    assert "DRA SR-IOV interface" in warnings[0].message
    assert "networkData.hardwareAddress" in warnings[0].message


def test_a_refused_mac_is_a_hint_refused_note_and_a_clean_vmi_has_none():
    assert rendered(docs()).notes == ()
    objects = docs()
    _with_sriov(by_kind(objects, "VirtualMachineInstance", "vm1"), 1, "52:54:00:00:00:01")
    (note,) = rendered(objects).notes
    assert note.reason is Reason.HINT_REFUSED
    assert note.message.startswith("spec.domain.devices.interfaces[1].macAddress: KubeVirt does")


def test_a_binding_plugin_interfaces_mac_is_the_guests():
    """Through a network binding plugin KubeVirt puts macAddress on the domain's interface."""
    vmi = _with_binding_plugin(
        by_kind(docs(), "VirtualMachineInstance", "vm1"), 1, "52:54:00:00:00:01"
    )
    hints, warnings = vmi_hints(VirtualMachineInstance.model_validate(vmi))
    assert hints.devices[0].to_json_dict()["guest"]["macAddress"] == "52:54:00:00:00:01"
    assert warnings == ()


def test_a_value_kvdev_cannot_use_costs_only_itself():
    vmi = _with_binding_plugin(by_kind(docs(), "VirtualMachineInstance", "vm1"), 1, "not-a-mac")
    vmi["spec"]["domain"]["devices"]["gpus"][0]["claimName"] = "nope"
    hints, warnings = vmi_hints(VirtualMachineInstance.model_validate(vmi))
    first = hints.devices[0].to_json_dict()["guest"]
    assert first == {"pciAddress": "0000:07:00.0", "tag": "dra:vm1-devices/nic-1/0"}
    assert [w.path for w in warnings] == [
        "spec.domain.devices.interfaces[1].macAddress",
        "spec.domain.devices.gpus[0]",
    ]
    assert all(w.severity is Severity.WARNING for w in warnings)
    assert "VirtualMachineInstance/vms/vm1" in warnings[0].message
    assert len(hints.devices) == 3  # no GPU hint


def test_nothing_changed_means_no_write():
    objects = docs()
    first = rendered(objects)
    again = rendered([*objects, stored_from(first)])
    assert again.verb is Verb.NONE
    assert again.body is None
    assert again.data == first.data


def test_a_changed_claim_status_bumps_only_its_streams_generation():
    objects = docs()
    first = rendered(objects)
    claim = by_kind(objects, "ResourceClaim", "vm1-devices")
    claim["status"]["devices"][0]["networkData"]["ips"] = ["10.1.0.99/24"]
    result = rendered([*objects, stored_from(first)])
    assert result.verb is Verb.UPDATE
    assert result.resource_version == "1"
    changed = {k for k in first.data if first.data[k] != result.data[k]}
    assert changed == {"vm1-devices.nic-1.sriov.example.com-metadata.json"}
    doc = decode_stream(result.data[next(iter(changed))], DEVICE_METADATA).document
    assert doc.generation == 2
    assert doc.requests[0].devices[0].network_data.ips == ["10.1.0.99/24"]
    gens = {
        k: decode_stream(v, DEVICE_METADATA).document.generation
        for k, v in result.data.items()
        if k != HINTS_KEY
    }
    assert sorted(gens.values()) == [1, 1, 1, 2]
    # the update keeps the stored object's identity and what others put on it
    assert result.body["metadata"]["resourceVersion"] == "1"
    assert result.body["metadata"]["uid"] == "cccccccc-0000-4000-8000-000000000001"


def test_a_recreated_claim_restarts_at_generation_1_and_hints_keep_theirs():
    objects = docs()
    first = rendered(objects)
    stored = stored_from(first)
    key = "vm1-devices.nic-1.sriov.example.com-metadata.json"
    doc = json.loads(stored["data"][key].split("\n}\n")[0] + "\n}")
    doc["metadata"]["generation"] = 7
    stored["data"][key] = stored["data"][key].replace('"generation": 1', '"generation": 7')
    claim = by_kind(objects, "ResourceClaim", "vm1-devices")
    claim["metadata"]["uid"] = "8c1d2f55-2a0e-4c8e-9e1b-000000000002"
    result = rendered([*objects, stored])
    assert decode_stream(result.data[key], DEVICE_METADATA).document.generation == 1
    hints = decode_stream(result.data[HINTS_KEY], GUEST_HINTS).document
    assert hints.metadata.generation == 1  # same content: kept


def test_changed_hints_take_the_next_generation():
    objects = docs()
    stored = stored_from(rendered(objects))
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    vmi["spec"]["domain"]["devices"]["gpus"][0]["tag"] = "gpu-a"
    result = rendered([*objects, stored])
    hints = decode_stream(result.data[HINTS_KEY], GUEST_HINTS).document
    assert hints.metadata.generation == 2
    assert [k for k in result.data if result.data[k] != stored["data"][k]] == [HINTS_KEY]


def test_a_configmap_kvdev_does_not_manage_is_left_alone():
    objects = docs()
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kvdev-vm1", "namespace": "vms", "resourceVersion": "3"},
        "data": {"x": "y"},
    }
    result = rendered([*objects, foreign])
    assert result.verb is Verb.REFUSE
    assert result.body is None
    assert "not managed by kvdev-host-controller" in result.errors[0].message
    (note,) = result.notes  # the Event on the VMI
    assert note.reason is Reason.CONFIGMAP_NOT_OWNED
    assert note.message.startswith("ConfigMap/vms/kvdev-vm1 exists and is not managed")


def test_waiting_claims_give_hints_only_and_say_why():
    objects = docs()
    by_kind(objects, "ResourceClaim", "vm1-devices")["status"] = {}
    pod = by_kind(objects, "Pod", "virt-launcher-vm1-abcde")
    pod["status"]["resourceClaimStatuses"] = []
    result = rendered(objects)
    assert result.verb is Verb.CREATE
    assert list(result.data) == [HINTS_KEY]
    messages = [p.message for p in result.problems]
    assert any("waiting for ResourceClaim/vms/vm1-devices to be allocated" in m for m in messages)
    assert any("waiting for the claim generated for 'fast-nic'" in m for m in messages)
    assert not result.errors
    pending = [n.message for n in result.notes if n.reason is Reason.CLAIM_PENDING]
    assert "spec.resourceClaims[0]: waiting for ResourceClaim/vms/vm1-devices to be allocated" in (
        pending
    )
    assert len(pending) == 2
    assert all(not m.startswith("VirtualMachineInstance/") for m in pending)  # the Event's object


def test_a_claim_that_cannot_be_built_keeps_its_stored_keys():
    objects = docs()
    stored = stored_from(rendered(objects))
    gpu_slice = by_kind(objects, "ResourceSlice", "node-a-gpu.nvidia.com-k2")
    gpu_slice["spec"]["devices"] = []
    claim = by_kind(objects, "ResourceClaim", "vm1-devices")
    claim["status"]["devices"][0]["networkData"]["ips"] = ["10.1.0.99/24"]
    result = rendered([*objects, stored])
    assert result.verb is Verb.NONE  # vm1-devices' keys kept as stored: nothing to write
    assert result.data == stored["data"]
    assert "gpu-vfio-0 is in none of the ResourceSlices" in result.errors[0].message
    assert result.errors[0].path == "status.allocation.devices.results[2]"


def test_a_vmi_without_dra_gets_nothing_and_a_finished_one_is_left_alone():
    objects = docs()
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    plain = copy.deepcopy(vmi)
    del plain["spec"]["resourceClaims"]
    pod = copy.deepcopy(by_kind(objects, "Pod", "virt-launcher-vm1-abcde"))
    del pod["spec"]["resourceClaims"], pod["status"]["resourceClaimStatuses"]  # its pod names none
    rest = [o for o in objects if o is not vmi and o["kind"] != "Pod"]
    assert rendered([*rest, plain, pod]).verb is Verb.NONE
    vmi["status"]["phase"] = "Succeeded"
    assert rendered(objects).verb is Verb.NONE


DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")


@pytest.mark.parametrize("length", [63, 64, 247, 248, 253])
def test_a_long_vmi_name_gets_a_valid_configmap_name_and_label(length):
    """A VMI name may have 253 characters: kvdev-<name> and the label are cut and hashed
    (they were refused past 63)."""
    objects = docs()
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    name = ("vm-" + "a.b-" * 70)[: length - 1] + "z"
    vmi["metadata"]["name"] = name
    result = render(index_of(objects).inputs(("vms", name)))
    assert result.verb is Verb.CREATE, result.problems
    meta = result.body["metadata"]
    assert len(meta["name"]) <= 253
    assert DNS_SUBDOMAIN.match(meta["name"]), meta["name"]
    label = meta["labels"]["kvdev.io/vmi"]
    assert len(label) <= 63
    assert LABEL_VALUE.match(label), label
    if length <= 247:
        assert meta["name"] == f"kvdev-{name}"
    else:
        assert len(meta["name"]) >= 253 - 2  # cut back to end in a letter or digit
        assert meta["name"].startswith(f"kvdev--{name[:200]}")
    if length <= 63:
        assert label == name
    else:
        assert label.startswith(name[:40])
        assert "_" in label
    assert meta["ownerReferences"][0]["name"] == name


def test_long_vmi_names_sharing_a_prefix_get_distinct_names():
    first, second = "v" * 252 + "1", "v" * 252 + "2"
    assert configmap_name(first) != configmap_name(second)
    assert len(configmap_name(first)) == 253
    assert vmi_label(first) != vmi_label(second)
    assert configmap_name("v" * 247) == "kvdev-" + "v" * 247  # fits: as it is
    assert configmap_name("v" * 245 + ".x") == "kvdev-" + "v" * 245 + ".x"
    cut = configmap_name("v" * 230 + "-" * 20 + "w")  # cut inside the dashes: none kept
    assert cut == "kvdev--" + "v" * 230 + "-" + cut[-10:]
    assert DNS_SUBDOMAIN.match(cut)


def test_a_change_of_a_long_named_vmis_configmap_reaches_that_vmi():
    objects = docs()
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    name = "v" * 100
    vmi["metadata"]["name"] = name
    index = index_of(objects)
    body = render(index.inputs(("vms", name))).body
    stored = {**copy.deepcopy(body), "apiVersion": "v1", "kind": "ConfigMap"}
    stored["metadata"]["resourceVersion"] = "5"
    assert index.upsert(Kind.CONFIGMAP, parse(Kind.CONFIGMAP, stored)) == {("vms", name)}


def test_the_index_routes_each_change_to_the_vmi_it_concerns():
    objects = docs()
    index = index_of(objects)
    assert index.vmis() == [KEY]

    def changed(kind, name, mutate):
        obj = copy.deepcopy(by_kind(objects, kind.kind, name))
        mutate(obj)
        return index.upsert(kind, parse(kind, obj))

    def bump(obj):
        obj["metadata"]["resourceVersion"] = "99"

    assert changed(Kind.CLAIM, "vm1-devices", bump) == {KEY}
    assert changed(Kind.CLAIM, "virt-launcher-vm1-fast-nic-q7w2x", bump) == {KEY}
    assert changed(Kind.SLICE, "node-a-dra.net-p9", bump) == {KEY}
    assert changed(Kind.POD, "virt-launcher-vm1-abcde", bump) == {KEY}
    assert changed(Kind.VMI, "vm1", bump) == {KEY}
    other = copy.deepcopy(by_kind(objects, "ResourceSlice", "node-a-dra.net-p9"))
    other["metadata"]["name"] = "node-b"
    other["spec"]["pool"]["name"] = "node-b"
    assert index.upsert(Kind.SLICE, parse(Kind.SLICE, other)) == set()
    # a re-list of the same versions concerns nobody
    unchanged = index.replace(Kind.CLAIM, [index.get(Kind.CLAIM, ("vms", "vm1-devices"))])
    assert unchanged == {KEY}  # the other claim is gone from the list: its VMI is concerned
    assert index.replace(Kind.CLAIM, [index.get(Kind.CLAIM, ("vms", "vm1-devices"))]) == set()


def test_once_prints_yaml_that_round_trips_to_the_same_bytes(capsys):
    assert cli.main(["controller", "--once", *F_ARGS]) == 0
    captured = capsys.readouterr()
    printed = yaml.safe_load(captured.out)
    expected = render(index_of_files(FILES, io.StringIO()).inputs(KEY))
    assert printed == expected.body
    assert captured.err == (
        "kvdev-host controller: vms/vm1: create ConfigMap vms/kvdev-vm1 "
        "(4 stream(s) + guest-hints.json)\n"
    )
    assert "  guest-hints.json: |\n" in captured.out


def test_once_json_is_a_list_and_errors_exit_1(tmp_path, capsys):
    args = ["controller", "--once", *F_ARGS, "-o", "json"]
    assert cli.main(args) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["kvdev-vm1"]
    foreign = tmp_path / "cm.yaml"
    foreign.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kvdev-vm1, namespace: vms}\n"
    )
    assert cli.main([*args, "-f", str(foreign)]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["items"] == []
    assert "refused" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["controller", "--once"], "--once needs -f FILE"),
        (["controller", "-f", "x.yaml"], "-f needs --once"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_invalid_input_names_the_object_and_field(tmp_path, capsys):
    bad = tmp_path / "vmi.yaml"
    bad.write_text(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n"
        "metadata: {name: vm1, namespace: vms}\nspec: {networks: [{name: 3}]}\n"
    )
    assert cli.main(["controller", "--once", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "VirtualMachineInstance/vms/vm1" in err
    assert "spec.networks[0].name" in err


def test_inputs_defaults_are_empty():
    vmi = VirtualMachineInstance.model_validate(by_kind(docs(), "VirtualMachineInstance", "vm1"))
    result = render(Inputs(vmi=vmi))
    assert result.verb is Verb.CREATE
    assert list(result.data) == [HINTS_KEY]


def _impostor(objects, *, namespace, controller):
    """A pod naming vm1's UID as its owner, mapping the template claim to another claim."""
    pod = copy.deepcopy(by_kind(objects, "Pod", "virt-launcher-vm1-abcde"))
    pod["metadata"].update(name="impostor", namespace=namespace, uid="eeeeeeee-0000-4000-8000-1")
    pod["metadata"]["ownerReferences"][0]["controller"] = controller
    pod["status"]["resourceClaimStatuses"] = [
        {"name": "fast-nic", "resourceClaimName": "vm1-devices"}
    ]
    return pod


@pytest.mark.parametrize(
    ("namespace", "controller"),
    [("elsewhere", True), ("vms", False), ("vms", None)],
    ids=["other-namespace", "not-the-controller", "no-controller-field"],
)
def test_only_a_pod_of_the_vmis_namespace_that_it_controls_names_its_claims(namespace, controller):
    objects = docs()
    impostor = _impostor(objects, namespace=namespace, controller=controller)
    if controller is None:
        del impostor["metadata"]["ownerReferences"][0]["controller"]
    alone = rendered(objects).body
    assert rendered([*objects, impostor]).body == alone  # next to the real pod: no say
    without_pod = [o for o in objects if o["kind"] != "Pod"]
    assert rendered([*without_pod, impostor]).body == rendered(without_pod).body  # nor alone
    index = index_of(objects)
    assert index.upsert(Kind.POD, parse(Kind.POD, impostor)) <= {(namespace, "vm1")} - {KEY}


def test_a_bundle_of_more_keys_than_the_agent_reads_is_refused_and_nothing_written():
    """was: 289 keys rendered and written; the agent read the first 256 and said nothing."""
    from kvdev.schema.tree import CONFIGMAP_MAX_KEYS  # noqa: PLC0415

    objects = docs()
    claim = by_kind(objects, "ResourceClaim", "vm1-devices")
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    copies = []
    for n in range(CONFIGMAP_MAX_KEYS // 3 + 1):  # 3 keys each (nic-1, nic-2, gpu)
        c = copy.deepcopy(claim)
        c["metadata"].update(name=f"vm1-devices-{n}", uid=f"dddddddd-0000-4000-8000-{n:012d}")
        copies.append(c)
        vmi["spec"]["resourceClaims"].append(
            {"name": f"devices-{n}", "resourceClaimName": f"vm1-devices-{n}"}
        )
    result = rendered([*objects, *copies])
    assert len(result.data) > CONFIGMAP_MAX_KEYS
    assert result.verb is Verb.REFUSE
    assert result.body is None
    assert any(
        f"over the {CONFIGMAP_MAX_KEYS} keys kvdev-agent reads" in p.message for p in result.errors
    )
    (note,) = result.notes  # one Event on the VMI says so
    assert note.reason is Reason.CONFIGMAP_REFUSED
    assert note.message.startswith(f"the bundle is {len(result.data)} keys")


def test_the_vmis_own_interfaces_are_protected_nics_and_its_dra_ones_are_not():
    """The pod network's NIC, by KubeVirt's reported MAC and its PCI address: never touched."""
    vmi = by_kind(docs(), "VirtualMachineInstance", "vm1")
    vmi["spec"]["domain"]["devices"]["interfaces"][0]["pciAddress"] = "0000:01:00.0"
    vmi["spec"]["domain"]["devices"]["interfaces"][0]["macAddress"] = "02:00:00:00:00:09"
    vmi["status"]["interfaces"] = [
        {"name": "default", "mac": "52:54:00:AB:CD:EF", "interfaceName": "eth0"},
        {"name": "data0", "mac": "52:54:00:00:00:01"},  # a DRA NIC: not protected
        {"mac": "52:54:00:00:00:02"},  # a NIC the guest agent reports with no network
    ]
    hints, warnings = vmi_hints(VirtualMachineInstance.model_validate(vmi))
    assert not warnings
    assert hints.to_json_dict()["protectedNICs"] == [
        {"macAddress": "52:54:00:ab:cd:ef", "pciAddress": "0000:01:00.0"}
    ]
    assert len(hints.devices) == 4  # the DRA hints as before


def test_a_protected_nics_value_kvdev_cannot_use_costs_only_itself():
    vmi = by_kind(docs(), "VirtualMachineInstance", "vm1")
    vmi["spec"]["domain"]["devices"]["interfaces"][0]["pciAddress"] = "not-pci"
    vmi["status"]["interfaces"] = [{"name": "default", "mac": "52:54:00:ab:cd:ef"}]
    hints, warnings = vmi_hints(VirtualMachineInstance.model_validate(vmi))
    assert hints.to_json_dict()["protectedNICs"] == [{"macAddress": "52:54:00:ab:cd:ef"}]
    assert [w.path for w in warnings] == ["spec.domain.devices.interfaces[0].pciAddress"]
    assert "cannot be a protectedNICs pciAddress" in warnings[0].message


def test_a_vmi_without_its_own_interfaces_gets_no_protected_nics_key():
    vmi = by_kind(docs(), "VirtualMachineInstance", "vm1")
    hints, _ = vmi_hints(VirtualMachineInstance.model_validate(vmi))
    assert "protectedNICs" not in hints.to_json_dict()


def _crowded(objects):
    """Two more VMIs: one with 65 own interfaces, one with 257 claimed host devices."""
    base = by_kind(objects, "VirtualMachineInstance", "vm1")
    nics = copy.deepcopy(base)
    nics["metadata"].update(name="vm-nics", uid="3e0c7a9b-6d1f-4b8e-a2c4-000000000065")
    devices = nics["spec"]["domain"]["devices"]
    for n in range(65):
        nics["spec"]["networks"].append({"name": f"own{n}", "pod": {}})
        mac = f"02:00:00:00:01:{n:02x}"
        devices["interfaces"].append({"name": f"own{n}", "masquerade": {}, "macAddress": mac})
    many = copy.deepcopy(base)
    many["metadata"].update(name="vm-many", uid="3e0c7a9b-6d1f-4b8e-a2c4-000000000257")
    many["spec"]["domain"]["devices"]["hostDevices"] = [
        {"name": f"d{n}", "claimName": "devices", "requestName": f"r{n}", "tag": f"t{n}"}
        for n in range(257)
    ]
    return [nics, many]


def test_more_hints_or_own_nics_than_a_document_holds_are_capped_with_a_warning():
    objects = docs()
    nics, many = (VirtualMachineInstance.model_validate(v) for v in _crowded(objects))
    hints, warnings = vmi_hints(nics)
    assert len(hints.protected_nics or []) == 64
    assert [w.path for w in warnings] == ["spec.domain.devices.interfaces[68]"]
    assert "more than 64 own interfaces" in warnings[0].message
    hints, warnings = vmi_hints(many)
    assert len(hints.devices) == 256
    assert [w.path for w in warnings] == ["spec.domain.devices.hostDevices[252]"]  # after vm1's 4
    assert "more than 256 device hints" in warnings[0].message


def test_once_renders_every_vmi_when_one_holds_more_than_a_document_can(tmp_path, capsys):
    crowded = tmp_path / "crowded.yaml"
    crowded.write_text(yaml.safe_dump_all(_crowded(docs())))
    assert cli.main(["controller", "--once", *F_ARGS, "-f", str(crowded), "-o", "json"]) == 0
    captured = capsys.readouterr()
    names = [i["metadata"]["name"] for i in json.loads(captured.out)["items"]]
    assert names == ["kvdev-vm-many", "kvdev-vm-nics", "kvdev-vm1"]
    assert (
        "warning: spec.domain.devices.interfaces[68]: VirtualMachineInstance/vms/vm-nics: "
        "more than 64 own interfaces" in captured.err
    )
    assert (
        "warning: spec.domain.devices.hostDevices[252]: VirtualMachineInstance/vms/vm-many: "
        "more than 256 device hints" in captured.err
    )


def _controlled_by(uid, name="vm-other"):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kvdev-vm1",
            "namespace": "vms",
            "resourceVersion": "3",
            "labels": {"app.kubernetes.io/managed-by": "kvdev-host-controller"},
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {"guest-hints.json": "theirs"},
    }


def test_another_vmis_configmap_is_never_written_and_the_event_names_both():
    other = "99999999-0000-4000-8000-000000000001"
    result = rendered([*docs(), _controlled_by(other)])
    assert result.verb is Verb.REFUSE
    assert result.body is None
    (note,) = result.notes
    assert note.reason is Reason.CONFIGMAP_OTHER_OWNER
    assert note.message == (
        "ConfigMap/vms/kvdev-vm1 is controlled by VirtualMachineInstance/vms/vm-other (uid "
        f"{other}), not by VirtualMachineInstance/vms/vm1 (uid {VMI_UID}): left alone"
    )
    assert result.errors[0].path == "metadata.ownerReferences"
    # its own, or one no object controls (the label says it is kvdev's): written
    assert rendered([*docs(), _controlled_by(VMI_UID, "vm1")]).verb is Verb.UPDATE
    unowned = _controlled_by(other)
    del unowned["metadata"]["ownerReferences"]
    assert rendered([*docs(), unowned]).verb is Verb.UPDATE


def test_the_documents_handed_on_are_the_rebuilt_streams_and_the_hints_read_as_their_text():
    objects = docs()
    result = rendered(objects)
    streams = {k for k in result.data if k not in (HINTS_KEY, SOURCES_KEY)}
    assert set(result.documents) == {*streams, HINTS_KEY}
    assert decode(result.data, result.documents) == decode(result.data)
    assert decode(result.data).devices  # something was compared
    # a claim that cannot be built keeps its stored keys: those have no document
    gpu_slice = by_kind(objects, "ResourceSlice", "node-a-gpu.nvidia.com-k2")
    gpu_slice["spec"]["devices"] = []
    kept = rendered([*objects, stored_from(result)])
    kept_keys = {k for k in kept.data if k.startswith("vm1-devices.")}
    assert kept_keys
    assert set(kept.documents) == set(kept.data) - kept_keys
    assert decode(kept.data, kept.documents) == decode(kept.data)
