"""Hypothesis strategies for the metadata fuzzer: what to do to which input file.

Each drawn ``Input`` names a file of the example tree (a claim's metadata, the guest hints, a
template claim's metadata, or a new claim) and either the bytes to put there or a file system
prank (10 MB, a symbolic link out of the tree, a FIFO in the file's place, a file rewritten
while the agent reads it). The valid documents come from the schema's own
property-test strategies (tests/unit/test_stream_properties.py).
"""

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
import test_stream_properties as props

from agentlab import json_objects

NICS = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"
HINTS = "kvdev/guest-hints.json"
TEMPLATE = "resourceclaimtemplates/fast-nic/nic/dra.net-metadata.json"
NEW = "resourceclaims/fuzz-claim/fuzz/fuzz.example.com-metadata.json"
SOURCES = "kvdev-sources.json"  # a ConfigMap volume's index of the streams' origins
EXISTING = (NICS, HINTS, TEMPLATE)
# A directory in a file's place is not among them: it cannot replace a file in one rename, and
# the moment the path is empty is a real removal (which may legitimately change links). The
# reader's handling of it (an error on that path, last good content kept) is tested directly in
# test_known_issues.
PRANKS = ("big", "symlink-out", "fifo", "rewritten-mid-read")


@dataclass(frozen=True)
class Input:
    """One fuzz input: ``data`` for ``target``, or a ``prank`` (then ``data`` is None)."""

    kind: str
    target: str
    data: bytes | None = None
    prank: str | None = None


def _paths(value, here=()):
    """Every path into a JSON value (keys and indexes), the root excluded."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return []
    out = []
    for key, child in items:
        out.append((*here, key))
        out.extend(_paths(child, (*here, key)))
    return out


def _set(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _stream(docs):
    return "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs).encode()


def strategy(good):
    """Inputs over the good contents ``good`` (target -> bytes)."""
    existing = st.sampled_from(EXISTING)

    @st.composite
    def truncated(draw):
        target = draw(existing)
        return Input("truncated", target, good[target][: draw(st.integers(0, len(good[target])))])

    def _docs(target):
        return json_objects(good[target])

    @st.composite
    def wrong_type(draw):
        target = draw(existing)
        docs = _docs(target)
        path = draw(st.sampled_from(_paths(docs[0])))
        _set(docs[0], path, draw(props.json_values))
        return Input("wrong-type", target, _stream(docs))

    @st.composite
    def huge_array(draw):
        target = draw(st.sampled_from((NICS, HINTS)))
        docs = _docs(target)
        n = draw(st.sampled_from((1000, 20000, 200000)))
        if target == NICS:
            device = docs[0]["requests"][0]["devices"][0]
            ips = [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}/32" for i in range(n)]
            device["networkData"]["ips"] = ips
        else:
            docs[0]["devices"] = docs[0]["devices"] * (n // len(docs[0]["devices"]))
        return Input("huge-array", target, _stream(docs))

    @st.composite
    def deep(draw):
        target = draw(existing)
        depth = draw(st.sampled_from((64, 1000, 100000)))
        line, _, rest = good[target].partition(b"\n")
        nested = b'"deep":' + b"[" * depth + b"]" * depth + b","
        return Input("deep-nesting", target, line[:1] + nested + line[1:] + b"\n" + rest)

    @st.composite
    def bad_utf8(draw):
        target = draw(existing)
        data = good[target]
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80")))
        return Input("invalid-utf8", target, data[:at] + junk + data[at:])

    @st.composite
    def duplicate_keys(draw):
        target = draw(existing)
        docs = _docs(target)
        key = draw(st.sampled_from(sorted(docs[0])))
        value = draw(props.json_values)
        line, _, rest = good[target].partition(b"\n")
        dup = json.dumps({key: value})[1:-1].encode()
        head = (
            line[:-1] + b"," + dup + b"}" if draw(st.booleans()) else b"{" + dup + b"," + line[1:]
        )
        return Input("duplicate-keys", target, head + b"\n" + rest)

    @st.composite
    def garbage(draw):
        target = draw(st.sampled_from((*EXISTING, NEW)))
        data = draw(
            st.binary(max_size=512)
            | props.json_values.map(lambda v: json.dumps(v).encode())
            | props.doc_like.map(lambda v: json.dumps(v).encode())
        )
        return Input("garbage", target, data)

    valid_metadata = props.metadata_docs.map(lambda d: Input("valid-metadata", NEW, _stream([d])))
    valid_hints = props.hints_docs().map(lambda d: Input("valid-hints", HINTS, _stream([d])))
    prank = st.builds(lambda p, t: Input(p, t, prank=p), st.sampled_from(PRANKS), existing)
    return st.one_of(
        truncated(),
        wrong_type(),
        bad_utf8(),
        duplicate_keys(),
        garbage(),
        deep(),
        huge_array(),
        valid_metadata,
        valid_hints,
        prank,
    )


def index_strategy(good):
    """Inputs for the sources index ``SOURCES`` (the controller writes it), over ``good``.

    Any JSON value at any place of the good index (an object or an array as an origin among
    them), truncations, invalid UTF-8, any bytes, and valid indexes of any keys.
    """
    doc = json.loads(good)

    @st.composite
    def wrong_type(draw):
        changed = json.loads(good)
        path = draw(st.sampled_from([(), *_paths(changed), ("sources", "new.key")]))
        if path:
            _set(changed, path, draw(props.json_values))
        else:
            changed = draw(props.json_values)
        return Input("index-wrong-type", SOURCES, json.dumps(changed).encode())

    origins = st.sampled_from(("driver", "reconstructed"))
    keys = st.from_regex(r"[-._a-zA-Z0-9]{1,40}", fullmatch=True)
    valid = st.dictionaries(keys, origins, max_size=8).map(
        lambda sources: Input(
            "index-valid", SOURCES, json.dumps({**doc, "sources": sources}).encode()
        )
    )
    cut = st.integers(0, len(good)).map(lambda n: Input("index-truncated", SOURCES, good[:n]))
    junk = st.binary(max_size=256).map(lambda b: Input("index-garbage", SOURCES, b))
    return st.one_of(wrong_type(), valid, cut, junk)
