"""Where each stream came from, as the guest reads it: the ConfigMap's ``kvdev-sources.json``.

The index is read as data (``schema/origins``, plain Python): a bad one is refused with the
field named, and changes nothing but that the origins are not known. A pass over a ConfigMap
volume (the example's streams, laid out as kubelet lays out a volume) shows ``source: driver``
for a stream the index names so, ``reconstructed from claim status and slices`` for the others
(or for every stream when there is no index); a tree shows no origin.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdev.guest.reconciler import Reconciler, converge
from kvdev.guest.views import encode, tables
from kvdev.schema.origins import SOURCES_KEY, index_json, parse
from memlab import example_config, example_kernel

HEAD = '{"apiVersion": "kvdev.io/v1alpha1", "kind": "StreamSources", '
NIC1 = "vm1-devices.nic-1.sriov.example.com-metadata.json"
REBUILT = "reconstructed from claim status and slices"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"apiVersion": "v1", "kind": "StreamSources", "sources": {}}', "apiVersion"),
        ('{"apiVersion": "kvdev.io/v1alpha1", "kind": "X", "sources": {}}', "kind"),
        ('{"apiVersion": "kvdev.io/v1alpha1", "kind": "StreamSources", "sources": []}', "sources"),
        (HEAD + '"sources": {"a.b": "guessed"}}', "sources['a.b']"),
        (HEAD + '"sources": {"../x": "driver"}}', "sources['../x']"),
        ("[1, 2]", ""),
        ("{" * 100_000, ""),
        (HEAD + '"sources": {"a.b": {}}}', "sources['a.b']"),
        (HEAD + '"sources": {"a.b": ["driver"]}}', "sources['a.b']"),
        (HEAD + '"sources": {"a.b": null}}', "sources['a.b']"),
        (HEAD + '"sources": {"a.b": 1}}', "sources['a.b']"),
    ],
)
def test_a_bad_index_is_refused_naming_the_field(text, field):
    found, problem = parse(text.encode(), "/m/kvdev-sources.json")
    assert found == {}
    assert problem is not None
    assert (problem.source, problem.path) == ("/m/kvdev-sources.json", field)


def test_the_controllers_index_reads_back():
    sources = {NIC1: "driver", "b.c.d-metadata.json": "reconstructed"}
    assert parse(index_json(sources).encode(), "x") == (sources, None)
    assert parse(b" " * (64 * 1024 + 1), "x")[1] is not None


def configmap_volume(cfg, index):
    """The example tree as a ConfigMap volume (keys, a version directory, ``..data``)."""
    tree = cfg.metadata_root
    volume = tree.parent / "volume"
    version = volume / "..2026_12_06_06_00_00.000000001"
    version.mkdir(parents=True)
    for path in tree.rglob("*-metadata.json"):
        _, directory, request, name = path.relative_to(tree).parts
        shutil.copy(path, version / f"{directory}.{request}.{name}")
    shutil.copy(tree / "kvdev" / "guest-hints.json", version / "guest-hints.json")
    if index is not None:
        (version / SOURCES_KEY).write_text(index)
    (volume / "..data").symlink_to(version.name)
    for key in os.listdir(version):
        (volume / key).symlink_to(f"..data/{key}")
    return dataclasses.replace(cfg, metadata_root=volume)


def passed(cfg):
    outcome = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    assert outcome.status.converged
    return outcome.status


def test_a_driver_stream_and_the_rebuilt_ones_say_so(tmp_path):
    cfg = configmap_volume(example_config(tmp_path, gpu=False), index_json({NIC1: "driver"}))
    status = passed(cfg)
    origins = {d.request: d.origin for d in status.devices}
    assert origins == {"nic-1": "driver", "nic-2": REBUILT, "nic": REBUILT}
    claims = {c.source.rsplit("/", 1)[-1]: c.origin for c in status.claims}
    assert claims[NIC1] == "driver"
    body = encode.status_json(status)
    nic1 = next(d for d in body["devices"] if d["request"] == "nic-1")
    assert re.search(r"^  source: +driver$", tables.explain_text(nic1), re.MULTILINE)
    text = tables.status_text(body)
    assert "FROM" in text
    assert REBUILT in text


def test_without_an_index_every_stream_of_a_volume_is_rebuilt_and_a_tree_says_nothing(tmp_path):
    volume = configmap_volume(example_config(tmp_path / "a", gpu=False), None)
    assert {d.origin for d in passed(volume).devices} == {REBUILT}
    tree = passed(example_config(tmp_path / "b", gpu=False))
    assert {d.origin for d in tree.devices} == {""}
    assert "FROM" not in tables.status_text(encode.status_json(tree))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=12), JSON, max_size=4) | JSON, JSON)
def test_any_json_at_any_place_of_the_index_is_a_problem_never_an_exception(sources, top):
    """was: an object or an array as an origin raised TypeError (unhashable) out of parse."""
    for body in (
        {"apiVersion": "kvdev.io/v1alpha1", "kind": "StreamSources", "sources": sources},
        {"apiVersion": top, "kind": "StreamSources", "sources": {}},
        top,
    ):
        found, problem = parse(json.dumps(body).encode(), "/m/kvdev-sources.json")
        assert (found == {}) or problem is None
        assert problem is None or problem.source == "/m/kvdev-sources.json"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_the_index_are_a_problem_never_an_exception(data):
    found, problem = parse(data, "x")
    assert (found, problem is None) in (({}, False), (found, True))


def test_a_bad_index_is_a_metadata_error_naming_it_and_the_pass_is_otherwise_unharmed(tmp_path):
    """was: a bad index was only logged; one holding an object as an origin ended the agent."""
    for i, origin in enumerate((1, {}, ["driver"])):
        body = {"apiVersion": "kvdev.io/v1alpha1", "kind": "StreamSources"}
        volume = configmap_volume(
            example_config(tmp_path / str(i), gpu=False),
            json.dumps({**body, "sources": {NIC1: origin}}),
        )
        status = converge(Reconciler(volume, example_kernel(), scan_devices=tuple)).status
        assert {d.origin for d in status.devices} == {""}
        assert {d.phase.value for d in status.devices} == {"Configured"}
        (problem,) = status.file_errors
        assert problem.source == str(volume.metadata_root / SOURCES_KEY)
        assert problem.path == f"sources[{NIC1!r}]"
        assert problem.message.startswith("stream sources index: ")
        assert not status.converged
