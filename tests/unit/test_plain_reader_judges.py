"""The plain reader agrees with pydantic models of the same documents, error for error.

The agent and ``kvdev`` read DeviceMetadata, GuestHints and the config drive with
``kvdev.schema`` (no pydantic); pydantic models of the same documents (``tests/pydantic_schema``)
judge it: on generated streams (valid documents in every layout) and hostile ones (upstream's
reader oracle's mutations, and valid documents with 1-3 values replaced, dropped or added),
both readers must refuse with the same problems (file, stream index, field, message) or read
the same document with the same warnings. ``judges.PLAIN_DIFFERS`` names where they may differ
(nowhere so far). The counts of agreements are printed at the end of the module.

Upstream's decoder is the other judge (tests/unit/test_metadata_reader_oracle.py, which also
runs both readers on every stream it sends upstream).
"""

from __future__ import annotations

import copy
import json

import pytest
from builders import HINTS_V1ALPHA1, V1ALPHA1, V1BETA1, hint, hints_doc, metadata_doc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from judges import TALLY, print_counts, verdict
from test_metadata_reader_oracle import hostile, streams
from test_stream_properties import hints_docs, mac, metadata_docs, pci

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CONFIG_DRIVE = "ConfigDrive"

# What a hostile value may be: every JSON type, the edges of each rule kvdev checks.
ODD = [
    None,
    "",
    "x",
    "X_1",
    "nic",
    0,
    -1,
    1.5,
    True,
    2**63,
    -(2**63) - 1,
    2**64,
    [],
    {},
    [1],
    ["a", "a"],
    {"a": 1},
    {"string": "x"},
    "x" * 300,
    "02:00:00:00:00:01",
    "02-00-00-00-00-0G",
    "10.0.0.1/24",
    "10.0.0.1",
    "2001:DB8::1/64",
    "0000:00:01.0",
    "00:20.0",
    "1.2.3",
    "v1.2.3",
    "eth0",
    "all",
    67,
    1279,
    65536,
    2**32,
    "a/b",
    "Bad.Name/x",
]


def _slots(value: object) -> list[tuple[object, object]]:
    """Every (container, key) inside ``value``, without recursion."""
    out: list[tuple[object, object]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.extend((item, k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            out.extend((item, i) for i in range(len(item)))
            stack.extend(item)
    return out


@st.composite
def mutated(draw: st.DrawFn, docs: st.SearchStrategy[dict]) -> dict:
    """A valid document with 1-3 values replaced by odd ones, dropped, or keys added."""
    doc = copy.deepcopy(draw(docs))
    for _ in range(draw(st.integers(1, 3))):
        slots = [(c, k) for c, k in _slots(doc) if k not in ("apiVersion", "kind")]
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        how = draw(st.sampled_from(["set", "set", "drop", "add"]))
        if how == "set":
            container[key] = copy.deepcopy(draw(st.sampled_from(ODD)))  # type: ignore[index]
        elif how == "drop" and isinstance(container, dict):
            del container[key]
        elif isinstance(container, dict):
            name = draw(st.sampled_from(["extra", "int_", "mac_address", "Name", "x/y"]))
            container[name] = copy.deepcopy(draw(st.sampled_from(ODD)))
    return doc


def lines(*objects: object) -> bytes:
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects).encode()


@st.composite
def metadata_streams(draw: st.DrawFn) -> bytes:
    doc = draw(mutated(metadata_docs))
    versions = draw(st.sampled_from([[V1BETA1, V1ALPHA1], [V1ALPHA1], [V1BETA1]]))
    return lines(*({**doc, "apiVersion": v} for v in versions))


protected_nic = st.fixed_dictionaries(
    {},
    optional={"name": st.sampled_from(["default", "mgmt"]), "macAddress": mac, "pciAddress": pci},
).filter(lambda nic: "macAddress" in nic or "pciAddress" in nic)


@st.composite
def hints_with_protected(draw: st.DrawFn) -> dict:
    doc = draw(hints_docs())
    if draw(st.booleans()):
        doc["protectedNICs"] = draw(st.lists(protected_nic, max_size=4))
    return doc


tagged_device = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["nic", "hostdev"]),
        "bus": st.sampled_from(["pci", "usb"]),
        "address": pci.map(str.upper),
    },
    optional={
        "mac": mac,
        "serial": st.just("s1"),
        "numaNode": st.integers(0, 7),
        "alignedCPUs": st.lists(st.integers(0, 63), max_size=4),
        "tags": st.lists(st.sampled_from(["dra:vm1-nics/nic/0", "gpu"]), max_size=2),
    },
)
config_drives = st.fixed_dictionaries(
    {"uuid": st.just("c1")}, optional={"devices": st.lists(tagged_device, max_size=4)}
)


@pytest.fixture(scope="module", autouse=True)
def print_tally(request: pytest.FixtureRequest):
    yield
    print_counts(request, "plain reader agrees with pydantic", TALLY)


def judged(data: bytes, kind: str, family: str) -> None:
    TALLY[family, verdict(data, kind)] += 1


@SETTINGS
@given(streams())
def test_plain_reader_agrees_on_generated_metadata(data):
    judged(data, "DeviceMetadata", "generated DeviceMetadata")


@SETTINGS
@given(hostile())
def test_plain_reader_agrees_on_hostile_metadata(data):
    judged(data, "DeviceMetadata", "hostile DeviceMetadata (oracle's mutations)")


@SETTINGS
@given(metadata_streams())
def test_plain_reader_agrees_on_mutated_metadata(data):
    judged(data, "DeviceMetadata", "mutated DeviceMetadata")


@SETTINGS
@given(hints_with_protected())
def test_plain_reader_agrees_on_generated_hints(doc):
    judged(lines(doc), "GuestHints", "generated GuestHints")


@SETTINGS
@given(mutated(hints_with_protected()))
def test_plain_reader_agrees_on_mutated_hints(doc):
    judged(lines(doc), "GuestHints", "mutated GuestHints")


@SETTINGS
@given(config_drives)
def test_plain_reader_agrees_on_generated_config_drives(doc):
    judged(json.dumps(doc).encode(), CONFIG_DRIVE, "generated config drive")


@SETTINGS
@given(mutated(config_drives))
def test_plain_reader_agrees_on_mutated_config_drives(doc):
    judged(json.dumps(doc).encode(), CONFIG_DRIVE, "mutated config drive")


_MANY_IPS = [{"name": "n", "devices": [{"networkData": {"ips": ["10.0.0.1/32"] * 17}}]}]
_MAC = {"macAddress": "02:00:00:00:00:01"}
EXAMPLES = {  # one of each problem kind, so that each is judged whatever hypothesis draws
    "wrong types": {**metadata_doc(), "metadata": {"name": 1, "generation": "1"}},
    "too many IPs": metadata_doc()
    | {"requests": [{"name": "n", "devices": [{"networkData": {"ips": ["10.0.0.1/32"] * 17}}]}]},
    "hints clash": hints_doc(hint(), hint()),
    "protected NIC without address": hints_doc() | {"protectedNICs": [{"name": "default"}]},
    "65 protected NICs": hints_doc()
    | {"protectedNICs": [{"macAddress": "02:00:00:00:00:01"}] * 65},
    "protected NIC with a bad MAC": hints_doc() | {"protectedNICs": [{"macAddress": "nope"}]},
    "hints missing claim": hints_doc({"request": "nic"}),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_plain_reader_agrees_on_each_problem_kind(name):
    doc = EXAMPLES[name]
    kind = "GuestHints" if doc["apiVersion"] == HINTS_V1ALPHA1 else "DeviceMetadata"
    assert verdict(lines(doc), kind) == ("read" if name == "too many IPs" else "refused")
    TALLY["named examples", verdict(lines(doc), kind)] += 1
