import ipaddress
import json

import hypothesis.strategies as st
from builders import HINTS_V1ALPHA1, V1ALPHA1, V1BETA1, V2, metadata_doc, with_device
from hypothesis import given, settings

from kvdev.errors import SchemaError, Severity
from kvdev.schema import (
    DEVICE_METADATA,
    GUEST_HINTS,
    ConfigDriveMetadata,
    DeviceMetadata,
    GuestHints,
    Role,
    check_file,
    decode_document,
    decode_stream,
    encode_stream,
    gojson,
)
from kvdev.schema.metadata import GO_LAYOUT
from kvdev.schema.stream import read_written

ROUND_TRIP = settings(database=None, deadline=None, max_examples=100)
GARBAGE = settings(database=None, deadline=None, max_examples=300)

# --------------------------------------------------------------------------- valid values

label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?", fullmatch=True)
subdomain = st.lists(label, min_size=1, max_size=3).map(".".join)  # <= 50 characters
pool = st.lists(subdomain, min_size=1, max_size=2).map("/".join)
request_name = label | st.tuples(label, label).map("/".join)
c_ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,31}", fullmatch=True)
qualified_name = c_ident | st.tuples(subdomain, c_ident).map("/".join)
utf8 = st.characters(codec="utf-8")
short_text = st.text(utf8, max_size=16)  # at most 64 bytes
int64 = st.integers(-(2**63), 2**63 - 1)

_number = st.integers(0, 999).map(str)
_pre_id = st.integers(0, 99).map(str) | st.from_regex(
    r"[0-9]{0,2}[A-Za-z-][0-9A-Za-z-]{0,3}", fullmatch=True
)
_build_id = st.from_regex(r"[0-9A-Za-z-]{1,4}", fullmatch=True)
semver = st.builds(
    lambda core, pre, build: ".".join(core) + pre + build,
    st.lists(_number, min_size=3, max_size=3),
    st.just("") | st.lists(_pre_id, min_size=1, max_size=3).map(lambda p: "-" + ".".join(p)),
    st.just("") | st.lists(_build_id, min_size=1, max_size=3).map(lambda b: "+" + ".".join(b)),
)


def _one(key, values):
    return values.map(lambda v: {key: v})


def _some(values):
    return st.lists(values, min_size=1, max_size=4)


attribute = st.one_of(
    _one("string", short_text),
    _one("int", int64),
    _one("bool", st.booleans()),
    _one("version", semver),
    _one("strings", _some(short_text)),
    _one("ints", _some(int64)),
    _one("bools", _some(st.booleans())),
    _one("versions", _some(semver)),
)
attributes = st.dictionaries(qualified_name, attribute, max_size=8)  # <= 40 values

cidr = st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 32)),
    st.tuples(st.ip_addresses(v=6), st.integers(0, 128)),
).map(lambda t: f"{t[0]}/{t[1]}")
network = cidr.map(lambda c: str(ipaddress.ip_network(c, strict=False)))
mac = st.builds(
    lambda octets, sep, upper: sep.join(f"{o:02X}" if upper else f"{o:02x}" for o in octets),
    st.lists(st.integers(0, 255), min_size=6, max_size=6)
    | st.lists(st.integers(0, 255), min_size=20, max_size=20),
    st.sampled_from([":", "-"]),
    st.booleans(),
)
network_data = st.fixed_dictionaries(
    {},
    optional={
        "interfaceName": st.text(utf8, max_size=64),
        "ips": st.lists(cidr, max_size=16, unique=True),
        "hardwareAddress": mac | st.text(utf8, max_size=32),
    },
)
device = st.fixed_dictionaries(
    {"driver": subdomain, "pool": pool, "name": label},
    optional={"attributes": attributes, "networkData": network_data},
)
metadata_docs = st.fixed_dictionaries(
    {
        "apiVersion": st.just(V1BETA1),
        "kind": st.just("DeviceMetadata"),
        "metadata": st.fixed_dictionaries(
            {"name": subdomain, "generation": st.integers(0, 2**63 - 1)},
            optional={"namespace": label, "uid": short_text},
        ),
        "requests": st.lists(
            st.fixed_dictionaries({"name": request_name, "devices": st.lists(device, max_size=4)}),
            max_size=3,
        ),
    },
    optional={"podClaimName": label},
)

# --------------------------------------------------------------------------- valid hints

ifname = st.text(  # what the kernel, udev (ifname_valid) and kvdev (no "=", issue 23) accept
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/:%="),
    min_size=1,
    max_size=15,
).filter(lambda s: s not in {".", "..", "all", "default"} and not s.isdigit())
pci = st.builds(
    lambda d, b, dev, f: f"{d:04x}:{b:02x}:{dev:02x}.{f}",
    st.integers(0, 0xFFFFF),
    st.integers(0, 255),
    st.integers(0, 31),
    st.integers(0, 7),
)


@st.composite
def routes(draw):
    destination = draw(network)
    version = ipaddress.ip_network(destination).version
    route = {"destination": destination}
    if draw(st.booleans()):
        route["gateway"] = str(draw(st.ip_addresses(v=version)))
    if draw(st.booleans()):
        route["metric"] = draw(st.integers(0, 2**32 - 1))
    return route


@st.composite
def network_hints(draw):
    out = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "interfaceName": ifname,
                "addresses": st.lists(cidr, max_size=16, unique=True),
                "routes": st.lists(routes(), max_size=4),
            },
        )
    )
    has_v6 = any(":" in a for a in out.get("addresses", []))
    if draw(st.booleans()):
        out["mtu"] = draw(st.integers(1280 if has_v6 else 68, 65535))
    return out


device_hint = st.fixed_dictionaries(
    {
        "claim": _one("resourceClaimName", subdomain) | _one("podClaimName", label),
        "request": request_name,
    },
    optional={
        "driver": subdomain,
        "pool": pool,
        "device": label,
        "guest": st.fixed_dictionaries(
            {}, optional={"pciAddress": pci, "tag": st.text(utf8, min_size=1, max_size=32)}
        ),
        "network": network_hints(),
    },
)


def _selector(hint):
    claim = hint["claim"]
    fields = ("request", "driver", "pool", "device")
    return (tuple(claim.items()), *(hint.get(f) for f in fields))


@st.composite
def hints_docs(draw):
    devices = draw(st.lists(device_hint, max_size=5, unique_by=_selector))
    seen = set()
    for hint in devices:
        net = hint.get("network", {})
        if net.get("interfaceName") in seen:
            del net["interfaceName"]
        elif "interfaceName" in net:
            seen.add(net["interfaceName"])
    meta = draw(
        st.fixed_dictionaries(
            {"generation": st.integers(0, 2**63 - 1)}, optional={"name": subdomain}
        )
    )
    return {
        "apiVersion": HINTS_V1ALPHA1,
        "kind": "GuestHints",
        "metadata": meta,
        "devices": devices,
    }


# --------------------------------------------------------------------------- round trips


@ROUND_TRIP
@given(metadata_docs)
def test_device_metadata_round_trip(doc):
    original = DeviceMetadata.parse(doc)
    assert original.to_json_dict() == doc
    got = decode_stream(encode_stream(original, DEVICE_METADATA), DEVICE_METADATA)
    assert (got.api_version, got.index, got.skipped, got.warnings) == (V1BETA1, 0, (), ())
    assert as_go(got.document.to_json_dict()) == as_go(doc)


@ROUND_TRIP
@given(hints_docs())
def test_guest_hints_round_trip(doc):
    original = GuestHints.parse(doc)
    got = decode_stream(encode_stream(original, GUEST_HINTS), GUEST_HINTS)
    assert (got.api_version, got.index, got.skipped, got.warnings) == (HINTS_V1ALPHA1, 0, (), ())
    assert got.document.to_json_dict() == original.to_json_dict()
    assert got.document == original
    assert len(got.document.devices) == len(doc["devices"])


@ROUND_TRIP
@given(metadata_docs)
def test_device_metadata_read_without_its_text_is_what_its_stream_reads_as(doc):
    original = DeviceMetadata.parse(doc)
    got = decode_stream(encode_stream(original, DEVICE_METADATA), DEVICE_METADATA)
    assert read_written(original, DEVICE_METADATA) == got.document


@ROUND_TRIP
@given(hints_docs())
def test_guest_hints_read_without_their_text_are_what_their_stream_reads_as(doc):
    original = GuestHints.parse(doc)
    got = decode_stream(encode_stream(original, GUEST_HINTS), GUEST_HINTS)
    assert read_written(original, GUEST_HINTS) == got.document


# --------------------------------------------------------------------------- garbage


def _error_of(call, *args, **kwargs):
    """The SchemaError ``call`` raises, or None when it succeeds (any other error escapes)."""
    try:
        call(*args, **kwargs)
    except SchemaError as e:
        return e
    return None


def _must_not_crash(data):
    """Every reader either succeeds or raises SchemaError; check_file never raises."""
    for kind in (DEVICE_METADATA, GUEST_HINTS):
        error = _error_of(decode_stream, data, kind, source="f")
        assert error is None or all(p.source == "f" for p in error.problems)
    _error_of(decode_document, data, ConfigDriveMetadata, source="f")
    for role in Role:
        result = check_file("f", role, data)
        assert (result.document is None) == bool(result.errors)
        assert all(p.severity is Severity.ERROR for p in result.errors)
        assert all(p.severity is Severity.WARNING for p in result.warnings)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
doc_like = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from([V1BETA1, V1ALPHA1, V2, HINTS_V1ALPHA1, 1, None]),
        "kind": st.sampled_from(["DeviceMetadata", "GuestHints", 3]),
    },
    optional={"metadata": json_values, "requests": json_values, "devices": json_values},
)


@GARBAGE
@given(st.binary(max_size=512))
def test_random_bytes(data):
    _must_not_crash(data)


@GARBAGE
@given(st.text(max_size=256))
def test_random_text(text):
    _must_not_crash(text.encode("utf-8", "surrogatepass"))


@GARBAGE
@given(st.lists(json_values | doc_like, min_size=1, max_size=3))
def test_random_json_values(values):
    _must_not_crash("\n".join(json.dumps(v) for v in values).encode())


def _paths(value, here=()):
    yield here
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*here, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*here, i))


@GARBAGE
@given(metadata_docs, st.data())
def test_valid_document_with_one_value_replaced(doc, data):
    path = data.draw(st.sampled_from(list(_paths(doc))[1:]))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = data.draw(json_values)
    _must_not_crash(json.dumps(doc, ensure_ascii=False).encode())


# --------------------------------------------------------------------------- truncation


def as_go(data):
    """JSON data as Go writes it: empty values dropped, keys in struct order."""
    return gojson.go_value(data, GO_LAYOUT)


def _check_prefix(encoded, cut, expected):
    prefix = encoded[:cut]
    first_end = encoded.index(b"\n}\n") + 2  # the first object is encoded[:first_end]
    try:
        got = decode_stream(prefix, DEVICE_METADATA)
    except SchemaError:
        got = None
    if cut < first_end:
        assert got is None
        return
    assert got is not None
    assert (got.api_version, got.index) == (V1BETA1, 0)
    assert as_go(got.document.to_json_dict()) == as_go(expected)
    torn = first_end + 1 < cut < len(encoded) - 1
    assert len(got.warnings) == int(torn)
    if torn:
        assert "torn or partial write" in got.warnings[0].message
        assert got.warnings[0].index == 1


def test_every_prefix_of_a_stream():
    doc = with_device(
        attributes={
            "dra.net/pciAddress": {"string": "0000:3b:02.1"},
            "m": {"string": "Kärtchen €"},
        },
        networkData={
            "ips": ["10.1.0.5/24", "2001:db8::5/64"],
            "hardwareAddress": "02:00:00:3b:02:01",
        },
    )
    encoded = encode_stream(DeviceMetadata.parse(doc), DEVICE_METADATA)
    assert encoded.count(b"\n}\n") == 2  # two objects, each ended by a newline
    for cut in range(len(encoded) + 1):
        _check_prefix(encoded, cut, doc)


@ROUND_TRIP
@given(metadata_docs, st.data())
def test_truncated_generated_stream(doc, data):
    encoded = encode_stream(DeviceMetadata.parse(doc), DEVICE_METADATA)
    _check_prefix(encoded, data.draw(st.integers(0, len(encoded))), doc)


def test_truncation_helper_sees_both_outcomes():
    encoded = encode_stream(DeviceMetadata.parse(metadata_doc()), DEVICE_METADATA)
    first_end = encoded.index(b"\n}\n") + 2
    assert decode_stream(encoded[: first_end + 5], DEVICE_METADATA).warnings[0].index == 1
    error = _error_of(decode_stream, encoded[: first_end - 1], DEVICE_METADATA)
    assert error is not None
    assert error.problems[0].index == 0
