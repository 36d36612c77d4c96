"""The relay deletes a record only when a complete read shows its claim gone from the node.

A listing cut at its bound, a directory that cannot be listed, a spec that cannot be read or
parsed, and a file that fails this pass each leave every record as it was; once a complete
read no longer names the claim, its record is deleted. The records live in a store that
answers as the API server does for the calls the loop makes (``Relay.sync`` is what is
tested).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from kvdev.host.cdi import spec as cdi_spec
from kvdev.host.contract import record_name
from kvdev.host.relay import finder
from kvdev.host.relay.live import Relay
from kvdev.schema.tree import ROOT

DRIVER = "sriov.example.com"
NODE = "node-a"
PLACE = f"{ROOT}/resourceclaims/c/nic/{DRIVER}-metadata.json"


class Store:
    """The relay namespace's ConfigMaps, by name."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}

    def list_configmaps(self, _namespace, _selector):
        return list(self.objects.values())

    def create_configmap(self, _namespace, body):
        self.objects[body["metadata"]["name"]] = body
        return body

    def replace_configmap(self, _namespace, body):
        self.objects[body["metadata"]["name"]] = body
        return body

    def delete_configmap(self, _namespace, name):
        del self.objects[name]


def uid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


class Node:
    """A CDI directory with one metadata spec per claim, the files beneath a host directory."""

    def __init__(self, tmp: Path) -> None:
        self.cdi, self.files = tmp / "cdi", tmp / "plugins"
        self.cdi.mkdir()
        self.files.mkdir()

    def add(self, i: int, name: str | None = None) -> Path:
        host = self.files / f"{i}.json"
        host.write_bytes(b'{"claim": %d}' % i)
        body = {
            "cdiVersion": "0.5.0",
            "kind": f"{DRIVER}/metadata",
            "devices": [
                {
                    "name": f"{uid(i)}_nic",
                    "containerEdits": {
                        "mounts": [
                            {
                                "hostPath": str(host),
                                "containerPath": PLACE,
                            }
                        ]
                    },
                }
            ],
        }
        spec = self.cdi / (name or f"m{i:03d}.json")
        spec.write_text(json.dumps(body))
        return spec

    def relay(self, store: Store) -> Relay:
        return Relay(store, NODE, "kvdev-system", [self.cdi], [self.files], relist=1)


def names(*claims: int) -> set[str]:
    return {record_name(NODE, uid(i)) for i in claims}


@pytest.fixture
def node(tmp_path):
    made = Node(tmp_path)
    for i in range(4):
        made.add(i)
    return made


def test_a_cut_listing_deletes_no_record(node, monkeypatch):
    store = Store()
    relay = node.relay(store)
    assert relay.sync().created == 4
    old = json.loads(json.dumps(store.objects[record_name(NODE, uid(0))]))
    old["metadata"]["name"] = f"kvdev-relay-{uid(0)}-0123456789"  # the earlier name form
    store.objects[old["metadata"]["name"]] = old
    monkeypatch.setattr(finder, "MAX_SPECS", 4)
    node.add(9, "a-first.json")  # sorts first: the last spec by name is cut off
    done = relay.sync()
    # Only the record of the earlier name form goes; the cut-off claim's stays.
    assert set(store.objects) == names(0, 1, 2, 3, 9)
    assert (done.deleted, done.legacy) == (0, 1)
    assert any("no record is deleted" in p.message for p in done.problems)


def test_specs_of_other_kinds_do_not_count_toward_the_cut(node, monkeypatch):
    monkeypatch.setattr(finder, "MAX_SPECS", 4)
    for i in range(3):
        (node.cdi / f"a-gpu{i}.json").write_text('{"cdiVersion": "0.5.0", "kind": "x.com/gpu"}')
    store = Store()
    done = node.relay(store).sync()
    assert (done.created, done.problems) == (4, [])


def test_an_unlistable_directory_deletes_no_record(node, tmp_path):
    store = Store()
    relay = node.relay(store)
    relay.sync()
    gone = node.cdi.rename(tmp_path / "elsewhere")
    node.cdi.write_text("")  # no longer a directory: it cannot be listed
    done = relay.sync()
    assert (done.deleted, set(store.objects)) == (0, names(0, 1, 2, 3))
    node.cdi.unlink()
    gone.rename(node.cdi)
    for spec in node.cdi.iterdir():
        spec.unlink()
    assert relay.sync().deleted == 4  # a complete read of an empty directory


def test_a_spec_that_fails_to_parse_deletes_no_record(node):
    store = Store()
    relay = node.relay(store)
    relay.sync()
    (node.cdi / "m001.json").write_text('{"cdiVersion": "0.5.0", "kind": ')  # mid-write
    done = relay.sync()
    assert (done.deleted, set(store.objects)) == (0, names(0, 1, 2, 3))
    (node.cdi / "m001.json").unlink()  # now the claim is gone, and the read complete
    done = relay.sync()
    assert (done.deleted, set(store.objects)) == (1, names(0, 2, 3))


def test_a_file_that_fails_keeps_its_claims_record_as_it_was(node):
    store = Store()
    relay = node.relay(store)
    relay.sync()
    before = store.objects[record_name(NODE, uid(2))]
    file = node.files / "2.json"
    file.unlink()
    os.mkfifo(file)  # refused this pass; the spec still names the claim
    done = relay.sync()
    assert (done.deleted, done.updated) == (0, 0)
    assert store.objects[record_name(NODE, uid(2))] == before
    file.unlink()
    assert relay.sync().deleted == 0  # the file gone but the spec still there: not gone
    (node.cdi / "m002.json").unlink()
    done = relay.sync()
    assert (done.deleted, set(store.objects)) == (1, names(0, 1, 3))


def test_a_spec_over_a_bound_keeps_every_record_and_harms_no_other_claim(node):
    store = Store()
    relay = node.relay(store)
    relay.sync()
    devices = ", ".join(["*d"] * (cdi_spec.MAX_DEVICES + 1))
    (node.cdi / "hostile.yaml").write_text(
        f"kind: {DRIVER}/metadata\nd: &d {{name: {uid(7)}_nic}}\ndevices: [{devices}]\n"
    )
    node.add(5)
    done = relay.sync()
    assert (done.created, done.deleted) == (1, 0)
    assert set(store.objects) == names(0, 1, 2, 3, 5)
    assert [Path(p.source).name for p in done.problems] == ["hostile.yaml"]


def test_a_spec_nested_too_deeply_is_named_and_ends_no_pass(node):
    store = Store()
    relay = node.relay(store)
    relay.sync()
    (node.cdi / "deep.json").write_text("[" * 200_000)
    (node.cdi / "deep.yaml").write_text("kind: x.com/metadata\ndevices: " + "[" * 200_000)
    done = relay.sync()
    assert sorted(Path(p.source).name for p in done.problems) == ["deep.json", "deep.yaml"]
    assert (done.deleted, set(store.objects)) == (0, names(0, 1, 2, 3))


def test_a_read_that_raises_ends_no_pass_and_changes_nothing(node):
    store = Store()
    relay = node.relay(store)
    relay.sync()
    real = relay.finder

    def broken(dirs, roots):
        raise MemoryError  # whatever a read may raise

    relay.finder = broken
    assert (relay.sync().failed, set(store.objects)) == (1, names(0, 1, 2, 3))
    relay.finder = real
    (node.cdi / "m000.json").unlink()
    assert relay.sync().deleted == 1
