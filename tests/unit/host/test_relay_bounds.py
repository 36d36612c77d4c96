"""The relay's work per pass is bounded whatever shape a spec takes (property tests).

Specs of any shape (devices and mounts repeated through YAML aliases or written out, JSON or
YAML, one hostPath or several) are read beside a good spec: the reads made are counted (each
``open(2)`` for reading), not timed. Each distinct hostPath is read at most once per pass; a
spec over a bound is skipped and named and never keeps the good spec's file from being found.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdev.host.cdi import spec as cdi_spec
from kvdev.host.relay import finder
from kvdev.schema.tree import ROOT

DRIVER = "sriov.example.com"
HOSTILE_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
GOOD_UID = "0b6f4c3e-91d4-4d2a-8f55-6a7e2c1d9b30"
PLACE = f"{ROOT}/resourceclaims/c/nic/{DRIVER}-metadata.json"


def yaml_with_aliases(devices: int, mounts: int, hosts: list[str]) -> str:
    lines = [f"kind: {DRIVER}/metadata", "cdiVersion: 0.5.0"]
    for k, host in enumerate(hosts):
        lines.append(f"m{k}: &m{k} {{hostPath: '{host}', containerPath: '{PLACE}'}}")
    refs = ", ".join(f"*m{j % len(hosts)}" for j in range(mounts))
    lines.append(f"ms: &ms [{refs}]")
    lines.append(f"d: &d {{name: {HOSTILE_UID}_nic, containerEdits: {{mounts: *ms}}}}")
    lines.append("devices: [" + ", ".join(["*d"] * devices) + "]")
    return "\n".join(lines) + "\n"


def written_out(devices: int, mounts: int, hosts: list[str]) -> str:
    ms = [{"hostPath": hosts[j % len(hosts)], "containerPath": PLACE} for j in range(mounts)]
    device = {"name": f"{HOSTILE_UID}_nic", "containerEdits": {"mounts": ms}}
    return json.dumps({"kind": f"{DRIVER}/metadata", "devices": [device] * devices})


def reads_while(call):
    """(the call's answer, how many files it opened for reading)."""
    real, count = os.open, [0]

    def watched(path, flags, *args, **kwargs):
        if not flags & (os.O_PATH | os.O_DIRECTORY):
            count[0] += 1
        return real(path, flags, *args, **kwargs)

    os.open = watched
    try:
        return call(), count[0]
    finally:
        os.open = real


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    devices=st.integers(0, 2 * cdi_spec.MAX_DEVICES),
    mounts=st.integers(0, 40),
    paths=st.integers(1, 3),
    aliases=st.booleans(),
)
def test_any_spec_shape_costs_bounded_reads_and_harms_no_other_claim(
    devices, mounts, paths, aliases
):
    with tempfile.TemporaryDirectory() as tmp:
        cdi, files = Path(tmp, "cdi"), Path(tmp, "plugins")
        cdi.mkdir()
        files.mkdir()
        hosts = []
        for k in range(paths):
            (files / f"{k}.json").write_bytes(b'{"same": "bytes"}')
            hosts.append(f"{files}/{k}.json")
        make = yaml_with_aliases if aliases else written_out
        (cdi / "a-shape.yaml").write_text(make(devices, mounts, hosts))
        (files / "good.json").write_bytes(b'{"good": true}')
        good = {
            "name": f"{GOOD_UID}_nic",
            "containerEdits": {
                "mounts": [{"hostPath": f"{files}/good.json", "containerPath": PLACE}]
            },
        }
        (cdi / "b-good.json").write_text(
            json.dumps({"kind": f"{DRIVER}/metadata", "devices": [good]})
        )
        found, reads = reads_while(lambda: finder.find([cdi], [files]))
    # Each spec once, each distinct hostPath at most once: never per device or per mount.
    assert reads <= 2 + paths + 1
    assert [f.claim_uid for f in found.files if f.claim_uid == GOOD_UID] == [GOOD_UID]
    over = devices > cdi_spec.MAX_DEVICES or devices * mounts > cdi_spec.MAX_MOUNTS
    named = [Path(p.source).name for p in found.problems]
    if over:
        assert named == ["a-shape.yaml"]
        assert not found.complete  # its claims are not known: no record is deleted
        assert HOSTILE_UID not in {f.claim_uid for f in found.files}
    else:
        assert named == []
        relayed = {f.claim_uid for f in found.files}
        assert (HOSTILE_UID in relayed) == (devices > 0 and mounts > 0)


def test_the_hostile_alias_spec_pass(tmp_path):
    """2,000 devices of 2,000 mounts each, by aliases (16 KB): one pass, its reads and time."""
    cdi, files = tmp_path / "cdi", tmp_path / "plugins"
    cdi.mkdir()
    files.mkdir()
    (files / "m.json").write_bytes(b"{}")
    text = yaml_with_aliases(2000, 2000, [f"{files}/m.json"])
    (cdi / "hostile.yaml").write_text(text)
    started = time.perf_counter()
    found, reads = reads_while(lambda: finder.find([cdi], [files]))
    took = time.perf_counter() - started
    print(f"\nhostile alias spec ({len(text)} bytes): one pass {took * 1000:.1f} ms, {reads} reads")
    assert reads == 1  # the spec itself; no file it mounts
    assert "2000 devices, over" in found.problems[0].message
