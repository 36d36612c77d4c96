"""What the controller copies of a relayed file: a DeviceMetadata stream of that claim and request.

``relayed.refusal`` reads the bytes with the guest's own reader (``kvdev.schema.stream``): every
object must be a DeviceMetadata of a version the reader knows, decode, and be for the record's
claim, request and driver. Anything else (kvdev's GuestHints first of all, which the guest
would otherwise have taken for the controller's hints) is refused, named; for any bytes the
answer is a reason or None, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_controller_render import KEY, docs, index_of

from kvdev.host.controller.render import render
from kvdev.host.controller.vmievents import Reason
from kvdev.host.publish.relayed import Claim, Record, refusal

UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
CLAIM = Claim("vms", "vm1-devices", UID)
V1ALPHA1 = "metadata.resource.k8s.io/v1alpha1"
V1BETA1 = "metadata.resource.k8s.io/v1beta1"


def metadata(api=V1ALPHA1, **changes):
    body = {
        "apiVersion": api,
        "kind": "DeviceMetadata",
        "metadata": {"name": "vm1-devices", "namespace": "vms", "uid": UID, "generation": 1},
        "requests": [
            {"name": "nic-1", "devices": [{"driver": "sriov.example.com", "name": "vf-1"}]}
        ],
    }
    body.update(changes)
    return body


HINTS = {
    "apiVersion": "guest.kvdev.io/v1alpha1",
    "kind": "GuestHints",
    "metadata": {"generation": 1},
    "devices": [
        {
            "claim": {"resourceClaimName": "vm1-devices"},
            "request": "nic-1",
            "network": {
                "interfaceName": "evil0",
                "primary": True,
                "routes": [
                    {"destination": "0.0.0.0/1", "gateway": "10.1.0.1"},
                    {"destination": "128.0.0.0/1", "gateway": "10.1.0.1"},
                ],
            },
        }
    ],
}


def stream(*objects):
    return "".join(json.dumps(o) + "\n" for o in objects)


def judged(text):
    return refusal(text, CLAIM, "nic-1", "sriov.example.com")


def test_a_drivers_stream_of_that_claim_and_request_is_copied():
    assert judged(stream(metadata(V1BETA1), metadata())) is None
    sub = metadata(requests=[{"name": "nic-1/sriov", "devices": []}])  # a subrequest counts
    assert judged(stream(sub)) is None
    upper = metadata(metadata={"uid": UID.upper()})  # a UID is hex in either case; name absent
    assert judged(stream(upper)) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (stream(HINTS), "stream[0].apiVersion: 'guest.kvdev.io/v1alpha1' is not a version of"),
        (stream(metadata(), HINTS), "stream[1].apiVersion: 'guest.kvdev.io/v1alpha1' is not"),
        (stream({**HINTS, "apiVersion": V1ALPHA1}), "stream[0].kind: must be 'DeviceMetadata'"),
        (stream(metadata("metadata.resource.k8s.io/v9")), "'metadata.resource.k8s.io/v9' is not"),
        (stream(metadata()) + '{"apiVersion": ', "stream[1]: not valid JSON"),
        ("", "the stream holds no object"),
        ("[]", "expected a JSON object, found an array"),
        (stream(metadata(metadata={"generation": 1})), "metadata names no claim"),
        (stream(metadata(metadata={"uid": "0" * 36})), "metadata.uid is '0000"),
        (stream(metadata(metadata={"name": "other", "uid": UID})), "metadata.name is 'other'"),
        (
            stream(metadata(metadata={"name": "vm1-devices", "namespace": "x"})),
            "metadata.namespace is 'x'",
        ),
        (stream(metadata(requests=[])), "no request: the record's key is request 'nic-1'"),
        (stream(metadata(requests=[{"name": "nic-2"}])), "requests[0].name is 'nic-2'"),
        (
            stream(metadata(requests=[{"name": "nic-1", "devices": [{"driver": "gpu.x"}]}])),
            "requests[0].devices[0].driver is 'gpu.x', not the record's driver",
        ),
        (stream(metadata(requests="nic-1")), "not a DeviceMetadata stream: stream[0].requests"),
    ],
)
def test_anything_else_is_refused_and_named(text, reason):
    why = judged(text)
    assert why is not None
    assert reason in why, why


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=10,
)


# Where a mutation lands: each field the check reads, and the objects around them.
PLACES = (
    (),
    ("apiVersion",),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("requests",),
    ("requests", 0),
    ("requests", 0, "name"),
    ("requests", 0, "devices"),
    ("requests", 0, "devices", 0),
    ("requests", 0, "devices", 0, "driver"),
)


@st.composite
def mutated(draw):
    """A good stream with one value anywhere replaced by any JSON, or a GuestHints added."""
    objects = [metadata(V1BETA1), metadata()]
    if draw(st.booleans()):
        objects.insert(draw(st.integers(0, 2)), HINTS)
    i = draw(st.integers(0, len(objects) - 1))
    target = json.loads(json.dumps(metadata() if objects[i] is HINTS else objects[i]))
    path = draw(st.sampled_from(PLACES))
    value = draw(JSON)
    if not path:
        target = value
    else:
        node = target
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    objects[i] = target
    return stream(*objects)


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_any_mutation_is_a_reason_or_none_and_only_device_metadata_is_copied(text):
    why = judged(text)
    assert why is None or isinstance(why, str)
    if why is None:  # copied: every object is a DeviceMetadata of a known version
        for line in text.splitlines():
            value = json.loads(line)
            assert isinstance(value, dict)
            assert value["kind"] == "DeviceMetadata"
            assert value["apiVersion"] in (V1ALPHA1, V1BETA1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_a_reason_or_none(data):
    why = judged(data.decode("utf-8", "replace"))
    assert why is None or isinstance(why, str)


def test_a_refused_file_is_a_warning_and_an_event_on_the_vmi_and_the_reconstruction_stays():
    inputs = index_of(docs()).inputs(KEY)
    assert inputs is not None
    rebuilt = render(inputs).data
    key = "vm1-devices.nic-1.sriov.example.com-metadata.json"
    good, bad = stream(metadata()), stream(HINTS)
    empty = render(
        replace(inputs, relayed=(Record("node-a", UID, {("nic-1", "sriov.example.com"): "\n"}),))
    )
    assert empty.data[key] == rebuilt[key]  # deferred metadata, not written yet: no word
    assert not [n for n in empty.notes if n.reason is Reason.RELAYED_METADATA_REFUSED]
    for text, copied in ((good, True), (bad, False)):
        record = Record("node-a", UID, {("nic-1", "sriov.example.com"): text}, "kvdev-relay-x")
        result = render(replace(inputs, relayed=(record,)))
        assert result.data[key] == (text if copied else rebuilt[key])
        refused = [n for n in result.notes if n.reason is Reason.RELAYED_METADATA_REFUSED]
        warned = [p for p in result.problems if "left out" in p.message]
        assert (len(refused), len(warned)) == ((0, 0) if copied else (1, 1))
    assert refused[0].reason.type == "Warning"
    assert f"the file node node-a relayed for {key} is left out" in refused[0].message
    assert (warned[0].source, warned[0].path) == (
        "ConfigMap/kvdev-relay-x",
        "nic-1.sriov.example.com-metadata.json",
    )
