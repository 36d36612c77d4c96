"""publish.files: which files a claim's preparation leaves, with which bytes (no disk)."""

import json
from pathlib import Path

import pytest

from hostlab import DRIVER, allocated_claim, uid_of, vf_slice
from kvdev.errors import SchemaError
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.publish.files import (
    Layout,
    claim_dir_name,
    parse_record,
    planned_files,
    record_bytes,
)
from kvdev.host.publish.metadata import build_metadata, claim_identity

LAYOUT = Layout(DRIVER, Path("/plugins") / DRIVER, Path("/cdi"))
CLAIM = ResourceClaim.model_validate(allocated_claim(1))
SLICES = [ResourceSlice.model_validate(vf_slice(4))]
META = Path(f"/plugins/{DRIVER}/dra-device-metadata/vms_claim-1/nic/metadata.json")


def plan(on_disk=None, *, bump=False, claim=CLAIM):
    requests = build_metadata(claim, SLICES, DRIVER)
    return planned_files(claim_identity(claim), requests, LAYOUT, on_disk or {}, bump=bump)


def generation(data):
    return json.JSONDecoder().raw_decode(data.decode())[0]["metadata"]["generation"]


def test_one_request_is_one_metadata_file_and_one_cdi_spec_at_upstreams_paths():
    files = plan()
    assert [f.path for f in files] == [
        META,
        Path(f"/cdi/{DRIVER}_metadata_{uid_of(1)}_nic.json"),
    ]
    assert generation(files[0].data) == 1
    assert json.loads(files[1].data)["devices"][0]["containerEdits"]["mounts"][0]["hostPath"] == (
        str(META)
    )


def test_the_same_content_keeps_its_generation_and_update_bumps_it():
    first = plan()[0].data
    at_seven = first.replace(b'"generation": 1', b'"generation": 7')
    assert generation(plan({META: at_seven})[0].data) == 7
    assert plan({META: at_seven})[0].data == at_seven  # byte for byte: nothing to rewrite
    assert generation(plan({META: at_seven}, bump=True)[0].data) == 8


def test_changed_content_or_an_unreadable_file_takes_the_next_generation():
    data = allocated_claim(1)
    data["status"]["allocation"]["devices"]["results"][0]["device"] = "vf-2"
    other = ResourceClaim.model_validate(data)
    at_three = plan()[0].data.replace(b'"generation": 1', b'"generation": 3')
    assert generation(plan({META: at_three}, claim=other)[0].data) == 4
    assert generation(plan({META: b"{not json"})[0].data) == 1


def test_the_record_round_trips_and_keeps_only_paths_this_writer_could_have_written():
    ident = claim_identity(CLAIM)
    claim_dir = LAYOUT.claim_dir("vms_claim-1")
    spec = Path(f"/cdi/{DRIVER}_metadata_{uid_of(1)}_nic.json")
    data = record_bytes(ident, [META, spec, Path("/etc/passwd"), Path("/cdi/other_x.json")])
    assert parse_record(data, LAYOUT, claim_dir) == (uid_of(1), [META, spec])
    assert parse_record(b"{", LAYOUT, claim_dir) == (None, [])
    assert parse_record(None, LAYOUT, claim_dir) == (None, [])


@pytest.mark.parametrize(
    ("namespace", "name"), [("vms", "../x"), ("Vms", "a"), ("a" * 63, "b" * 200)]
)
def test_unsafe_or_too_long_claim_names_are_refused(namespace, name):
    with pytest.raises(SchemaError, match=f"claim {namespace}/"):
        claim_dir_name(namespace, name)


def test_a_compact_file_an_older_writer_left_continues_its_generation():
    pretty = plan()[0].data
    objects, text, pos = [], pretty.decode(), 0
    decoder = json.JSONDecoder()
    while (start := text.find("{", pos)) != -1:
        value, pos = decoder.raw_decode(text, start)
        objects.append(value)
    compact = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objects)
    at_nine = compact.replace('"generation":1', '"generation":9').encode()
    assert generation(plan({META: at_nine})[0].data) == 9  # same content: same generation
    assert generation(plan({META: at_nine}, bump=True)[0].data) == 10


def test_a_re_created_claim_starts_again_at_generation_one():
    old = plan()[0].data.replace(b'"generation": 1', b'"generation": 5')
    other_uid = old.replace(uid_of(1).encode(), uid_of(99).encode())
    assert generation(plan({META: old})[0].data) == 5
    assert generation(plan({META: other_uid})[0].data) == 1  # another claim's file: not ours
    assert generation(plan({META: other_uid}, bump=True)[0].data) == 1
