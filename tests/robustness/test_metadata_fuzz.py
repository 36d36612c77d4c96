"""Metadata fuzzing against a running kvdev-agent on real links in a network namespace.

One agent process serves the bundled example; hypothesis draws inputs (``mutations``): the
schema's valid documents, byte-level mutations of the good files and file system pranks.
Each input is written into the tree and followed by ``POST /v1/reconcile``, a full pass that
reads every file again and answers with the status after it, so the answer is the agent's
verdict on exactly that input. After each input:

* the agent is alive and answered;
* an invalid input changed no link, address or route (``ip -j``), the claims in force are
  the last good ones, and the status shows the error with the file (and the field: the
  status must carry exactly the problems the schema's checker finds in those bytes);
* a valid input left no error on its file; once the good files are back, the links are
  exactly as before.

The short version (300 inputs) runs by default; ``--robustness-long`` runs 10,000.
"""

import contextlib
import os
import shutil
import threading
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mutations import EXISTING, NEW, strategy

from agentlab import eventually, snapshot, write_atomically
from kvdev.guest.core.check import check_raw
from kvdev.guest.core.observed import RawFile
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import role_of

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

SHORT, LONG = 300, 10_000
TRACE = bool(os.environ.get("KVDEV_FUZZ_TRACE"))  # print each input as it is tried
TEN_MB = 10 * 2**20
PRANK_ERRORS = {
    "big": "cannot read: larger than",
    "symlink-out": "symbolic link points outside the tree; not read",
    "fifo": "cannot read: a FIFO, not a regular file; not opened",
}


class Fuzz:
    """The agent, the good state, and the counters for the report."""

    def __init__(self, agent, row):
        self.agent, self.row, self.tree = agent, row, agent.tree
        self.good = {rel: (self.tree / rel).read_bytes() for rel in EXISTING}
        self.outside = agent.work / "outside.json"
        self.baseline = snapshot(agent.ns)
        status = self.reconcile()
        self.claims = status["claims"]
        assert status["metadataErrors"] == [], status["metadataErrors"]

    def source(self, rel):
        return str(self.tree / rel)

    def reconcile(self):
        code, body, _ = self.agent.post("/v1/reconcile")
        self.row.crashes += 0 if self.agent.alive() else 1
        assert self.agent.alive(), self.agent.log()[-3000:]
        if code != 200:
            self.row.crashes += 1
            pytest.fail(
                f"reconcile answered {code} {body}; the agent's stacks:\n{self.agent.dump()}"
            )
        return body

    def restore(self, rel):
        """Put the good file back in one rename (over a link or FIFO too): the agent never
        sees the path empty, which it would rightly take for the file's removal."""
        path = self.tree / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        if rel in self.good:
            write_atomically(path, self.good[rel].decode())
        elif rel == NEW:
            shutil.rmtree(self.tree / "resourceclaims/fuzz-claim", ignore_errors=True)

    def write(self, rel, data):
        path = self.tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".fuzz-tmp")
        tmp.write_bytes(data)
        tmp.replace(path)

    def expect(self, rel, data):
        """The problems the agent must report for ``data`` at ``rel`` (empty when valid)."""
        if len(data) > MAX_STREAM_BYTES:  # the reader refuses it before the checker sees it
            return [f"{self.source(rel)}: cannot read: larger than {MAX_STREAM_BYTES} bytes"]
        result = check_raw(RawFile(self.source(rel), rel, role_of(rel), data))
        if not result.ok:
            return sorted(str(p) for p in result.errors)
        # A device kvdev cannot act on keeps its last good description, and says why.
        before = self.good.get(rel)  # a new file has no last good content
        good = check_raw(RawFile(self.source(rel), rel, role_of(rel), before)) if before else None
        kept = {d.key for d in good.described if d.usable} if good else set()
        return sorted(
            str(p) for d in result.described if not d.usable and d.key in kept for p in d.problems
        )

    def prank(self, name, rel):
        """Play ``name`` on ``rel``; the reconcile's status and the error to expect (or None)."""
        if name == "big":
            self.write(rel, self.good[rel] + b" " * (TEN_MB - len(self.good[rel])))
        elif name == "symlink-out":  # each put in place atomically: never "no file" between
            self.outside.write_bytes(self.good[rel])
            self.replace(rel, lambda tmp: tmp.symlink_to(self.outside))
        elif name == "fifo":
            self.replace(rel, os.mkfifo)
        else:  # rewritten-mid-read: torn states while the pass reads; good content at rest
            return self.rewrite_during_reconcile(rel), None
        return self.reconcile(), PRANK_ERRORS.get(name)

    def replace(self, rel, make):
        tmp = (self.tree / rel).with_name("prank.tmp")
        make(tmp)
        tmp.replace(self.tree / rel)

    def rewrite_during_reconcile(self, rel):
        path, good, stop = self.tree / rel, self.good[rel], threading.Event()

        def churn():
            while not stop.is_set():
                with path.open("wb") as f:  # not atomic on purpose: readers see it torn
                    f.write(good[: len(good) // 2])
                    f.flush()
                    time.sleep(0.001)
                    f.write(good[len(good) // 2 :])

        writer = threading.Thread(target=churn, daemon=True)
        writer.start()
        try:
            return self.reconcile()
        finally:
            stop.set()
            writer.join()

    def check_links(self, what):
        """No link, address or route differs from the good state."""
        now = snapshot(self.agent.ns)
        self.row.unintended += int(now != self.baseline)
        links, routes = now
        diff = {
            i: (self.baseline[0].get(i), v)
            for i, v in links.items()
            if v != self.baseline[0].get(i)
        }
        assert now == self.baseline, (what, diff, set(routes) ^ set(self.baseline[1]))

    def check_unchanged(self, status, what):
        """The links and the claims in force are the good ones."""
        self.check_links(what)
        assert status["claims"] == self.claims, what

    def run(self, item):
        self.row.inputs += 1
        rel, what = item.target, f"{item.kind} on {item.target}"
        if TRACE:
            print(f"{time.monotonic():.2f}", what, len(item.data or b""), flush=True)
        try:
            if item.prank is not None:
                status, error = self.prank(item.prank, item.target)
                if error is not None:
                    found = [e for e in status["metadataErrors"] if e.startswith(self.source(rel))]
                    assert any(error in e for e in found), (what, status["metadataErrors"])
                self.check_unchanged(status, what)
            else:
                self.write(rel, item.data)
                status = self.reconcile()
                expected = self.expect(rel, item.data)
                assert sorted(status["metadataErrors"]) == expected, what
                if expected:
                    self.check_unchanged(status, what)
        finally:
            self.restore(rel)
        # The good files back, and read by a pass before the next input: an input the agent
        # took as valid at file level (a device it kept the last good description of) stays in
        # force until then, and the next input's expected errors assume the good state.
        status = self.reconcile()
        assert status["metadataErrors"] == [], what
        self.check_unchanged(status, f"after {what}, with the good files back")


def test_metadata_fuzz_against_the_running_agent(live_agent, long_run, report):
    row = report("metadata-fuzz (long)" if long_run else "metadata-fuzz")
    fuzz = Fuzz(live_agent, row)
    row.fds_before = live_agent.settled_fds()
    max_rss = [live_agent.rss()]
    examples = LONG if long_run else SHORT

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        # No shrinking: the agent's state carries over from input to input, so a shrunk input
        # replayed later fails for what an earlier one left (a stale altname once showed as
        # "truncated on nic-1"); the first failure, with its input, is the one to read.
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data):
        fuzz.run(data.draw(strategy(fuzz.good)))
        max_rss[0] = max(max_rss[0], live_agent.rss())

    try:
        one()
    finally:
        row.max_rss_mb = round(max_rss[0] / 2**20, 1)
        with contextlib.suppress(Exception):  # a pass may still hold a file open: let it end
            settled = eventually(lambda: live_agent.fds() <= row.fds_before)
            row.fds_after = row.fds_before if settled else live_agent.fds()
    assert row.inputs >= examples
    assert row.fds_after <= row.fds_before
    assert "Traceback" not in live_agent.log()
