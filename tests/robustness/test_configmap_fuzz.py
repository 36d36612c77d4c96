"""Fuzzing every key the controller writes, against a running kvdev-agent on a ConfigMap volume.

The agent serves the bundled example as a VMI's ConfigMap reaches the guest: a volume laid out
and swapped by kubelet's own writer (``upstreamlab.publish_configmap``), with a key per
stream, ``guest-hints.json`` and the sources index ``kvdev-sources.json``. Hypothesis draws an
input for one of those keys (``mutations``: the metadata fuzzer's mutations of a stream and of
the hints, and ``index_strategy`` for the index: any JSON value at any place of it, an object
or an array as an origin among them, truncations, any bytes); each is published as a new
version of the volume and followed by ``POST /v1/reconcile``. After each input:

* the agent is alive and answered;
* the status carries exactly the problems the schema's checkers find in those bytes, on that
  key (``check_raw`` as the agent reads that key; ``origins.parse`` for the index);
* an invalid input changed no link, address or route (``ip -j``);
* with the good volume back, no error is left and the links are exactly as before.

The short version (150 inputs) runs by default; ``--robustness-long`` runs 3,000.
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mutations import HINTS, NEW, NICS, SOURCES, TEMPLATE, Input, index_strategy, strategy
from rawhttp import request

from agentlab import EXAMPLES, eventually, make_guest, serving, snapshot
from kvdev.guest.core.check import check_raw
from kvdev.guest.core.observed import RawFile
from kvdev.schema.origins import index_json, parse
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import configmap_role
from upstreamlab import publish_configmap

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

SHORT, LONG = 150, 3_000
TREE = EXAMPLES / "dra-device-attributes"
CONVERGED = {"Configured": 3, "Missing": 1}  # the example in a namespace: no GPU there


def key_of(rel):
    """The ConfigMap key the controller writes a tree file to."""
    if rel == HINTS:
        return "guest-hints.json"
    _, directory, request_name, name = rel.split("/")
    return f"{directory}.{request_name}.{name}"


class VolumeFuzz:
    """The agent on a ConfigMap volume, the good keys, and the counters for the report."""

    def __init__(self, ns, volume, sock, proc, row):
        self.ns, self.volume, self.sock, self.proc, self.row = ns, volume, sock, proc, row
        self.good_tree = {rel: (TREE / rel).read_bytes() for rel in (NICS, HINTS, TEMPLATE)}
        self.good = {key_of(rel): data for rel, data in self.good_tree.items()}
        for path in TREE.rglob("*-metadata.json"):  # every stream, the GPU's too
            self.good.setdefault(key_of(str(path.relative_to(TREE))), path.read_bytes())
        self.good[SOURCES] = index_json({key_of(NICS): "driver"}).encode()
        publish_configmap(volume, self.good)
        status = self.reconcile()
        assert status["metadataErrors"] == [], status["metadataErrors"]
        assert status["counts"] == CONVERGED, status["counts"]
        self.baseline = snapshot(ns)

    def reconcile(self):
        code, body, _ = request(self.sock, "POST", "/v1/reconcile", timeout=35.0)
        alive = self.proc.poll() is None
        self.row.crashes += 0 if alive else 1
        assert alive, "the agent exited"
        assert code == 200, (code, body)
        return body

    def expect(self, key, data):
        """The problems the agent must report for ``data`` under ``key`` (empty when valid)."""
        source = str(self.volume / key)
        if len(data) > MAX_STREAM_BYTES:
            return [f"{source}: cannot read: larger than {MAX_STREAM_BYTES} bytes"]
        if key == SOURCES:
            _, problem = parse(data, source)
            return [] if problem is None else [str(problem)]
        role = configmap_role(key)
        stream = key != "guest-hints.json"
        result = check_raw(RawFile(source, None, role, data, stream_key=stream))
        if not result.ok:
            return sorted(str(p) for p in result.errors)
        before = self.good.get(key)  # a device kvdev cannot act on keeps its last good one
        good = check_raw(RawFile(source, None, role, before, stream_key=stream)) if before else None
        kept = {d.key for d in good.described if d.usable} if good else set()
        return sorted(
            str(p) for d in result.described if not d.usable and d.key in kept for p in d.problems
        )

    def run(self, item):
        self.row.inputs += 1
        key = SOURCES if item.target == SOURCES else key_of(item.target)
        what = f"{item.kind} on {key}"
        publish_configmap(self.volume, {**self.good, key: item.data})
        status = self.reconcile()
        expected = self.expect(key, item.data)
        assert sorted(status["metadataErrors"]) == expected, what
        if expected:
            now = snapshot(self.ns)
            self.row.unintended += int(now != self.baseline)
            assert now == self.baseline, what
        publish_configmap(self.volume, self.good)
        status = self.reconcile()
        assert status["metadataErrors"] == [], what
        assert snapshot(self.ns) == self.baseline, f"after {what}, with the good volume back"


def _on_the_volume(item):
    """A stream or hints input of the metadata fuzzer, as a key's bytes (no file pranks: a
    ConfigMap version is kubelet's regular files; the new claim is a new stream key)."""
    return item.prank is None


@pytest.fixture
def volume_agent(netns, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")
    sockdir = Path(tempfile.mkdtemp(prefix="kvdev-robust-"))
    sock = sockdir / "agent.sock"
    make_guest(netns, tmp_path)
    volume = tmp_path / "volume"
    publish_configmap(volume, {key_of(HINTS): (TREE / HINTS).read_bytes()})
    try:
        with serving(netns, volume, tmp_path, sock=sock) as (proc, _):
            yield netns, volume, sock, proc, tmp_path
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


def test_every_key_the_controller_writes_fuzzed_against_the_running_agent(
    volume_agent, long_run, report
):
    ns, volume, sock, proc, work = volume_agent
    row = report("configmap-fuzz (long)" if long_run else "configmap-fuzz")
    fuzz = VolumeFuzz(ns, volume, sock, proc, row)
    examples = LONG if long_run else SHORT
    inputs = st.one_of(
        strategy(fuzz.good_tree).filter(_on_the_volume),
        index_strategy(fuzz.good[SOURCES]),
        index_strategy(fuzz.good[SOURCES]),  # as likely as a stream or the hints
    )

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        phases=(Phase.explicit, Phase.reuse, Phase.generate),  # no shrinking: state carries over
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data):
        item = data.draw(inputs)
        fuzz.run(Input(item.kind, item.target, item.data) if item.target != NEW else item)

    one()
    assert row.inputs >= examples
    with contextlib.suppress(Exception):
        eventually(lambda: proc.poll() is None)
    assert "Traceback" not in (work / "agent.log").read_text()
