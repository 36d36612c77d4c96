"""kvdev-host reads JSON's surrogate escapes as Go's encoding/json does (libyaml refuses them):
a high/low pair is the astral character, any other surrogate escape is U+FFFD; an escaped
backslash before a 'u' is no escape; YAML text is left to libyaml."""

import json

import pytest

from kvdev.errors import SchemaError
from kvdev.host.commands.inputs import load_files
from kvdev.host.k8s import ResourceClaim, load


def claim_json(annotation, parameter):
    """A claim as JSON text, with ``annotation`` and ``parameter`` spliced in raw (escapes kept)."""
    return (
        '{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",'
        ' "metadata": {"name": "c", "namespace": "ns", "annotations": {"a": "' + annotation + '"}},'
        ' "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}],'
        ' "config": [{"opaque": {"driver": "x.example.com",'
        ' "parameters": {"label": "' + parameter + '"}}}]}}}'
    )


def read(text):
    [found] = load(text, "claim.json")
    assert isinstance(found, ResourceClaim)
    opaque = found.spec.devices.config[0].opaque
    return found.metadata.annotations["a"], opaque.parameters["label"]


@pytest.mark.parametrize(
    ("escaped", "go_reads"),
    [
        (r"\ud83d\ude00", "\U0001f600"),  # a pair: one astral character
        (r"\uD83D\uDE00", "\U0001f600"),  # hex digits in either case
        (r"x\ud800y", "x\ufffdy"),  # a lone high surrogate
        (r"\udc00", "\ufffd"),  # a lone low surrogate
        (r"\ude00\ud83d", "\ufffd\ufffd"),  # low then high: no pair
        (r"\ud83d\u0041", "\ufffdA"),  # a high one before no low one
        (r"\ud83d\ud83d\ude00", "\ufffd\U0001f600"),  # the second high one pairs
        (r"\\ud800", "\\ud800"),  # an escaped backslash, then plain text
        (r"\\\ud83d\ude00", "\\\U0001f600"),  # an escaped backslash, then a pair
        (r"\u00e9\u4e2d", "\u00e9\u4e2d"),  # no surrogate: as before
    ],
)
def test_surrogate_escapes_read_as_go_reads_them(escaped, go_reads):
    assert read(claim_json(escaped, escaped)) == (go_reads, go_reads)


def test_what_python_json_reads_for_a_pair_is_what_we_read():
    text = claim_json(r"\ud83d\ude00", r"\ud83d\ude00")
    raw = json.loads(text)
    assert read(text)[0] == raw["metadata"]["annotations"]["a"]


def test_a_kind_list_of_claims_from_a_file(tmp_path):
    path = tmp_path / "claims.json"
    one = claim_json(r"\ud83d\ude00", r"\ud800")
    path.write_text('{"apiVersion": "v1", "kind": "List", "items": [' + one + "]}", "utf-8")
    [found] = load_files([path])
    assert found.metadata.annotations["a"] == "\U0001f600"
    assert found.spec.devices.config[0].opaque.parameters["label"] == "\ufffd"


def test_yaml_text_is_not_rewritten():
    yaml_text = claim_json("plain", "plain").replace('"a": "plain"', "\"a\": '\\ud800'")
    assert read(yaml_text)[0] == "\\ud800"  # single-quoted: no escapes in YAML, nor here
    with pytest.raises(SchemaError, match="invalid Unicode character escape"):
        load('a: "\\ud83d\\ude00"\nkind: ResourceClaim\n', "claim.yaml")
