"""Crash and restart: SIGKILL the agent at random points of its reconciles, then restart it.

Six NICs in a namespace each get a name, an altname, an MTU, IPv4 and IPv6 addresses and up to
five routes (``crashlab``). Every run draws a new desired state, mostly a random permutation of
the names already in use (renames that chain and swap through temporary names, links taken
down, IPv6 addresses and routes re-added), and kills the agent (SIGKILL) either

* ``live``: a random delay after the new metadata lands, the delay sampled across the apply
  window measured at the start (from the write to the exact desired state),
* ``event``: right after the k-th kernel change (``ip monitor``) the new metadata causes, k
  drawn from the number of changes one apply made at the start,
* ``trade``: names permuted, killed as soon as ``ip monitor`` shows a temporary name, or
* ``startup``: started on metadata changed while it was dead, right after the k-th kernel
  change of its first pass, which is also the pass recovering from the previous kill.

The next run starts the agent again and first asserts that the links converge to exactly the
desired state (``Lab.differences``: names, altnames, MTU, addresses and routes without
duplicates, up, no temporary names, exactly the wanted link wishes and no stray files,
every device ``Configured`` in ``status.json``), and that the unmanaged peers never changed.
The row counts kills (inputs), agent deaths we did not cause (crashes) and runs that did not
converge exactly (unintended). 20 kills by default, 60 with ``--robustness-long``;
``KVDEV_CRASH_SEED`` replays a run (``-s`` prints the seed).
"""

import contextlib
import json
import os
import random
import statistics
import subprocess
import threading
import time

import psutil
import pytest
from crashlab import COUNT, Lab, mac, peers

from agentlab import agent_args, eventually, ip_json, serving, snapshot
from kvdev.guest.core.planning import TEMP_PREFIX

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

SHORT, LONG = 20, 60
CONVERGE_WITHIN = 15.0  # seconds a restarted agent gets to reach exactly the desired state
SEED = int(os.environ.get("KVDEV_CRASH_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)


class Monitor:
    """``ip monitor link address route`` in the namespace: when the kernel's changes happened."""

    def __init__(self, ns):
        self.stamps: list[float] = []
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.proc = subprocess.Popen(
            ["stdbuf", "-oL", "ip", "-n", ns, "monitor", "link", "address", "route"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line)
                self.stamps.append(time.monotonic())
                self.changed.notify_all()

    def after(self, seen, count=1, timeout=5.0):
        """Wait until ``count`` changes came after the first ``seen``; True if they did."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.stamps) >= seen + count, timeout)

    def saw(self, seen, text, timeout=5.0):
        """Wait until a change after the first ``seen`` mentions ``text``; True if one did."""
        with self.changed:
            return self.changed.wait_for(
                lambda: any(text in line for line in self.lines[seen:]), timeout
            )

    def burst(self, seen):
        """The changes after ``seen`` up to a 0.2 s lull: (how many, first, last).

        (IPv6 duplicate address detection ends a second later: not the agent's work.)
        """
        stamps = self.stamps[seen:]
        gaps = [i for i in range(1, len(stamps)) if stamps[i] - stamps[i - 1] > 0.2]
        end = gaps[0] if gaps else len(stamps)
        return end, stamps[0], stamps[end - 1]

    def close(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.reader.join(timeout=5)
        self.proc.stdout.close()


class Crashes:
    """The lab, the running counters and what each kill found."""

    def __init__(self, lab, row, monitor):
        self.lab, self.row, self.monitor = lab, row, monitor
        self.rng = random.Random(SEED + 1)  # noqa: S311 - reproducible kill points
        self.failures: list[str] = []
        self.peers = peers(lab.ns)
        self.hits: dict[str, list[int]] = {"live": [], "event": [], "trade": [], "startup": []}
        self.window, self.changes = 0.0, 0

    def start(self):
        (self.lab.work / "notify.sock").unlink(missing_ok=True)
        return serving(self.lab.ns, self.lab.tree, self.lab.work)

    def converged(self, run):
        """Check, without raising, that the guest reached exactly the desired state."""
        if not eventually(lambda: not self.lab.differences(), timeout=CONVERGE_WITHIN):
            self.row.unintended += 1
            self.failures.append(f"run {run}: {self.lab.differences()}")
        if peers(self.lab.ns) != self.peers:
            self.row.unintended += 1
            self.failures.append(f"run {run}: unmanaged peers changed: {peers(self.lab.ns)}")

    def measure(self):
        """Three undisturbed applies: the median time from the write to the last change, and
        the median number of changes."""
        windows, counts = [], []
        with self.start() as (proc, _):
            self.converged("first")
            for _ in range(3):
                began, seen = time.monotonic(), len(self.monitor.stamps)
                self.lab.draw()
                assert self.monitor.after(seen)
                eventually(lambda: not self.lab.differences(), timeout=CONVERGE_WITHIN)
                time.sleep(0.3)
                count, _, last = self.monitor.burst(seen)
                windows.append(last - began)
                counts.append(count)
            assert proc.poll() is None
        self.window, self.changes = statistics.median(windows), int(statistics.median(counts))

    def kill_live(self, run):
        """Serving: new metadata, SIGKILL a random delay later (across the whole window)."""
        with self.start() as (proc, _):
            self.converged(run)
            before = snapshot(self.lab.ns)
            self.lab.draw()
            time.sleep(self.rng.uniform(0, self.window * 1.1))
            self.kill("live", proc, before)

    def kill_in_burst(self, run):
        """Serving: new metadata, SIGKILL right after a random one of the kernel changes."""
        with self.start() as (proc, _):
            self.converged(run)
            before, seen = snapshot(self.lab.ns), len(self.monitor.stamps)
            self.lab.draw()
            self.monitor.after(seen, self.rng.randint(1, self.changes))
            self.kill("event", proc, before)

    def kill_in_trade(self, run):
        """Serving: names permuted, SIGKILL as soon as a link shows a temporary name."""
        with self.start() as (proc, _):
            self.converged(run)
            before, seen = snapshot(self.lab.ns), len(self.monitor.stamps)
            self.lab.draw(trade=True)
            self.monitor.saw(seen, TEMP_PREFIX)
            self.kill("trade", proc, before)

    def kill_at_startup(self):
        """New metadata while dead; start; SIGKILL inside the first (the recovering) pass."""
        before, seen = snapshot(self.lab.ns), len(self.monitor.stamps)
        self.lab.draw()
        (self.lab.work / "notify.sock").unlink(missing_ok=True)
        with (self.lab.work / "agent.log").open("ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.lab.ns, *agent_args(self.lab.tree, self.lab.work)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.monitor.after(seen, self.rng.randint(1, max(1, self.changes // 2)), timeout=3.0)
        self.kill("startup", proc, before)

    def kill(self, mode, proc, before):
        """SIGKILL; note how far from the new state the kill left a guest that had moved."""
        with contextlib.suppress(psutil.Error):
            rss = psutil.Process(proc.pid).memory_info().rss / 2**20
            self.row.max_rss_mb = max(self.row.max_rss_mb, round(rss, 1))
        if proc.poll() is not None:
            self.row.crashes += 1
            self.failures.append(f"the agent died by itself: exit {proc.returncode}")
        proc.kill()
        proc.wait(timeout=10)
        self.row.inputs += 1
        left = len(self.lab.differences())
        self.hits[mode].append(left if left and snapshot(self.lab.ns) != before else 0)

    def mid_apply(self, mode=None):
        """Kills that left the guest neither as it was nor as wanted (in ``mode``, or all)."""
        return sum(bool(n) for m, found in self.hits.items() if mode in {None, m} for n in found)


def test_sigkill_at_random_points_then_restart_converges_exactly(netns, tmp_path, report, long_run):
    row = report("crash-restart (SIGKILL mid-apply)")
    lab = Lab(netns, tmp_path, SEED)
    lab.draw()
    monitor = Monitor(netns)
    try:
        crashes = Crashes(lab, row, monitor)
        crashes.measure()
        for run in range(LONG if long_run else SHORT):
            match run % 4:
                case 0:
                    crashes.kill_live(run)
                case 1:
                    crashes.kill_in_burst(run)
                case 2:
                    crashes.kill_in_trade(run)
                case _:
                    crashes.kill_at_startup()
        with crashes.start() as (proc, _):
            crashes.converged("last")
            assert proc.poll() is None
    finally:
        monitor.close()
    hits = {mode: f"{crashes.mid_apply(mode)}/{len(found)}" for mode, found in crashes.hits.items()}
    print(
        f"\ncrash-restart: seed {SEED}, {row.inputs} kills; one apply: {crashes.window:.2f} s "
        f"from the write to the last of {crashes.changes} kernel changes; mid-apply kills {hits}"
    )
    assert not crashes.failures, "\n".join(crashes.failures)
    assert crashes.mid_apply() >= row.inputs // 3, f"the kills missed the applies: {hits}"


def run_once(lab, *extra):
    cmd = ["ip", "netns", "exec", lab.ns, *agent_args(lab.tree, lab.work, "--once", *extra)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_a_restarted_agent_removes_what_its_interrupted_writes_left(netns, tmp_path):
    """Regression: a kill inside ``write_atomic`` left ``.status.json.<random>.tmp`` for good."""
    lab = Lab(netns, tmp_path, 7)
    lab.draw()
    lab.state_dir.mkdir()
    lab.link_dir.mkdir()
    ours = [
        lab.state_dir / ".status.json.k1ll3d_x.tmp",
        lab.state_dir / ".renames.json._pd_zeo2.tmp",  # was: the journal's was left (CI run)
        lab.link_dir / ".d0.wish.a1.tmp",
    ]
    theirs = [
        lab.state_dir / ".other.json.a1b2c3d4.tmp",
        lab.link_dir / ".99-site.link.a1b2c3d4.tmp",
        lab.link_dir / "99-site.link",
    ]
    for path in ours + theirs:
        path.write_text("half a file")
    dry = run_once(lab, "--dry-run")
    assert all(p.exists() for p in ours), dry.stdout + dry.stderr  # a dry run changes nothing
    done = run_once(lab)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in ours if p.exists()] == []
    assert all(p.exists() for p in theirs)
    for path in theirs:
        path.unlink()
    assert lab.differences() == []


def test_a_trade_cut_short_leaves_no_temporary_name_when_names_are_dropped(netns, tmp_path):
    """Regression: cut short mid-swap, then the hints stop naming links: ``kvtmp<n>`` stayed.

    A SIGKILL found it first. Since the agent's own codec sends all of a pass's renames in one
    sendmsg, which the kernel applies before the call returns, a kill no longer lands inside a
    trade (20 tries never did); a rename the kernel refuses half-way still leaves one. So the
    test makes that state itself, as a swap of two links cut before its last rename leaves it:
    both links were moved to their temporary names (recorded in the rename journal first, as
    the agent records them), the first then took the second's old name, the second did not.
    """
    lab = Lab(netns, tmp_path, 11)
    lab.draw(trade=True)
    first = run_once(lab)
    assert first.returncode == 0, first.stdout + first.stderr
    assert lab.differences() == []
    names = {e["address"]: e["ifname"] for e in ip_json(netns, "link")}
    index = {e["address"]: e["ifindex"] for e in ip_json(netns, "link")}
    a, b = mac(0), mac(1)
    journal = lab.state_dir / "renames.json"
    journal.write_text(json.dumps({str(index[a]): names[a], str(index[b]): names[b]}))
    for argv in (
        ["set", "dev", names[a], "down"],
        ["set", "dev", names[b], "down"],
        ["set", "dev", names[a], "name", f"{TEMP_PREFIX}{index[a]}"],
        ["set", "dev", names[b], "name", f"{TEMP_PREFIX}{index[b]}"],
        ["set", "dev", f"{TEMP_PREFIX}{index[a]}", "name", names[b]],
    ):
        subprocess.run(["ip", "-n", netns, "link", *argv], check=True)
    lab.draw(named=False)
    done = run_once(lab)
    assert done.returncode == 0, done.stdout + done.stderr
    after = {e["address"]: e["ifname"] for e in ip_json(netns, "link")}
    assert not [n for n in after.values() if n.startswith(TEMP_PREFIX)], after
    assert len(set(after.values())) == len(after)
    assert after[b] == names[a], after  # its own old name is taken: the one the trade freed
    assert after[a] == names[b]  # the hints name no link now: the rest stay where they are
    assert {after[mac(i)] for i in range(2, COUNT)} == {names[mac(i)] for i in range(2, COUNT)}
    assert not journal.exists()
