"""Robustness fixtures: a live agent in a namespace, its process metrics, the suite report.

Short versions of every suite run in the default test run; ``--robustness-long`` (or
``KVDEV_ROBUST_LONG=1``) runs the long ones. Each suite records one row (inputs tried,
crashes, unintended changes, max RSS, fds before/after, duration) in the JSON-lines file
named by ``KVDEV_ROBUST_REPORT``, which ``make robustness`` prints as a table.
"""

import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import pytest
from rawhttp import request

from agentlab import eventually, make_guest, serving

CONVERGED = {"Configured": 3, "Missing": 1}  # the example in a namespace: no GPU there


@pytest.fixture
def long_run(request):
    """True when the long versions were asked for."""
    return bool(request.config.getoption("--robustness-long")) or os.environ.get(
        "KVDEV_ROBUST_LONG", ""
    ) not in {"", "0"}


@dataclass
class Row:
    """One suite's line in the report."""

    suite: str
    inputs: int = 0
    crashes: int = 0
    unintended: int = 0
    max_rss_mb: float = 0.0
    fds_before: int = 0
    fds_after: int = 0
    seconds: float = 0.0
    started: float = field(default_factory=time.monotonic, repr=False)


@pytest.fixture
def report():
    """``report(suite)`` gives a Row; rows are written when the test ends (pass or fail)."""
    rows: list[Row] = []

    def start(suite):
        rows.append(Row(suite))
        return rows[-1]

    yield start
    target = os.environ.get("KVDEV_ROBUST_REPORT")
    if target:
        with Path(target).open("a", encoding="utf-8") as out:
            for row in rows:
                row.seconds = round(time.monotonic() - row.started, 1)
                body = asdict(row)
                body.pop("started")
                out.write(json.dumps(body) + "\n")


class LiveAgent:
    """A serving kvdev-agent: its namespace, tree, socket and process (psutil)."""

    def __init__(self, ns, tree, work, sock, proc):
        self.ns, self.tree, self.work, self.sock, self.popen = ns, tree, work, sock, proc
        self.process = psutil.Process(proc.pid)  # `ip netns exec` execs the agent

    def alive(self):
        return self.popen.poll() is None

    def rss(self):
        return self.process.memory_info().rss

    def fds(self):
        return self.process.num_fds()

    def settled_fds(self, reads=3, pause=0.3):
        """The agent's open fds once ``reads`` reads in a row agree (a connection the API is
        still closing, or a watch being re-armed, is not counted as the baseline)."""
        seen = [self.fds()]
        for _ in range(50):
            time.sleep(pause)
            seen.append(self.fds())
            if len(set(seen[-reads:])) == 1 and len(seen) >= reads:
                return seen[-1]
        return min(seen)

    def get(self, path, timeout=5.0):
        return request(self.sock, "GET", path, timeout=timeout)

    def post(self, path, timeout=35.0):
        return request(self.sock, "POST", path, timeout=timeout)

    def dump(self):
        """Abort the agent (SIGABRT): its log then ends with every thread's stack."""
        self.popen.send_signal(signal.SIGUSR1)  # dumps without dying if faulthandler has it
        time.sleep(1)
        self.popen.send_signal(signal.SIGABRT)
        self.popen.wait(timeout=10)
        return self.log()[-6000:]

    def log(self):
        return (self.work / "agent.log").read_text(errors="replace")


@pytest.fixture
def live_agent(netns, tmp_path, monkeypatch):
    """The agent serving the example in ``netns``; its socket in a directory all may enter.

    ``PYTHONFAULTHANDLER``: a stuck agent can be made to log every thread's stack (``dump``).
    """
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")
    sockdir = Path(tempfile.mkdtemp(prefix="kvdev-robust-"))
    sockdir.chmod(0o755)  # other uids must reach the socket for the access tests
    sock = sockdir / "agent.sock"
    tree = make_guest(netns, tmp_path)
    try:
        with serving(netns, tree, tmp_path, sock=sock) as (proc, _):
            agent = LiveAgent(netns, tree, tmp_path, sock, proc)
            settled = eventually(lambda: agent.get("/v1/status")[1]["counts"] == CONVERGED)
            assert settled, agent.get("/v1/status")[1]
            yield agent
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
