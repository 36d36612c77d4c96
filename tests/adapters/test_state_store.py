"""adapters/state: the agent's state files on a real file system (slots, put, unsaved, tidy).

The formats are the ones earlier agents wrote: a journal is one sorted JSON line, the primary
record and the status are indented; an empty value is no file. ``primary.json``'s temporary
file, left by a write killed before its rename, is removed by the next agent's first pass like
every other slot's.
"""

import dataclasses
import errno
import json
import logging
import multiprocessing
import os
import signal

import pytest

from kvdev.errors import os_error
from kvdev.guest.adapters import state
from kvdev.guest.adapters.state import (
    ADDRESSES,
    ALTNAMES,
    PRIMARY,
    RENAMES,
    SLOTS,
    STATUS,
    Store,
)
from kvdev.guest.core.primary import Decision
from kvdev.guest.reconciler import Reconciler
from memlab import MACS, example_config, example_kernel

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def test_each_slot_writes_the_format_earlier_agents_wrote_and_reads_it_back(tmp_path):
    store = Store(tmp_path)
    assert store.put(RENAMES, {12: "data0", 3: "eth1"}) is None
    assert (tmp_path / "renames.json").read_text() == '{"12": "data0", "3": "eth1"}\n'
    store.put(ADDRESSES, {1: frozenset({"10.1.0.9/24", "10.1.0.5/24"})})
    assert (tmp_path / "addresses.json").read_text() == '{"1": ["10.1.0.5/24", "10.1.0.9/24"]}\n'
    store.put(ALTNAMES, {3: frozenset({"b", "a"})})
    assert (tmp_path / "altnames.json").read_text() == '{"3": ["a", "b"]}\n'
    store.put(PRIMARY, Decision({MACS[2]: "why two", MACS[1]: "why one"}))
    assert json.loads((tmp_path / "primary.json").read_text()) == {
        "owned": {MACS[1]: "why one", MACS[2]: "why two"}
    }
    assert (tmp_path / "primary.json").read_text().startswith('{\n  "owned": {\n')
    store.put(STATUS, {"converged": True, "b": 1})
    assert (tmp_path / "status.json").read_text() == '{\n  "b": 1,\n  "converged": true\n}\n'
    again = Store(tmp_path)  # a restarted agent
    assert again.get(RENAMES) == {12: "data0", 3: "eth1"}
    assert again.get(ADDRESSES) == {1: frozenset({"10.1.0.5/24", "10.1.0.9/24"})}
    assert again.get(ALTNAMES) == {3: frozenset({"a", "b"})}
    assert again.get(PRIMARY) == Decision({MACS[1]: "why one", MACS[2]: "why two"})


def test_an_empty_value_removes_the_file_and_a_missing_file_is_empty(tmp_path):
    store = Store(tmp_path / "state")  # not there yet
    assert store.get(RENAMES) == {}
    assert store.get(PRIMARY) == Decision({})
    store.put(RENAMES, {3: "eth1"})
    store.put(PRIMARY, Decision({MACS[1]: "why"}))
    store.put(RENAMES, {})
    store.put(PRIMARY, Decision({}, held={MACS[2]: "held, never recorded"}))
    assert list((tmp_path / "state").iterdir()) == []


def test_a_value_is_written_only_when_its_encoding_changed(tmp_path, monkeypatch):
    writes = []
    real = state.write_atomic
    monkeypatch.setattr(
        state, "write_atomic", lambda p, d, mode: (writes.append(p), real(p, d, mode=mode))
    )
    store = Store(tmp_path)
    store.get(ALTNAMES)
    store.put(ALTNAMES, {})  # as read: nothing to do
    store.put(ALTNAMES, {3: frozenset({"a"})})
    store.put(ALTNAMES, {3: frozenset({"a"})})
    assert writes == [tmp_path / "altnames.json"]


def test_the_status_is_indented_only_when_its_compact_form_changed(tmp_path):
    encoded = []

    def encode(body):
        encoded.append(body)
        return STATUS.encode(body)

    slot = dataclasses.replace(STATUS, encode=encode)
    store = Store(tmp_path)
    store.put(slot, {"converged": True, "links": [{"a": 1}]})
    store.put(slot, {"links": [{"a": 1}], "converged": True})  # the same, keys in another order
    assert len(encoded) == 1
    store.put(slot, {"converged": True, "links": [{"a": 2}]})
    assert len(encoded) == 2
    text = (tmp_path / "status.json").read_text()
    assert text == STATUS.encode({"converged": True, "links": [{"a": 2}]})
    assert text.startswith('{\n  "converged": true,\n  "links": [\n')
    store.put(slot, {"converged": 1, "links": [{"a": 2}]})  # equal in Python, not in JSON
    assert json.loads((tmp_path / "status.json").read_text())["converged"] == 1


def test_a_failed_write_is_unsaved_warned_once_and_retried_until_it_succeeds(
    tmp_path, monkeypatch, caplog
):
    full = [True]
    real = state.write_atomic

    def write(path, data, *, mode=0o644):
        if full[0]:
            raise ENOSPC
        real(path, data, mode=mode)

    monkeypatch.setattr(state, "write_atomic", write)
    store = Store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        error = store.put(RENAMES, {3: "eth1"})
        assert str(store.put(RENAMES, {3: "eth1"})) == str(error)  # tried again
    assert error is not None
    assert error.retryable
    assert str(error) == (
        f"cannot save the rename journal {tmp_path / 'renames.json'}: No space left on device"
    )
    assert [r.getMessage() for r in caplog.records] == [str(error)]
    assert [str(e) for e in store.unsaved()] == [str(error)]
    assert [str(e) for e in store.unsaved("renames.json")] == [str(error)]
    assert store.unsaved("status.json") == ()
    assert store.get(RENAMES) == {3: "eth1"}  # the value in force is the one put
    full[0] = False
    assert store.put(RENAMES, {3: "eth1"}) is None
    assert store.unsaved() == ()
    assert Store(tmp_path).get(RENAMES) == {3: "eth1"}


def test_state_kept_beside_the_slots_is_unsaved_too(tmp_path):
    store = Store(tmp_path)
    error = os_error(ENOSPC, "keep the link marks in", tmp_path / "marks")
    store.failed("marks", error)
    assert [str(e) for e in store.unsaved()] == [str(error)]
    store.failed("marks", None)
    assert store.unsaved() == ()


def test_a_dry_run_reads_and_changes_nothing(tmp_path, caplog):
    (tmp_path / "renames.json").write_text('{"3": "eth1"}\n')
    (tmp_path / "altnames.json").write_text("[1]")
    (tmp_path / ".primary.json.x1y2z3.tmp").write_text("left")
    store = Store(tmp_path, writes=False)
    assert store.get(RENAMES) == {3: "eth1"}
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert store.get(ALTNAMES) == {}
    assert "a dry run leaves it there" in caplog.records[0].getMessage()
    assert store.put(RENAMES, {}) is None
    assert store.get(RENAMES) == {3: "eth1"}  # kept nothing either
    assert store.tidy() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".primary.json.x1y2z3.tmp",
        "altnames.json",
        "renames.json",
    ]


@pytest.mark.parametrize("slot", [RENAMES, ADDRESSES, ALTNAMES, PRIMARY])
def test_a_file_that_is_no_json_object_is_set_aside_once(tmp_path, slot, caplog):
    path = tmp_path / slot.name
    path.write_text('["not", "an object"]')
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert slot.empty(Store(tmp_path).get(slot))
        assert slot.empty(Store(tmp_path).get(slot))  # the next start: nothing to warn about
    [record] = caplog.records
    assert f"{path} (a JSON list, not an object); kept as {path}.corrupt" in record.getMessage()
    assert (tmp_path / f"{slot.name}.corrupt").read_text() == '["not", "an object"]'


def test_a_link_in_place_of_a_journal_is_never_followed(tmp_path, caplog):
    secret = tmp_path / "elsewhere.json"
    secret.write_text('{"3": "eth1"}')
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "renames.json").symlink_to(secret)
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert Store(state_dir).get(RENAMES) == {}
    assert "a symbolic link; not followed" in caplog.records[0].getMessage()
    assert (state_dir / "renames.json.corrupt").is_symlink()  # the link moved, not its target
    assert secret.read_text() == '{"3": "eth1"}'


def test_an_unreadable_file_is_not_used_and_left_where_it_is(tmp_path, caplog):
    (tmp_path / "renames.json").mkdir()  # not a file at all: refused, set aside
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert Store(tmp_path).get(RENAMES) == {}
    assert "a directory, not a regular file" in caplog.records[0].getMessage()


def test_tidy_removes_the_leftovers_of_every_slot_and_nothing_else(tmp_path):
    left = [tmp_path / f".{slot.name}.a1b2c3d4.tmp" for slot in SLOTS]
    foreign = [tmp_path / ".other.json.a1b2c3d4.tmp", tmp_path / "primary.json.tmp"]
    for path in (*left, *foreign):
        path.write_text("x")
    assert sorted(Store(tmp_path).tidy()) == sorted(left)
    assert sorted(tmp_path.iterdir()) == sorted(foreign)
    assert Store(tmp_path / "missing").tidy() == []


def _record_and_hang(state_dir, ready):
    """Write primary.json, stopping inside the write (before its rename) until killed."""

    def hang(_fd):
        os.write(ready, b"x")
        signal.pause()

    os.fsync = hang
    Store(state_dir).put(PRIMARY, Decision({MACS[1]: "why"}))


def test_a_primary_record_write_killed_mid_way_leaves_nothing_after_the_next_start(tmp_path):
    """was: primary.json was not among the files tidied; a killed write's temp file stayed."""
    cfg = example_config(tmp_path, gpu=False)
    cfg.state_dir.mkdir()
    ready, told = os.pipe()
    child = multiprocessing.get_context("fork").Process(
        target=_record_and_hang, args=(cfg.state_dir, told)
    )
    child.start()
    try:
        assert os.read(ready, 1) == b"x"  # the child is inside the write
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        os.close(ready)
        os.close(told)
    [leftover] = cfg.state_dir.glob(".primary.json.*.tmp")
    assert not (cfg.state_dir / "primary.json").exists()
    Reconciler(cfg, example_kernel(), scan_devices=tuple).reconcile()  # a new agent's first pass
    assert not leftover.exists()
    assert not list(cfg.state_dir.glob(".*.tmp"))
