"""Hostile trees under the metadata root: deep, wide, device nodes, FIFOs, link loops.

Regressions (robustness probe): a directory ~1,000 levels deep crashed the agent and ``--once``
with RecursionError (finding 2); 100,000 unrelated files made every pass take 6.7 s (finding 4);
a device node in the tree was opened before the regular-file check (finding 6). The class:
every walk is iterative and bounded (depth, entries, bytes, time), what a bound left out is a
condition in the status, and the metadata the agent acts on is still read, first.

A real agent serves the bundled example in a namespace; the junk comes and goes while it runs.
Times are printed as figures, never asserted.
"""

import json
import os
import stat
import subprocess
import time

import pytest

from agentlab import (
    NICS,
    addresses,
    agent_args,
    eventually,
    make_guest,
    serving,
    snapshot,
    stream_objects,
    write_atomically,
)
from conftest import CONVERGED, LiveAgent

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

META = "resourceclaims/junk-claim/nic/d.example.com-metadata.json"


def deep(top, levels):
    """``top/a/.../a``, ``levels`` deep, made through descriptors (too long to name)."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return top / "a"


def remove(path):
    subprocess.run(["rm", "-rf", str(path)], check=True)  # rm(1) does not recurse either


def conditions(agent):
    """(type, severity, message) of each condition that holds now."""
    return [
        (c["type"], c["severity"], c["message"]) for c in agent.get("/v1/status")[1]["conditions"]
    ]


def set_ip(tree, ip):
    path = tree / NICS
    objects = stream_objects(path)
    for o in objects:
        o["requests"][0]["devices"][0]["networkData"]["ips"] = [ip]
    write_atomically(path, "".join(json.dumps(o) + "\n" for o in objects))


@pytest.mark.parametrize("levels", [1000, 5000])
def test_once_reads_a_tree_with_a_deep_directory(netns, tmp_path, levels, report):
    row = report(f"tree-bounds (--once, {levels} levels)")
    tree = make_guest(netns, tmp_path)
    deep(tree / "junk", levels)
    try:
        cmd = ["ip", "netns", "exec", netns, *agent_args(tree, tmp_path, "--once", "--json")]
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        print(f"--once with {levels} levels: {time.monotonic() - started:.2f} s")
    finally:
        remove(tree / "junk")
    row.inputs = 1
    row.crashes = int(done.returncode not in {0, 1} or "Traceback" in done.stderr)
    assert done.returncode == 1, done.stderr[-3000:]  # 1: the GPU is missing in a namespace
    status = json.loads(done.stdout)
    assert status["counts"] == CONVERGED
    assert [c["type"] for c in status["conditions"]] == ["MetadataTruncated"]
    assert status["conditions"][0]["severity"] == "Warning"


@pytest.fixture
def junk_agent(netns, tmp_path, monkeypatch):
    """The agent serving the example, started with a 1,000-level directory in its tree."""
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")
    tree = make_guest(netns, tmp_path)
    deep(tree / "deep-at-start", 1000)
    sock = tmp_path / "agent.sock"
    try:
        with serving(netns, tree, tmp_path, sock=sock) as (proc, _):
            agent = LiveAgent(netns, tree, tmp_path, sock, proc)
            assert eventually(lambda: agent.get("/v1/status")[1]["counts"] == CONVERGED)
            yield agent
    finally:
        for junk in tree.glob("*"):
            if junk.name not in {"resourceclaims", "resourceclaimtemplates", "kvdev"}:
                remove(junk)
        remove(tree / "resourceclaims" / "junk-claim")


def special_files(tree):
    """A character device, a FIFO and a link to itself, each at a metadata file's place."""
    device = tree / META
    device.parent.mkdir(parents=True)
    os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    os.mkfifo(device.with_name("fifo.example.com-metadata.json"))
    loop = device.with_name("loop.example.com-metadata.json")
    loop.symlink_to(loop.name)
    return device


def test_serving_survives_deep_wide_and_special_trees(junk_agent, long_run, report):
    agent, tree = junk_agent, junk_agent.tree
    row = report("tree-bounds (long)" if long_run else "tree-bounds")
    row.fds_before = agent.settled_fds()
    links_before = snapshot(agent.ns)
    # 1. deep at start: read all the same; deeper than any file it reads: a warning; polled
    assert {(t, s) for t, s, _ in conditions(agent)} == {
        ("MetadataTruncated", "Warning"),
        ("MetadataPolled", "Warning"),
    }
    remove(tree / "deep-at-start")
    assert eventually(lambda: not conditions(agent), timeout=20), conditions(agent)
    # 2. moved in while watched whole: watchdog walks it recursively in its thread, and dies
    deep(agent.work / "outside", 5000).rename(tree / "moved-in")
    assert eventually(lambda: "watching failed (RecursionError" in agent.log(), timeout=20)
    # 3. wide, and files where metadata belongs that are no regular files
    wide = tree / "wide"
    wide.mkdir()
    count = 100_000 if long_run else 20_000
    for i in range(count):
        (wide / f"f{i:06}").touch()
    device = special_files(tree)
    row.inputs = 2 + count + 3
    answer = agent.post("/v1/reconcile")[1]
    print(f"a pass over {count} unrelated files and the rest: {answer['tookSeconds']} s")
    errors = "\n".join(answer["metadataErrors"])
    never_opened = "not a regular file; not opened"
    assert f"{device}: cannot read: a character device, {never_opened}" in errors
    assert f"fifo.example.com-metadata.json: cannot read: a FIFO, {never_opened}" in errors
    assert "loop.example.com-metadata.json: cannot read" in errors
    cut = [m for t, s, m in conditions(agent) if (t, s) == ("MetadataTruncated", "Error")]
    assert len(cut) == 1  # files went unread: it says so, and it is not converged
    assert "stopped after 10000 entries" in cut[0]
    assert answer["counts"] == CONVERGED  # the metadata is read first, whatever else is there
    # 4. a change still reaches the links while all of that is there
    set_ip(tree, "10.1.0.77/24")
    assert eventually(lambda: addresses(agent.ns, "data0") == ["10.1.0.77/24"], timeout=20)
    set_ip(tree, "10.1.0.5/24")
    assert eventually(lambda: addresses(agent.ns, "data0") == ["10.1.0.5/24"], timeout=20)
    # 5. the junk goes: so do the conditions and the errors
    for junk in (tree / "moved-in", wide, tree / "resourceclaims/junk-claim"):
        remove(junk)
    assert eventually(lambda: not conditions(agent), timeout=20), conditions(agent)
    assert eventually(lambda: agent.get("/v1/status")[1]["metadataErrors"] == [], timeout=20)
    finish(agent, row, links_before)


def finish(agent, row, links_before):
    row.crashes = 0 if agent.alive() else 1
    assert agent.alive(), agent.log()[-3000:]
    assert "Traceback" not in agent.log(), agent.log()[-3000:]
    assert eventually(lambda: agent.fds() <= row.fds_before, timeout=20), agent.fds()
    row.fds_after = agent.fds()
    row.max_rss_mb = round(agent.rss() / 2**20, 1)
    # the route via 10.1.0.1 went with 10.1.0.5 for a moment (the kernel's doing): settled now
    assert eventually(lambda: snapshot(agent.ns) == links_before, timeout=20)
    row.unintended = int(snapshot(agent.ns) != links_before)
