"""The node relay: finding the drivers' files through CDI specs, the records, the loop.

Hostile or broken specs and files on the node (a FIFO, a file of another driver or request, a
mount outside the tree, a file too large or not UTF-8, YAML that does not parse, two specs that
disagree) are each skipped and named, and never keep another claim's file from being relayed.
The loop runs against the API double: it creates, leaves alone, updates and deletes records.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from apidouble import ApiDouble
from kvdev.host import contract
from kvdev.host.contract import RECORD_BYTES_MAX
from kvdev.host.kube.client import api_client
from kvdev.host.kube.wire import KubeApi
from kvdev.host.publish.relayed import read_record, records
from kvdev.host.relay.finder import find
from kvdev.host.relay.live import Relay
from kvdev.schema.tree import ROOT

GOOD_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
OTHER_UID = "0b6f4c3e-91d4-4d2a-8f55-6a7e2c1d9b30"
THIRD_UID = "3c5e7a90-0d1f-4b2a-9c8e-7f6a5b4c3d21"
DRIVER = "sriov.example.com"
BODY = b'{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata"}'


def spec(
    cdi: Path,
    name: str,
    host: Path,
    *,
    uid=GOOD_UID,
    request="nic-1",
    driver=DRIVER,
    container=None,
    kind=None,
) -> Path:
    container = container or f"{ROOT}/resourceclaims/vm1-devices/{request}/{driver}-metadata.json"
    body = {
        "cdiVersion": "0.5.0",
        "kind": kind or f"{driver}/metadata",
        "devices": [
            {
                "name": f"{uid}_{request}",
                "containerEdits": {"mounts": [{"hostPath": str(host), "containerPath": container}]},
            }
        ],
        "containerEdits": {},
    }
    path = cdi / name
    path.write_text(json.dumps(body))
    return path


def unpack(found):
    return found.files, found.problems


@pytest.fixture
def node(tmp_path):
    cdi, files = tmp_path / "cdi", tmp_path / "files"
    cdi.mkdir()
    files.mkdir()
    good = files / "good.json"
    good.write_bytes(BODY)
    spec(cdi, "a_good.json", good)
    return cdi, files


def test_a_good_spec_gives_its_file_unchanged(node):
    found, problems = unpack(find([node[0], node[0].parent / "missing"], [node[1]]))
    assert problems == []
    (f,) = found
    assert (f.claim_uid, f.request, f.driver, f.data) == (GOOD_UID, "nic-1", DRIVER, BODY)


def test_hostile_specs_are_named_and_harm_no_other_claim(node):
    cdi, files = node
    fifo = files / "fifo"
    os.mkfifo(fifo)
    big = files / "big"
    big.write_bytes(b" " * (RECORD_BYTES_MAX + 1))
    latin = files / "latin"
    latin.write_bytes(b'{"x": "\xe9"}')
    other = files / "other.json"
    other.write_bytes(BODY + b" ")
    spec(cdi, "b_fifo.json", fifo, uid=OTHER_UID)  # would block a plain open(): refused
    spec(cdi, "c_big.json", big, uid=OTHER_UID)
    spec(
        cdi,
        "d_driver.json",
        files / "good.json",
        uid=OTHER_UID,
        driver="x.example",
        container=f"{ROOT}/resourceclaims/c/nic-1/{DRIVER}-metadata.json",
    )  # another's place
    spec(cdi, "e_out.json", Path("/etc/passwd"), uid=OTHER_UID, container=f"{ROOT}/../../../etc/x")
    spec(
        cdi,
        "f_request.json",
        files / "good.json",
        uid=OTHER_UID,
        request="nic-9",
        container=f"{ROOT}/resourceclaims/c/nic-1/{DRIVER}-metadata.json",
    )
    (cdi / "g_yaml.yaml").write_text("kind: [unclosed\n")
    spec(cdi, "h_clash.json", other, uid=GOOD_UID)  # the same claim/request, other bytes
    spec(cdi, "i_latin.json", latin, uid=THIRD_UID, request="nic-2")
    spec(cdi, "j_plain.json", files / "good.json", kind="nvidia.com/gpu")  # not metadata
    result = find([cdi], [files])
    found, problems = unpack(result)
    named = sorted(Path(p.source).name for p in problems)
    assert named == [
        "b_fifo.json",
        "c_big.json",
        "d_driver.json",
        "e_out.json",
        "f_request.json",
        "g_yaml.yaml",
        "h_clash.json",
    ]
    assert "not a regular file" in str(next(p for p in problems if "fifo" in p.source))
    # The clash: neither of the two is relayed; the non-UTF-8 file is left out by records().
    assert [(f.claim_uid, f.request) for f in found] == [(THIRD_UID, "nic-2")]
    # A claim with a file that failed is held as a whole: its record is neither cut nor gone.
    assert result.held == {GOOD_UID, OTHER_UID}
    bodies, left_out = records("node-a", "kvdev-system", found)
    assert bodies == []
    assert [Path(p.source).name for p in left_out] == ["i_latin.json"]


def test_a_record_reads_back_and_a_foreign_one_does_not(node):
    found, _ = unpack(find([node[0]], [node[1]]))
    (body,), _ = records("node-a", "kvdev-system", found)
    assert body["metadata"]["labels"][contract.NODE_LABEL] == "node-a"
    record = read_record(body)
    assert record is not None
    assert (record.node, record.claim_uid) == ("node-a", GOOD_UID)
    assert record.files == {("nic-1", DRIVER): BODY.decode()}
    unlabelled = {**body, "metadata": {**body["metadata"], "labels": {}}}
    assert read_record(unlabelled) is None
    long_node = "n" * 200
    (long_body,), _ = records(long_node, "kvdev-system", found)
    assert len(long_body["metadata"]["labels"][contract.NODE_LABEL]) <= 63
    assert read_record(long_body).node == long_node


def test_the_loop_writes_only_what_changed_and_deletes_what_is_gone(node):
    cdi, files = node
    api = ApiDouble()
    api.start()
    try:
        config = files / "kubeconfig"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "d", "cluster": {"server": api.url}}],
                    "users": [{"name": "d", "user": {"token": "t"}}],
                    "contexts": [{"name": "d", "context": {"cluster": "d", "user": "d"}}],
                    "current-context": "d",
                }
            )
        )
        relay = Relay(
            KubeApi(api_client(config)), "node-a", "kvdev-system", [cdi], [files], relist=4
        )
        first = relay.sync()
        assert (first.created, first.failed) == (1, 0)
        requests = len(api.requests)
        again = relay.sync()
        assert (again.created, again.updated, again.unchanged) == (0, 0, 1)
        assert len(api.requests) == requests  # nothing changed: not one request
        name = contract.record_name("node-a", GOOD_UID)
        api.delete("v1", "ConfigMap", "kvdev-system", name)  # someone else's delete
        relay.sync()  # pass 3: not listed, not seen
        assert relay.sync().created == 1  # pass 4 lists again: made again
        (files / "good.json").write_bytes(BODY + b"\n")
        changed = relay.sync()
        assert changed.updated == 1
        stored = api.get("v1", "ConfigMap", "kvdev-system", name)
        assert stored["data"] == {f"nic-1.{DRIVER}-metadata.json": (BODY + b"\n").decode()}
        (cdi / "a_good.json").unlink()
        gone = relay.sync()
        assert gone.deleted == 1
        assert api.get("v1", "ConfigMap", "kvdev-system", name) is None
    finally:
        api.stop()


def test_a_read_that_never_returns_costs_passes_that_change_nothing_and_one_thread(node):
    release, calls = threading.Event(), []

    def stuck(dirs, roots):
        calls.append(dirs)
        release.wait()  # a hung file system under a hostPath
        return find(dirs, roots)

    class NoApi:
        def list_configmaps(self, *_):
            return []

        def create_configmap(self, _namespace, body):
            return dict(body)

    relay = Relay(
        NoApi(), "node-a", "kvdev-system", [node[0]], [node[1]], read_deadline=0.01, finder=stuck
    )
    for _ in range(3):
        assert relay.sync().failed == 1  # nothing written, nothing deleted
    assert len(calls) == 1  # every pass waited for the one stuck read
    release.set()
    relay.read_deadline = 60.0  # the read is done now: a bound, never reached
    assert relay.sync().created == 1
