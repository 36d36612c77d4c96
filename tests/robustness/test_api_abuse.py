"""Local API abuse against a real kvdev-agent process serving real links in a namespace.

One storm at a time hits the agent's socket: hundreds of concurrent connections, slowloris
clients, 1 MB headers, garbage bytes, half-closed sockets, while a well-behaved root client
keeps asking for the status. Afterwards: the agent still runs, every abuser got its answer
(or was refused), the well-behaved client was answered within a bound throughout, the RSS
stayed bounded and the descriptor count is back to where it was. Access: a uid outside the
socket's group cannot connect (or gets 403 when the file mode lets it in); a member may read
but not reconcile.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentlab import eventually, snapshot

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

MEMBER_GID = 4711  # the socket's group for the access tests; no such group needs to exist
RSS_GROWTH = 20 * 2**20
PROBE_BOUND = 2.0  # seconds a well-behaved client may wait for an answer during the storm
HERE = Path(__file__).resolve().parent
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # nobody can run it


class Sampler(threading.Thread):
    """Samples the agent's RSS and asks for the status as root, until stopped."""

    def __init__(self, agent):
        super().__init__(daemon=True)
        self.agent, self.stop = agent, threading.Event()
        self.max_rss, self.answers, self.failures = agent.rss(), [], []

    def run(self):
        while not self.stop.wait(0.2):
            self.max_rss = max(self.max_rss, self.agent.rss())
            try:
                status, _, took = self.agent.get("/v1/status", timeout=PROBE_BOUND * 2)
            except OSError as e:
                self.failures.append(repr(e))
                continue
            self.answers.append((status, took))


def storm_as_member(agent, scale):
    """One storm from uid nobody in the socket's group (root when setpriv is missing)."""
    script = [PYTHON, str(HERE / "abusers.py"), str(agent.sock), str(scale)]
    if shutil.which("setpriv"):
        os.chown(agent.sock, -1, MEMBER_GID)
        script = [*as_nobody(MEMBER_GID), *script]
    done = subprocess.run(script, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    return out["tried"], out["got"]


def test_storm_keeps_serving_and_leaks_nothing(live_agent, long_run, report):
    agent = live_agent
    row = report("api-abuse (long)" if long_run else "api-abuse")
    links_before = snapshot(agent.ns)
    for _ in range(5):  # warm up: the first answers allocate what every later one reuses
        assert agent.get("/v1/status")[0] == 200
    row.fds_before, rss_before = agent.settled_fds(), agent.rss()
    sampler = Sampler(agent)
    sampler.start()
    try:
        for _ in range(5 if long_run else 1):
            tried, got = storm_as_member(agent, 3 if long_run else 1)
            row.inputs += tried
            assert set(got["flood"]) <= {200, 503}, got["flood"]
            assert {s for s, _ in got["slowloris"]} <= {408, 503}, got["slowloris"]
            assert all(t < 8 for s, t in got["slowloris"] if s == 408)  # cut at 5 s, not later
            assert set(got["huge"]) <= {431, 503, 0}, got["huge"]
            assert set(got["garbage"]) <= {400, 503}, got["garbage"]
            assert set(got["half"]) <= {200, 503}, got["half"]
    finally:
        sampler.stop.set()
        sampler.join()
    row.crashes = 0 if agent.alive() else 1
    row.max_rss_mb = round(sampler.max_rss / 2**20, 1)
    assert agent.alive(), agent.log()[-3000:]
    assert not sampler.failures, sampler.failures[:5]
    assert len(sampler.answers) > 10, "the well-behaved client was hardly answered"
    slowest = max(t for _, t in sampler.answers)
    assert slowest < PROBE_BOUND, sorted(sampler.answers, key=lambda a: a[1])[-5:]
    statuses = [s for s, _ in sampler.answers]
    assert set(statuses) == {200}, statuses  # root is never shut out by another uid
    assert eventually(lambda: agent.fds() <= row.fds_before, timeout=15), (
        agent.fds(),
        row.fds_before,
    )
    row.fds_after = agent.fds()
    assert agent.rss() - rss_before < RSS_GROWTH, (agent.rss(), rss_before)
    assert agent.get("/v1/status")[0] == 200
    unintended = snapshot(agent.ns) != links_before
    row.unintended = int(unintended)
    assert not unintended
    assert "Traceback" not in agent.log()


# ---------------------------------------------------------------------------- other uids

ASK = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"errno": e.errno})); sys.exit()
head = f"{sys.argv[2]} {sys.argv[3]} HTTP/1.1\\r\\nHost: k\\r\\nConnection: close\\r\\n\\r\\n"
s.sendall(head.encode())
data = b""
while chunk := s.recv(65536):
    data += chunk
head, _, body = data.partition(b"\\r\\n\\r\\n")
print(json.dumps({"status": int(head.split()[1]), "body": json.loads(body)}))
"""


def as_nobody(*groups):
    """A command prefix: run as uid nobody, in ``groups`` only."""
    who = ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    return ["setpriv", "--reuid=65534", "--regid=65534", *who]


def as_user(sock, method, target, *groups):
    """Ask the agent as uid nobody, in ``groups`` only: the parsed outcome."""
    done = subprocess.run(
        [*as_nobody(*groups), PYTHON, "-c", ASK, str(sock), method, target],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.fixture
def other_uids(live_agent):
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run clients as nobody")
    os.chown(live_agent.sock, -1, MEMBER_GID)
    return live_agent


def test_a_uid_outside_the_group_cannot_connect_or_is_refused(other_uids, report):
    agent = other_uids
    row = report("api-access")
    row.fds_before = agent.settled_fds()
    assert as_user(agent.sock, "GET", "/v1/status") == {"errno": 13}  # EACCES: mode 0660
    agent.sock.chmod(0o666)  # a mode that lets everyone in: the server's own check refuses
    denied = as_user(agent.sock, "GET", "/v1/status")
    assert (denied["status"], denied["body"]["code"]) == (403, 403)
    assert "uid 65534" in denied["body"]["message"]
    assert "denied GET /v1/status to uid 65534" in agent.log()
    row.inputs, row.fds_after = 2, agent.fds()
    assert agent.alive()


def _quiet_pass_count(agent, quiet=1.5, timeout=20.0):
    """The agent's pass counter once it has not moved for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    count, since = agent.get("/v1/status")[1]["reconcile"], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = agent.get("/v1/status")[1]["reconcile"]
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return count
    pytest.fail(f"the agent kept running passes for {timeout} s (at {count})")


def test_a_member_may_read_but_not_reconcile(other_uids, report):
    agent = other_uids
    row = report("api-access-member")
    row.fds_before = agent.settled_fds()
    before = _quiet_pass_count(agent)  # netlink events (e.g. IPv6 DAD) may still bring passes
    read = as_user(agent.sock, "GET", "/v1/status", MEMBER_GID)
    assert read["status"] == 200
    assert read["body"]["kind"] == "AgentStatus"
    refused = as_user(agent.sock, "POST", "/v1/reconcile", MEMBER_GID)
    assert (refused["status"], refused["body"]["kind"]) == (403, "Error")
    assert agent.get("/v1/status")[1]["reconcile"] == before  # it never reached the loop
    assert "denied POST /v1/reconcile to uid 65534" in agent.log()
    row.inputs, row.fds_after = 2, agent.fds()
    row.unintended = int(agent.get("/v1/status")[1]["reconcile"] != before)
    assert agent.alive()
