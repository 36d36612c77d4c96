"""GET /v1/metrics of a real kvdev-agent on real links in a network namespace.

The agent serves in the namespace against a copy of the example tree; the counters are
scraped over its socket (and through ``kvdev metrics``) and parsed with prometheus_client's
own text parser, while a metadata change, someone else's change to a managed link and a bad
metadata file happen. Each scrape is taken between two reads of the status's pass number
that agree, so the pass counters are compared with the agent's own count of passes.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentlab import (
    NICS,
    addresses,
    agent_args,
    eventually,
    ip,
    link,
    make_guest,
    serving,
    snapshot,
    stream_objects,
)
from kvdev.guest.cli.client import Client, UnixHTTPConnection
from kvdev.guest.core.metrics import STEP_KINDS

KVDEV = str(Path(sys.executable).parent / "kvdev")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


@pytest.fixture
def guest(netns, tmp_path):
    return netns, make_guest(netns, tmp_path), tmp_path


def parse(text):
    """{(sample name, sorted label items): value}."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(sock):
    """(the status's pass number, the counters), taken while no pass ended in between."""
    client = Client(str(sock))
    for _ in range(200):  # a pass ending between the reads: read again (bounded)
        before = client.get("/v1/status")["reconcile"]
        found = parse(client.text("/v1/metrics"))
        if client.get("/v1/status")["reconcile"] == before:
            return before, found
    raise AssertionError("the agent never stopped passing long enough for one scrape")


def total(found, name, **labels):
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, got), v in found.items()
        if n == name and all(dict(got).get(k) == want for k, want in labels.items())
    )


def steps(found, name="kvdev_agent_steps_applied_total"):
    return {kind: total(found, name, kind=kind) for kind in STEP_KINDS}


def delta(after, before):
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def passes(found, **labels):
    return total(found, "kvdev_agent_passes_total", **labels)


def settled(sock, check):
    """Scrape until ``check(found)`` holds (a bounded number of tries); the last scrape."""
    box = {}

    def look():
        box["last"] = scrape(sock)
        return check(box["last"][1])

    assert eventually(look, timeout=30), f"never held; last scrape: {box.get('last')}"
    return box["last"]


def write_into(path, text, work):
    """Atomically, from outside the watched tree: one rename event, no temporary file in it."""
    tmp = work / "incoming.tmp"
    tmp.write_text(text)
    tmp.replace(path)


def test_scrapes_count_what_passes_applied_restored_and_refused(guest):
    ns, tree, work = guest
    sock = work / "agent.sock"
    with serving(ns, tree, work):
        # the first pass configured the example: its steps are counted, as one "start" pass
        count0, first = settled(sock, lambda f: passes(f, trigger="start") == 1)
        assert passes(first) == count0  # every pass the agent made, and no other
        assert passes(first, result="ok") == count0
        assert steps(first)["AddAddress"] == 5  # data0 1, data1 1, fast0 3
        assert steps(first)["Rename"] == 3
        assert sum(steps(first, "kvdev_agent_step_errors_total").values()) == 0
        assert total(first, "kvdev_agent_devices", phase="Configured") == 3
        assert total(first, "kvdev_agent_devices", phase="Missing") == 1
        assert total(first, "kvdev_agent_pass_duration_seconds_count") == count0
        assert total(first, "kvdev_agent_last_ok_pass_timestamp_seconds") > 1.7e9

        # new metadata: one more address on data0, and exactly that step
        path = tree / NICS
        docs = stream_objects(path)
        for doc in docs:
            doc["requests"][0]["devices"][0]["networkData"]["ips"].append("10.1.0.50/24")
            doc["metadata"]["generation"] = 3
        write_into(path, "".join(json.dumps(d) + "\n" for d in docs), work)
        assert eventually(lambda: "10.1.0.50/24" in addresses(ns, "data0"))
        count1, second = settled(sock, lambda f: steps(f) != steps(first))
        assert delta(steps(second), steps(first)) == {"AddAddress": 1}
        assert passes(second) - passes(first) == count1 - count0
        assert passes(second, trigger="metadata") - passes(first, trigger="metadata") >= 1
        assert passes(second, result="ok") - passes(first, result="ok") == count1 - count0
        assert total(second, "kvdev_agent_drift_restored_total") == 0

        # someone else removes the address: a pass on the netlink event puts it back (drift)
        ip(ns, "addr", "del", "10.1.0.50/24", "dev", "data0")
        count2, third = settled(sock, lambda f: total(f, "kvdev_agent_drift_restored_total") > 0)
        assert "10.1.0.50/24" in addresses(ns, "data0")
        assert total(third, "kvdev_agent_drift_restored_total") == 1
        assert delta(steps(third), steps(second)) == {"AddAddress": 1}
        restoring = sum(  # on the netlink event, or verifying a metadata pass not yet verified
            passes(third, trigger=t) - passes(second, trigger=t) for t in ("link", "verify")
        )
        assert restoring >= 1
        assert passes(third) - passes(second) == count2 - count1

        # a bad metadata file: the error counter moves by one; no step, no other counter
        kernel = snapshot(ns)
        write_into(path, '{"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "Dev', work)

        def invalid(f):
            return total(f, "kvdev_agent_metadata_errors_total", kind="invalid")

        assert invalid(third) == 0
        count3, fourth = settled(sock, lambda f: invalid(f) > 0)
        assert invalid(fourth) == 1
        assert total(fourth, "kvdev_agent_metadata_errors_total") == 1
        assert steps(fourth) == steps(third)
        assert steps(fourth, "kvdev_agent_step_errors_total") == steps(
            third, "kvdev_agent_step_errors_total"
        )
        assert total(fourth, "kvdev_agent_drift_restored_total") == 1
        assert passes(fourth) - passes(third) == count3 - count2
        assert snapshot(ns) == kernel
        assert link(ns, "data0")["mtu"] == 9000


def test_metrics_answer_as_prometheus_text_to_head_and_to_kvdev_metrics(guest):
    ns, tree, work = guest
    sock = work / "agent.sock"
    with serving(ns, tree, work):
        conn = UnixHTTPConnection(str(sock), 10.0)
        try:
            conn.request("GET", "/v1/metrics")
            answer = conn.getresponse()
            body = answer.read()
            assert answer.status == 200
            assert answer.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
            assert int(answer.getheader("Content-Length")) == len(body)
            conn.request("HEAD", "/v1/metrics")  # the same connection: kept alive
            head = conn.getresponse()
            assert head.status == 200
            assert head.read() == b""
            assert head.getheader("Content-Type").startswith("text/plain")
        finally:
            conn.close()
        found = parse(body.decode())
        assert total(found, "kvdev_agent_build_info") == 1
        printed = subprocess.run(
            [KVDEV, "--socket", str(sock), "metrics"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert printed.returncode == 0, printed.stderr
        assert passes(parse(printed.stdout), trigger="start") == 1
        refused = subprocess.run(
            [KVDEV, "metrics", "-o", "json", "--socket", str(sock)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 2
        assert "metrics prints Prometheus's text format only" in refused.stderr


def test_a_once_run_does_not_import_prometheus_client(guest):
    ns, tree, work = guest
    program = (
        "import sys\n"
        "from kvdev.guest.__main__ import main\n"
        "code = main(sys.argv[1:])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'prometheus_client')\n"
        "print('LOADED', loaded, 'EXPOSITION', 'kvdev.guest.adapters.exposition' in sys.modules)\n"
        "sys.exit(code)\n"
    )
    args = agent_args(tree, work, "--once")[1:]  # the agent's own arguments, not its path
    done = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # the example's GPU is missing in a netns
    assert "LOADED [] EXPOSITION False" in done.stdout, done.stdout + done.stderr
    assert addresses(ns, "data0") == ["10.1.0.5/24"]  # the run was real: it configured data0


def _cli_as_nobody() -> str | None:
    """Why this interpreter's ``kvdev`` cannot run as nobody (None when it can).

    A pyenv Python under ``/root`` with a shared libpython (the compat legs' 3.13) cannot: its
    RUNPATH is in a directory nobody may not enter. The dev venv's leg runs the test.
    """
    if shutil.which("setpriv") is None:
        return "needs setpriv to ask as nobody"
    done = subprocess.run(
        [*NOBODY, KVDEV, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    return None if done.returncode == 0 else f"{KVDEV} cannot run as nobody: {done.stderr.strip()}"


def test_metrics_are_read_by_whom_status_is_read_by(guest):
    if (why := _cli_as_nobody()) is not None:
        pytest.skip(why)
    ns, tree, work = guest
    sockdir = Path(tempfile.mkdtemp(prefix="kvdev-metrics-"))  # reachable by nobody
    sockdir.chmod(0o755)
    sock = sockdir / "agent.sock"
    try:
        with serving(ns, tree, work, sock=sock):
            sock.chmod(0o666)  # nobody may connect; the agent's rule still applies
            answers = {}
            for endpoint in ("metrics", "status"):
                done = subprocess.run(
                    [*NOBODY, KVDEV, "--socket", str(sock), endpoint],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                answers[endpoint] = (done.returncode, done.stderr)
            assert answers["metrics"] == answers["status"]
            code, err = answers["metrics"]
            assert code == 2
            assert "GET is not permitted to uid 65534" in err
            assert passes(parse(Client(str(sock)).text("/v1/metrics")), trigger="start") == 1
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
