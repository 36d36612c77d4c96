"""Upstream's metadata reader judges kvdev's: every device upstream keeps, kvdev keeps.

The oracle is ``build/upstream/bin/metadatareader`` (tests/upstream/cmd/metadatareader):
K/DRA ``devicemetadata.DecodeMetadataFromStream`` v0.37.2 on an ``encoding/json`` Decoder,
into the internal type, printed back as v1beta1 JSON. kvdev's reader is
``kvdev.schema.stream.decode_stream`` (what ``kvdev-agent`` and ``kvdev metadata validate`` use).

For every stream, generated (valid documents in every layout a writer may use) and hostile
(invalid UTF-8 inside strings, keys spelled ``ApiVersion``/``KIND``/with a long s or a Kelvin
sign, duplicate keys, deep nesting, huge numbers, the probe values of issue 13), one of:

* upstream decodes it: kvdev decodes it too, from the same version, and keeps the same
  metadata, podClaimName and every request and device (driver, pool, name, attributes,
  networkData) upstream keeps;
* upstream refuses it: kvdev refuses it too, or reads it for a reason named in ``DIFFERS``
  (the README's "deliberately differs" table lists each).

Every stream is also read by the host's pydantic models (``judges.verdict``), which must agree
with kvdev's plain reader in every problem and warning. The counts of agreements with both
judges are printed at the end of the module.

Upstream's golden streams (``api/metadata/testdata/HEAD`` and every released copy, copied at
test time from the module cache, never committed) are read by kvdev with every device kept.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import V1ALPHA1, V1BETA1, V2, metadata_doc, with_attrs, with_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from judges import print_counts, verdict
from test_stream_properties import metadata_docs

from kvdev.errors import SchemaError
from kvdev.schema import DEVICE_METADATA, decode_stream, gojson
from kvdev.schema.metadata import GO_LAYOUT
from upstreamlab import JsonLines

pytestmark = pytest.mark.upstream

UPSTREAM = Path(__file__).resolve().parents[1] / "upstream"

# Where kvdev reads a stream upstream's reader refuses, on purpose (README: "deliberately
# differs"). Each names the condition under which a case counts as that difference.
DIFFERS = {
    "fallback": "an object before the one kvdev reads cannot be decoded (a known version that "
    "does not decode, or an unknown version without a kind): upstream stops there, kvdev goes "
    "on to the next known version the writer also put in the stream",
    "duplicate-overridden": "a key given twice whose earlier value does not decode (a number "
    "past int64, a string for an int): upstream fails the object although a later value "
    "replaces it, kvdev reads the value in force (and warns about the duplicate key)",
}


class Reader(JsonLines):
    """One long-lived ``metadatareader --batch``: a stream in, upstream's verdict out."""

    def __init__(self) -> None:
        super().__init__("metadatareader", "--batch")

    def read(self, data: bytes) -> dict[str, object]:
        return self.ask({"data": base64.b64encode(data).decode()})


AGREED: Counter[tuple[str, str]] = Counter()  # (judge, verdict) -> streams


@pytest.fixture(scope="module")
def reader(request: pytest.FixtureRequest) -> Iterator[Reader]:
    r = Reader()
    yield r
    r.close()
    print_counts(request, "the plain reader agrees with", AGREED)


def kept(obj: dict[str, object]) -> dict[str, object]:
    """What a reader keeps of a decoded object, laid out as Go writes it (for comparing)."""
    laid_out = gojson.go_value(obj | {"kind": "", "apiVersion": ""}, GO_LAYOUT)
    assert isinstance(laid_out, dict)
    meta = laid_out.get("metadata") or {}
    laid_out["metadata"] = {
        k: meta[k] for k in ("name", "namespace", "uid", "generation") if k in meta
    }
    return laid_out


def judge(reader: Reader, data: bytes) -> str:
    """Compare the readers on ``data``; the verdict ("same" or a DIFFERS key)."""
    AGREED["the host's pydantic models", verdict(data, "DeviceMetadata")] += 1
    found = upstream_judge(reader, data)
    AGREED["upstream's decoder", found] += 1
    return found


def upstream_judge(reader: Reader, data: bytes) -> str:
    """Compare kvdev's reader and upstream's on ``data``; "same" or a DIFFERS key."""
    theirs = reader.read(data)
    try:
        ours = decode_stream(data, DEVICE_METADATA, source="f")
    except SchemaError as e:
        refused: SchemaError | None = e
    else:
        refused = None
    if refused is not None:
        assert not theirs["ok"], f"kvdev refuses what upstream reads: {refused}\n{theirs}"
        return "same"
    if not theirs["ok"]:
        if ours.fallback or ours.skipped:
            return "fallback"
        if any("duplicate key" in w.message for w in ours.warnings):
            return "duplicate-overridden"
        pytest.fail(f"kvdev reads what upstream refuses ({theirs['error']}), named nowhere")
    assert ours.api_version == theirs["apiVersion"]
    assert kept(ours.document.to_json_dict()) == kept(theirs["object"])  # type: ignore[arg-type]
    return "same"


# --------------------------------------------------------------------------- streams


def _text(obj: object, layout: str) -> str:
    if layout == "go":
        return gojson.marshal_indent(obj)
    if layout == "ascii":
        return json.dumps(obj)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    doc = draw(metadata_docs)
    layout = draw(st.sampled_from(["go", "ascii", "compact"]))
    versions = draw(
        st.sampled_from(
            [[V1BETA1, V1ALPHA1], [V1BETA1], [V1ALPHA1], [V2, V1BETA1], ["x/v1", V1ALPHA1]]
        )
    )
    objects = [doc | {"apiVersion": v} for v in versions]
    return "".join(_text(o, layout) + "\n" for o in objects).encode()


BAD_UTF8 = [
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xf4\x90\x80\x80",
    b"\x80x",
]
API_SPELLINGS = ["ApiVersion", "APIVERSION", "apiversion", "apiVer\u017fion", "api\\u0056ersion"]
KIND_SPELLINGS = ["Kind", "KIND", "\u212aind", "k\u0131nd"]  # Kelvin sign folds to k, dotless i not


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(streams()))
    how = draw(st.sampled_from(["utf8", "api", "kind", "dup", "deep", "number"]))
    if how == "utf8":
        quotes = [i for i in range(len(data)) if data[i : i + 3] == b': "']
        at = draw(st.sampled_from(quotes)) + 3 if quotes else 1
        data[at:at] = draw(st.sampled_from(BAD_UTF8))
    elif how in ("api", "kind"):
        key = b'"apiVersion"' if how == "api" else b'"kind"'
        spelled = draw(st.sampled_from(API_SPELLINGS if how == "api" else KIND_SPELLINGS))
        new = json.dumps(spelled, ensure_ascii=False).replace("\\\\", "\\").encode()
        data = bytearray(data.replace(key, new, draw(st.integers(1, 2))))
    elif how == "dup":
        extra = draw(
            st.sampled_from(
                [
                    b'"apiVersion": "x/v9", ',
                    b'"kind": "Other", ',
                    b'"metadata": {}, ',
                    b'"requests": null, ',
                    b'"metadata": {"name": "z", "uid": "u"}, ',
                ]
            )
        )
        at = data.index(b"{") + 1
        late = draw(st.booleans())
        data = bytearray(data[:at] + extra + data[at:]) if not late else data
        if late:
            end = data.index(b"}\n") if b"}\n" in data else len(data) - 1
            data[end:end] = b", " + extra.rstrip(b", ")
    elif how == "deep":
        depth = draw(st.sampled_from([31, 33, 64, 999, 2500, 9999, 10000, 10001]))
        at = data.index(b"{") + 1
        data[at:at] = b'"x": ' + b"[" * depth + b"]" * depth + b", "
    else:
        value = draw(
            st.sampled_from(
                [
                    b"9223372036854775808",
                    b"-9223372036854775809",
                    b"1e3",
                    b"1.0",
                    b"-0",
                    b"1" + b"0" * 5000,
                    b"1e400",
                    b"9223372036854775807",
                ]
            )
        )
        field = draw(st.sampled_from([b'"generation": ', b'"big": ']))
        meta = data.find(b'"metadata": {') + len(b'"metadata": {')
        if meta >= len(b'"metadata": {'):
            data[meta:meta] = field + value + (b", " if data[meta : meta + 1] != b"}" else b"")
    return bytes(data)


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(streams())
def test_kvdev_keeps_every_device_upstream_keeps_in_generated_streams(reader, data):
    assert judge(reader, data) in {"same", *DIFFERS}


@SETTINGS
@given(hostile())
def test_kvdev_keeps_every_device_upstream_keeps_in_hostile_streams(reader, data):
    assert judge(reader, data) in {"same", *DIFFERS}


PROBES = {  # issue 13: one odd value on one device, which upstream's reader decodes
    "bare IP": with_device(networkData={"ips": ["10.0.0.5"]}),
    "upper-case IPv6": with_device(networkData={"ips": ["2001:DB8::5/64"]}),
    "duplicate IP": with_device(networkData={"ips": ["10.0.0.5/24", "10.0.0.5/24"]}),
    "65-byte string": with_attrs({"model": {"string": "x" * 65}}),
    "33 attributes": with_attrs({f"a{i}": {"int": i} for i in range(33)}),
    "empty attribute": with_attrs({"model": {}}),
    "version v1.2.3": with_attrs({"fw": {"version": "v1.2.3"}}),
    "two values in one attribute": with_attrs({"fw": {"int": 1, "string": "x"}}),
    "no claim identity": {**metadata_doc(), "metadata": {}},
    "no devices and no identity": {"apiVersion": V1BETA1, "kind": "DeviceMetadata"},
}


@pytest.mark.parametrize("name", PROBES)
def test_kvdev_keeps_what_upstream_keeps_of_the_probe_values(reader, name):
    doc = PROBES[name]
    for layout in ("go", "compact"):
        data = "".join(_text(doc | {"apiVersion": v}, layout) + "\n" for v in (V1BETA1, V1ALPHA1))
        assert judge(reader, data.encode()) == "same"


def _golden_streams() -> list[Path]:
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/dynamic-resource-allocation"],
        cwd=UPSTREAM,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(f"go list -m k8s.io/dynamic-resource-allocation: {found.stderr}")
    return sorted(Path(found.stdout.strip(), "api", "metadata", "testdata").glob("*/metadata.json"))


def test_upstreams_golden_streams_are_read_with_every_device(reader, tmp_path):
    goldens = _golden_streams()
    assert {p.parent.name for p in goldens} >= {"HEAD", "v1.36.0"}
    for golden in goldens:
        copy = tmp_path / golden.parent.name / golden.name  # copied, never committed
        copy.parent.mkdir()
        copy.write_bytes(golden.read_bytes())
        data = copy.read_bytes()
        assert judge(reader, data) == "same", golden
        ours = decode_stream(data, DEVICE_METADATA, source=str(copy)).document
        devices = [d for r in ours.requests or [] if r for d in r.devices or []]
        theirs = reader.read(data)["object"]
        assert len(devices) == sum(len(r.get("devices") or []) for r in theirs["requests"]) > 0
