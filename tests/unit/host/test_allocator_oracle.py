"""Upstream's allocator judges kvdev's: every allocator fixture and a random batch, both sides.

The oracle is ``build/upstream/bin/allocate`` (tests/upstream/cmd/allocate: upstream's
``k8s.io/dynamic-resource-allocation/structured`` at v0.37.2 behind kvdev-host allocate's
command line). Each case becomes the documents ``kvdev-host allocate`` reads; kvdev runs them
in-process through the command (``run_allocate``), the oracle in one ``--batch`` process.
Outcomes compare as the corpus README says: exit status, the error keyword, and per claim the
results in order (shareID by presence, quantities numerically), config and node selector.

The random batch takes a new seed every run, CI included (printed; ``SEED=<n>`` replays it).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml
from allocator_cases import case, documents, fixture_runner

from kvdev.host.commands.allocate import run_allocate
from upstreamlab import upstream_bin

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "data"
FIXTURES = sorted(
    p
    for d in ("allocator", "allocator-extra", "allocator-upstream")
    for p in (DATA / d).glob("*.yaml")
)
# Differences the oracle has found and kvdev has not settled yet: strict xfail (none today).
UNSETTLED: set[str] = set()
RANDOM_CASES = int(os.environ.get("ORACLE_CASES", "300"))
CI_SEED = 20261207


# The filter timeout (10 s, kube-scheduler's) measures a machine's speed, not the input: where
# one side runs out of time and the other answers, that side is asked again with this much
# time (upstream's exhaustive search needs 50-100 s on some generated cases that kvdev proves
# hopeless at once) and the answers compare as usual.
PATIENCE = os.environ.get("ORACLE_PATIENCE", "300s")


def _timed_out(verdict):
    code, printed, _ = verdict
    return code == 2 and printed.get("reason") == "filter-timeout"


fixtures = fixture_runner()


def _gates(c):
    return ",".join(f"{k}={str(v).lower()}" for k, v in (c.get("features") or {}).items())


def oracle(cases, filter_timeout="10s"):
    """The oracle's (exit, parsed stdout) for each case, from one ``--batch`` process."""
    stream = "".join(
        json.dumps(
            {
                "node": c["node"]["name"],
                "featureGates": _gates(c),
                "filterTimeout": filter_timeout,
                "documents": documents(c),
            }
        )
        + "\n"
        for c in cases
    )
    done = subprocess.run(
        [str(upstream_bin("allocate")), "--batch"],
        input=stream,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOMAXPROCS": "1"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(cases), done.stderr
    out = []
    for line in lines:
        r = json.loads(line)
        out.append((r["exit"], json.loads(r["stdout"]) if r["stdout"].strip() else {}, r["stderr"]))
    return out


def kvdev(c, tmp_path, filter_timeout="10s"):
    """kvdev-host allocate -o json on the case's documents (in-process, through the command)."""
    path = tmp_path / "objects.json"
    listed = {"apiVersion": "v1", "kind": "List", "items": documents(c)}
    path.write_text(json.dumps(listed), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = run_allocate(
        files=[str(path)],
        node=c["node"]["name"],
        output="json",
        explain_=False,
        feature_gates=_gates(c),
        out=out,
        err=err,
        filter_timeout=filter_timeout,
    )
    return code, json.loads(out.getvalue()), err.getvalue()


def _allocations(printed):
    return {i["metadata"]["name"]: i["status"]["allocation"] for i in printed.get("items") or []}


def differences(mine, theirs):  # noqa: PLR0911 - one return per kind of difference
    """None when kvdev's (exit, JSON) equals the oracle's by the corpus rules, else what differs."""
    (code, printed, _), (want_code, want, why) = mine, theirs
    if code != want_code:
        return f"exit {code} {printed.get('reason', '')}, upstream {want_code} {want} {why}"
    if code != 0:
        same = code == 1 or printed["reason"] == want["reason"]
        return None if same else f"reason {printed['reason']}, upstream {want['reason']} {why}"
    got, expected = _allocations(printed), _allocations(want)
    if set(got) != set(expected):
        return f"claims {sorted(got)} != {sorted(expected)}"
    for name, alloc in expected.items():
        devices = [fixtures._device(d) for d in got[name]["devices"]["results"]]
        theirs_ = [fixtures._device(d) for d in alloc["devices"]["results"]]
        if devices != theirs_:
            return f"claim {name}: results {devices}, upstream {theirs_}"
        config = fixtures._norm_config(got[name]["devices"].get("config"))
        if config != fixtures._norm_config(alloc["devices"].get("config")):
            return f"claim {name}: config {config}, upstream {alloc['devices'].get('config')}"
        if fixtures._selector(got[name].get("nodeSelector")) != fixtures._selector(
            alloc.get("nodeSelector")
        ):
            sel = got[name].get("nodeSelector")
            return f"claim {name}: node selector {sel}, upstream {alloc.get('nodeSelector')}"
        groups = got[name].get("compatibilityGroups")
        if groups != alloc.get("compatibilityGroups"):
            theirs_groups = alloc.get("compatibilityGroups")
            return f"claim {name}: compatibilityGroups {groups}, upstream {theirs_groups}"
    return None


@pytest.fixture(scope="module")
def fixture_verdicts():
    cases = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in FIXTURES]
    return dict(zip(FIXTURES, oracle(cases), strict=True))


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p,
            marks=[pytest.mark.xfail(reason="oracle difference, unsettled", strict=True)]
            if p.stem in UNSETTLED
            else [],
        )
        for p in FIXTURES
    ],
    ids=[f"{p.parent.name}/{p.stem}" for p in FIXTURES],
)
def test_fixture_as_upstream_allocates(path, fixture_verdicts, tmp_path):
    c = yaml.safe_load(path.read_text(encoding="utf-8"))
    mine, theirs = kvdev(c, tmp_path), fixture_verdicts[path]
    if _timed_out(theirs) and not _timed_out(mine):  # a slow machine, not an answer (PATIENCE)
        (theirs,) = oracle([c], PATIENCE)
    if _timed_out(mine) and not _timed_out(theirs):
        mine = kvdev(c, tmp_path, PATIENCE)
    problem = differences(mine, theirs)
    assert problem is None, problem


def test_random_cases_as_upstream_allocates(tmp_path, capsys):
    # CI replays one seed (as hypothesis replays its examples there); developers explore
    seed = int(
        os.environ.get("SEED") or (CI_SEED if os.environ.get("CI") else secrets.randbits(31))
    )
    with capsys.disabled():
        print(f"\nallocator oracle: {RANDOM_CASES} random cases, SEED={seed}")
    cases = [case(seed + i) for i in range(RANDOM_CASES)]
    verdicts = oracle(cases)
    mine = [kvdev(c, tmp_path) for c in cases]
    slow = [i for i, v in enumerate(verdicts) if _timed_out(v) and not _timed_out(mine[i])]
    for i, v in zip(slow, oracle([cases[i] for i in slow], PATIENCE), strict=True):
        verdicts[i] = v
    for i, m in enumerate(mine):
        if _timed_out(m) and not _timed_out(verdicts[i]):
            mine[i] = kvdev(cases[i], tmp_path, PATIENCE)
    # upstream's exhaustive search outlasting even PATIENCE gave no answer to compare: named,
    # never read as a difference, and bounded so that the comparison keeps its meaning
    unanswered = [i for i in slow if _timed_out(verdicts[i]) and not _timed_out(mine[i])]
    assert len(unanswered) <= RANDOM_CASES // 100, (
        f"SEED={seed}: upstream answered no case of {unanswered}"
    )
    found = []
    for i, (m, theirs) in enumerate(zip(mine, verdicts, strict=True)):
        if i in unanswered:
            continue
        problem = differences(m, theirs)
        if problem is not None:
            found.append(f"case seed {seed + i}: {problem[:400]}")
    report = f"SEED={seed}: {len(found)} of {len(cases)} differ:\n" + "\n".join(found[:20])
    with capsys.disabled():
        print(report if found else f"SEED={seed}: no difference")
        if unanswered:
            print(
                f"SEED={seed}: upstream gave no answer within {PATIENCE}, not compared: seeds",
                [seed + i for i in unanswered],
            )
        if slow:
            print(
                f"SEED={seed}: asked upstream again with {PATIENCE}: seeds",
                [seed + i for i in slow],
            )
    assert not found, report


def test_the_oracle_speaks_kvdevs_command_line(tmp_path):
    """Same flags, output shape and exit codes as kvdev-host allocate, from files."""
    c = yaml.safe_load((DATA / "allocator" / "001-basic-single-device.yaml").read_text())
    objects = tmp_path / "objects.yaml"
    objects.write_text(yaml.safe_dump_all(documents(c)), encoding="utf-8")
    args = [str(upstream_bin("allocate")), "-f", str(objects), "--node", "node-a", "-o", "json"]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["kind"] == "List"
    assert printed["items"][0]["status"]["allocation"]["devices"]["results"]
    bad = subprocess.run(
        [*args, "--feature-gates", "NoSuchGate=true"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["reason"] == "usage"


def test_objects_read_with_the_api_servers_defaults(tmp_path):
    """A toleration written without operator is Equal, as the API server stores it, in the
    allocation too (upstream's SetObjectDefaults_ResourceClaim, applied by the oracle)."""
    c = yaml.safe_load((DATA / "allocator" / "001-basic-single-device.yaml").read_text())
    request = c["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]
    request["tolerations"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    mine, (theirs,) = kvdev(c, tmp_path), oracle([c])
    assert differences(mine, theirs) is None
    (result,) = _allocations(mine[1])["single-gpu"]["devices"]["results"]
    assert result["tolerations"] == [
        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
    ]
