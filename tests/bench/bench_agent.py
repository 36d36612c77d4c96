"""kvdev-agent benchmarks on real links: rewrite latency, start-up, RSS, idle wake-ups.

Run as root: ``.venv/bin/python tests/bench/bench_agent.py [--quick] [--json PATH]`` (or
``make bench``). Each measurement runs in its own throwaway network namespace
(``kvdev-b-<8 hex>``, always deleted) holding 8 veth links with the MACs the generated metadata
describes. Address changes are timed in this process, as they arrive, on an rtnetlink socket
opened inside the namespace (RTM_NEWADDR/RTM_DELADDR): nothing polls ``ip``. The agent and the
Python floors run with bytecode caches (in a private PYTHONPYCACHEPREFIX, warmed first), as an
installed agent would. Numbers only: nothing about timing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen
from typing import Any

import benchlib  # sibling module: run as python tests/bench/<name>.py
import psutil
from benchlib import run, stats

AGENT = str(Path(sys.executable).parent / "kvdev-agent")
NICS, WARMUP, GAP = 8, 3, 0.2  # links; unmeasured rounds first; pause after each round (s)
CLAIM, REQUEST, DRIVER = "bench-vm", "nics", "bench.example.com"
METADATA = f"resourceclaims/{CLAIM}/{REQUEST}/{DRIVER}-metadata.json"
CLONE_NEWNET, NETLINK_ROUTE, RTMGRP_IPV4_IFADDR = 0x40000000, 0, 0x10
RTM_NEWADDR, RTM_DELADDR, IFA_ADDRESS, IFA_LOCAL = 20, 21, 1, 2
LIBC = ctypes.CDLL(None, use_errno=True)
AGENT_MODULES = (  # what kvdev-agent's main imports (the collector off, as it does)
    "kvdev.guest.__main__, kvdev.guest.loop, kvdev.guest.adapters.files, "
    "kvdev.guest.adapters.udev, kvdev.guest.adapters.netlink, kvdev.guest.api.routes, "
    "kvdev.guest.api.server"
)
IMPORT = f"import gc; gc.disable(); import os, {AGENT_MODULES}"  # no interpreter teardown
Change = Callable[[int], tuple[float, Callable[[], object]]]  # round -> (t0, wait for its end)


def mac(i: int) -> str:
    return f"02:00:00:be:00:{i:02x}"


def addrs(k: int) -> list[str]:
    """Round k's address of each NIC: a new /24 each round (no primary/secondary coupling)."""
    return [f"10.{i + 1}.{k}.1/24" for i in range(NICS)]


@contextlib.contextmanager
def namespace() -> Iterator[str]:
    """A fresh namespace with the NICs the metadata describes (down), veth peers up."""
    with benchlib.namespace("kvdev-b", [(f"b{i}", mac(i), f"p{i}") for i in range(NICS)]) as ns:
        yield ns


def write_metadata(tree: Path, k: int) -> float:
    """One claim, 8 devices, round k's addresses; written atomically. The time of the rename."""
    nets = [{"ips": [ip], "hardwareAddress": mac(i)} for i, ip in enumerate(addrs(k))]
    devices = [
        {"driver": DRIVER, "pool": "bench", "name": f"nic-{i}", "networkData": net}
        for i, net in enumerate(nets)
    ]
    doc = {"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "DeviceMetadata"}
    doc["metadata"] = {"name": CLAIM, "namespace": "vms", "generation": k + 1}
    doc["requests"] = [{"name": REQUEST, "devices": devices}]
    path = tree / METADATA
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")  # same directory, as an atomic writer does it
    tmp.write_text(json.dumps(doc) + "\n")
    t0 = time.perf_counter()
    tmp.replace(path)
    return t0


def setns(fd: int) -> None:
    if LIBC.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


class AddrEvents:
    """An rtnetlink socket created inside the namespace, subscribed to IPv4 address events."""

    def __init__(self, ns: str) -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            with Path(f"/var/run/netns/{ns}").open() as target:
                setns(target.fileno())
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        finally:  # the socket stays in the namespace it was created in
            setns(own)
            os.close(own)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, RTMGRP_IPV4_IFADDR))
        self.present: set[str] = set()

    def drain(self) -> None:
        while select.select([self.sock], [], [], 0)[0]:
            self._read()

    def _read(self) -> None:
        for kind, address in _parse(self.sock.recv(1 << 16)):
            (self.present.add if kind == RTM_NEWADDR else self.present.discard)(address)

    def wait(self, t0: float, new: set[str]) -> float:
        """Seconds from t0 until every address of ``new`` is present."""
        now = t0
        while not new <= self.present:
            if not select.select([self.sock], [], [], t0 + 10 - time.perf_counter())[0]:
                raise TimeoutError(f"still missing {sorted(new - self.present)}")
            self._read()
            now = time.perf_counter()
        return now - t0


def _parse(data: bytes) -> Iterator[tuple[int, str]]:
    """(RTM_NEWADDR or RTM_DELADDR, "a.b.c.d/len") for each IPv4 address message."""
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if kind in (RTM_NEWADDR, RTM_DELADDR) and length >= 24:
            family, prefixlen = struct.unpack_from("=BB", data, off + 16)
            attrs, pos = {}, off + 24
            while pos + 4 <= off + length:
                alen, atype = struct.unpack_from("=HH", data, pos)
                attrs[atype] = data[pos + 4 : pos + alen]
                pos += max(4, (alen + 3) & ~3)
            ip = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
            if family == socket.AF_INET and ip:
                yield kind, f"{socket.inet_ntop(family, ip)}/{prefixlen}"
        off += max(16, (length + 3) & ~3)


@contextlib.contextmanager
def agent(
    ns: str, tree: Path, work: Path, *, activated: bool = False
) -> Iterator[tuple[Popen[bytes], float]]:
    """kvdev-agent serving inside ``ns``; yields the process and seconds from spawn to READY=1.

    ``activated``: its API socket is passed as systemd's socket activation passes it (fd 3,
    LISTEN_FDS, LISTEN_PID), as kvdev-agent.socket does, through a ``bash`` that execs the agent.
    """
    path = work / f"notify-{uuid.uuid4().hex[:8]}.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(path))
    notify.settimeout(0.5)
    args = ["--metadata-root", str(tree), "--config", "/dev/null", "--match-kind", "veth"]
    args += ["--link-dir", str(work / "net"), "--state-dir", str(work / "state")]
    if level := os.environ.get("KVDEV_BENCH_LOG_LEVEL"):  # bench_e2e reads the pass timelines
        args += ["--log-level", level]
    env = {**os.environ, "NOTIFY_SOCKET": str(path)}
    for name in ("INVOCATION_ID", "JOURNAL_STREAM"):  # log to agent.log, not to the journal
        env.pop(name, None)
    argv, listener = [AGENT, *args], None
    if activated:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path.with_suffix(".api")))
        listener.listen(16)
        fd = listener.fileno()
        wrap = f'export LISTEN_FDS=1 LISTEN_PID=$$; exec "$0" "$@" 3<&{fd} {fd}<&-'
        argv = ["bash", "-c", wrap, *argv]  # bash: dash takes no fd above 9
    with (work / "agent.log").open("ab") as log:
        t0 = time.perf_counter()
        proc = Popen(
            ["ip", "netns", "exec", ns, *argv],
            env=env,
            stdout=log,
            stderr=log,
            pass_fds=(listener.fileno(),) if listener else (),
        )
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                if b"READY=1" in notify.recv(4096):
                    break
            if proc.poll() is not None or time.perf_counter() - t0 > 60:
                tail = (work / "agent.log").read_text()[-2000:]
                raise RuntimeError(f"agent not ready (exit {proc.returncode}):\n{tail}")
        yield proc, time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        notify.close()
        path.unlink()
        if listener is not None:
            listener.close()
            path.with_suffix(".api").unlink()


@contextlib.contextmanager
def served(work: Path, name: str) -> Iterator[tuple[str, Path, AddrEvents, Popen[bytes], float]]:
    """A fresh namespace, a tree for round 0, the agent serving; yields once it converged."""
    tree = work / f"tree-{name}"
    write_metadata(tree, 0)
    with namespace() as ns:
        events = AddrEvents(ns)
        with agent(ns, tree, work) as (proc, ready):
            events.wait(time.perf_counter(), set(addrs(0)))
            yield ns, tree, events, proc, ready


def rounds(events: AddrEvents, change: Change, count: int) -> dict[str, Any]:
    """Round k moves every NIC from addrs(k-1) to addrs(k); time until all 8 new are there."""
    times, stale = [], 0
    for k in range(1, count + WARMUP + 1):
        events.drain()
        t0, finish = change(k)
        seconds = events.wait(t0, set(addrs(k)))
        finish()
        time.sleep(GAP)
        events.drain()
        stale += bool(events.present & set(addrs(k - 1)))  # an old address was left behind
        if k > WARMUP:
            times.append(seconds)
    return {**stats(times), "rounds_with_old_address_left": stale}


def ip_change(ns: str, work: Path, batch: bool) -> Change:
    """The agent's steps, in its order (per NIC: delete the old address, add the new one)."""

    def change(k: int) -> tuple[float, Callable[[], object]]:
        pairs = enumerate(zip(addrs(k - 1), addrs(k), strict=True))
        lines = "".join(f"addr del {o} dev b{i}\naddr add {n} dev b{i}\n" for i, (o, n) in pairs)
        (work / "batch").write_text(lines)
        each = [x.split() for x in lines.splitlines()]
        argvs = [["-batch", str(work / "batch")]] if batch else each

        def target() -> None:
            for argv in argvs:
                run("ip", "-n", ns, *argv)

        t0 = time.perf_counter()  # ip runs on a thread, so events are timed as they come
        thread = threading.Thread(target=target)
        thread.start()
        return t0, thread.join

    return change


def bench_rewrite(count: int, work: Path) -> dict[str, Any]:
    out = {}
    with served(work, "rewrite") as (ns, tree, events, proc, _):
        out["agent"] = rounds(events, lambda k: (write_metadata(tree, k), lambda: None), count)
        run("ip", "-n", ns, "link", "add", "f0", "type", "veth", "peer", "name", "fp0")

        def foreign_first(k: int) -> tuple[float, Callable[[], object]]:
            run("ip", "-n", ns, "link", "set", "f0", "up" if k % 2 else "down")
            return write_metadata(tree, k), lambda: None

        out["agent_after_foreign"] = rounds(events, foreign_first, count)
        assert proc.poll() is None, "the agent died"
    for label, batch in (("ip_batch", True), ("ip_x16", False)):
        with namespace() as ns:
            events = AddrEvents(ns)
            up = [f"link set b{i} up\naddr add {a} dev b{i}\n" for i, a in enumerate(addrs(0))]
            run("ip", "-n", ns, "-batch", "-", stdin="".join(up))
            out[label] = rounds(events, ip_change(ns, work, batch), count)
    return out


def changes(k: int) -> Iterator[tuple[int, bool, str]]:
    """Round k's 16 changes: per NIC, (nic, add?, address): round k-1's removed, k's added."""
    for i, (old, new) in enumerate(zip(addrs(k - 1), addrs(k), strict=True)):
        yield i, False, old
        yield i, True, new


def bench_netlink_floor(count: int) -> dict[str, Any]:
    """The agent's 16 address requests in-process: built, and built + sent + acknowledged.

    ``apply``: ``Netlink.apply`` of the 16 steps (8 removals, 8 additions): our codec builds them
    and sends them in one batch, acknowledgements read together; ``build``: our codec building
    the 16 messages alone; ``pyroute2_build``: pyroute2's ``IPBatch`` building the same 16 (a dev
    dependency, kept as the reference the agent left: nothing is sent).
    """
    import ipaddress  # noqa: PLC0415 - only this measurement needs them

    from pyroute2 import IPBatch  # noqa: PLC0415

    from kvdev.guest.adapters.netlink import Netlink, _codec  # noqa: PLC0415
    from kvdev.guest.core import steps  # noqa: PLC0415

    with namespace() as ns, Netlink(netns=ns) as net:
        state = net.read_state()
        index = {link.ifname: link.ifindex for link in state.links}

        def kw(i: int) -> dict[str, Any]:
            return {"ifindex": index[f"b{i}"], "ifname": f"b{i}", "device": f"nic{i}", "reason": ""}

        first: list[steps.Step] = [steps.SetUp(**kw(i)) for i in range(NICS)]
        first += [steps.AddAddress(**kw(i), address=a) for i, a in enumerate(addrs(0))]
        net.apply(first)

        def todo(k: int) -> list[steps.Step]:
            kinds = {False: steps.RemoveAddress, True: steps.AddAddress}
            return [kinds[add](**kw(i), address=a) for i, add, a in changes(k)]

        def ours(k: int) -> None:
            for i, add, a in changes(k):
                ip = ipaddress.ip_interface(a)
                _codec.address_request(k, index[f"b{i}"], ip, add=add, protocol=None)

        def theirs(target: Any, k: int) -> None:
            for i, add, a in changes(k):
                ip, length = a.split("/")
                command = "add" if add else "del"
                target.addr(command, index=index[f"b{i}"], address=ip, prefixlen=int(length))

        batch = IPBatch()
        applied, built, reference = [], [], []
        for k in range(1, count + 1):
            t0 = time.perf_counter()
            results = net.apply(todo(k))
            t1 = time.perf_counter()
            ours(k)
            t2 = time.perf_counter()
            theirs(batch, k)
            batch.reset()
            t3 = time.perf_counter()
            assert all(r.ok for r in results), [r for r in results if not r.ok]
            applied.append(t1 - t0)
            built.append(t2 - t1)
            reference.append(t3 - t2)
        batch.close()
        return {"apply": stats(applied), "build": stats(built), "pyroute2_build": stats(reference)}


def spawn_times(cmd: list[str], count: int) -> dict[str, float]:
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        times.append(time.perf_counter() - t0)
    return stats(times)


def bench_start(count: int, work: Path) -> dict[str, Any]:
    with served(work, "start") as (ns, tree, _, proc, unconfigured):
        proc.terminate()  # then start it again and again, the links configured
        proc.wait()
        configured = []
        for _ in range(count):
            with agent(ns, tree, work) as (_, ready):
                configured.append(ready)
        py = [sys.executable, "-c"]
        return {
            "ready_unconfigured_ms": unconfigured * 1000,
            "ready_configured": stats(configured),
            "python_pass": spawn_times([*py, "pass"], count),
            "netns_exec_python_pass": spawn_times(["ip", "netns", "exec", ns, *py, "pass"], count),
            "import_agent": spawn_times([*py, f"{IMPORT}; os._exit(0)"], count),
        }


# What the agent imports, in the order it needs them: each step adds its modules to the last.
FLOOR_STEPS = (
    ("interpreter", "pass"),
    ("stdlib the agent uses", "import argparse, json, logging, dataclasses, pathlib, selectors"),
    ("asyncio (loads ssl)", "import asyncio"),
    ("pydantic", "import pydantic"),
    ("kvdev.schema models", "import kvdev.schema.documents, kvdev.schema.configdrive"),
    ("pyudev", "import pyudev"),
    ("watchdog", "import watchdog.observers"),
    ("psutil", "import psutil"),
    ("h11", "import h11"),
    ("the agent's own modules", f"import {AGENT_MODULES}"),
)
FLOOR_PROBE = """
import sys, time
t0 = time.perf_counter()
exec({code!r})
took = time.perf_counter() - t0
fields = {{}}
for line in open("/proc/self/smaps_rollup"):
    name, _, value = line.partition(":")
    if value.strip().endswith("kB"):
        fields[name] = int(value.split()[0])
uss = fields["Private_Clean"] + fields["Private_Dirty"]
print(fields["Rss"], uss, fields["Anonymous"], len(sys.modules), took)
"""


def floor_probe(code: str, repeat: int = 5) -> dict[str, float]:
    """RSS, USS, anonymous memory (MB), modules and import time (ms, the median of ``repeat``
    fresh interpreters; bytecode cached) of an interpreter that ran ``code``."""
    outs = [run(sys.executable, "-c", FLOOR_PROBE.format(code=code)).split() for _ in range(repeat)]
    rss, uss, anon, modules = map(int, outs[-1][:4])
    took = statistics.median(float(o[4]) for o in outs) * 1000
    out = {"rss_mb": rss / 1024, "uss_mb": uss / 1024, "anon_mb": anon / 1024}
    return out | {"modules": modules, "import_ms": took}


def bench_floors() -> dict[str, Any]:
    """Each dependency's memory floor: alone (over a bare interpreter) and in the agent's order."""
    bare = floor_probe("pass")
    out: dict[str, Any] = {"alone": {}, "cumulative": {}}
    code = ""
    for label, step in FLOOR_STEPS:
        code += step + "\n"
        out["alone"][label] = floor_probe(step)
        out["cumulative"][label] = floor_probe(code)
    out["bare"] = bare
    return out


def floors_rows(f: dict[str, Any]) -> list[tuple[str, str]]:
    rows, last = [], None
    bare = f["bare"]
    for label, cum in f["cumulative"].items():
        alone = f["alone"][label]
        add = cum["rss_mb"] - (last["rss_mb"] if last else 0.0)
        alone_add = alone["rss_mb"] - bare["rss_mb"]
        ms = cum["import_ms"] - (last["import_ms"] if last else 0.0)
        mem = f"RSS {cum['rss_mb']:5.1f} MB (+{add:4.1f}; alone +{alone_add:4.1f}), "
        mem += f"USS {cum['uss_mb']:5.1f}, {cum['modules']} modules, "
        mem += f"import {cum['import_ms']:5.1f} ms (+{ms:5.1f}; alone {alone['import_ms']:5.1f})"
        rows.append((f"  floor: + {label}", mem))
        last = cum
    return rows


def switches(pid: int) -> dict[int, int]:
    """Voluntary context switches of each thread (/proc/PID/status has the leader's only)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    out[int(task.name)] = int(line.split()[1])
    return out


def bench_idle(window: float, work: Path) -> dict[str, Any]:
    with served(work, "idle") as (_, _, _, proc, _):
        p = psutil.Process(proc.pid)  # `ip netns exec` execs: this is the agent itself
        cmdline = p.cmdline()
        assert p.name() != "ip", f"pid {p.pid} is {cmdline}"
        assert AGENT in cmdline, f"pid {p.pid} is {cmdline}"
        time.sleep(5)
        mem = p.memory_full_info()
        before, main0, cpu0 = switches(p.pid), p.num_ctx_switches().voluntary, p.cpu_times()
        time.sleep(window)
        after, main1, cpu1 = switches(p.pid), p.num_ctx_switches().voluntary, p.cpu_times()
        per_thread = {str(t): n - before.get(t, 0) for t, n in sorted(after.items())}
        cpu = max(0.0, sum(cpu1[:2]) - sum(cpu0[:2])) * 1000
        wakeups = {"wakeups": sum(per_thread.values()), "wakeups_per_thread": per_thread}
        mb = {"rss_mb": mem.rss / 2**20, "uss_mb": mem.uss / 2**20, "threads": p.num_threads()}
        pid = f"{p.pid} {p.name()} {' '.join(cmdline[:2])}"
        out = {"pid_checked": pid, **mb, "window_s": window, **wakeups, "cpu_ms": cpu}
        return out | {"wakeups_main_thread_psutil": main1 - main0}


def fmt(s: dict[str, float]) -> str:
    return "  ".join(f"{k} {s[k]:7.2f}" for k in ("p50", "p90", "p99", "max")) + f" ms  n={s['n']}"


def rewrite_ratios(rw: dict[str, Any]) -> list[tuple[str, str]]:
    """The agent's rewrite against ``ip -batch``, p50 and p99 (and after a foreign change)."""
    b = rw["ip_batch"]
    return [
        (
            f"ratio {k}/ip_batch p50 | p99",
            f"{a['p50'] / b['p50']:.2f}x | {a['p99'] / b['p99']:.2f}x",
        )
        for k, a in rw.items()
        if k.startswith("agent")
    ]


def table(r: dict[str, Any]) -> str:
    rw, st, idle = r["rewrite"], r["start"], r["idle"]
    stale = ", ".join(f"{k} {v['rounds_with_old_address_left']}" for k, v in rw.items())
    rows = [("kvdev from; load average", f"{r['source']}; {r['loadavg']}")]
    rows += [(f"rewrite -> 8 new present: {k}", fmt(v)) for k, v in rw.items()]
    rows += rewrite_ratios(rw)
    rows += [
        ("  in-process: Netlink.apply of the 16 (one send)", fmt(r["netlink"]["apply"])),
        ("  in-process: our codec builds the 16", fmt(r["netlink"]["build"])),
        ("  in-process: pyroute2 builds the 16 (reference)", fmt(r["netlink"]["pyroute2_build"])),
        ("rounds leaving an old address", stale),
        ("start -> READY=1, unconfigured links", f"{st['ready_unconfigured_ms']:.1f} ms"),
        ("start -> READY=1, configured links", fmt(st["ready_configured"])),
        ("floor: python -c pass", fmt(st["python_pass"])),
        ("floor: ip netns exec .. python -c pass", fmt(st["netns_exec_python_pass"])),
        ("floor: python -c 'import agent; _exit'", fmt(st["import_agent"])),
        ("RSS (USS) after 5 s idle", f"{idle['rss_mb']:.1f} MB ({idle['uss_mb']:.1f} MB)"),
        *floors_rows(r["floors"]),
        (f"idle wake-ups in {idle['window_s']:.0f} s, all threads", str(idle["wakeups"])),
        ("idle wake-ups per thread (tid: n)", str(idle["wakeups_per_thread"])),
        ("idle wake-ups, psutil (main thread)", str(idle["wakeups_main_thread_psutil"])),
        ("idle CPU time", f"{idle['cpu_ms']:.0f} ms, {idle['threads']} threads"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="idle window 10 s instead of 60 s")
    p.add_argument("--rounds", type=int, default=100, help="rewrites per method (default 100)")
    p.add_argument("--starts", type=int, default=20, help="agent starts (default 20)")
    p.add_argument("--rewrite-only", action="store_true", help="only the rewrite latency")
    args = benchlib.agent_arguments(p, "bench_agent")
    with benchlib.agent_work(args.src) as work:
        source = run(sys.executable, "-c", "import kvdev.guest.__main__ as m; print(m.__file__)")
        results: dict[str, Any] = {"source": str(Path(source.strip()).parents[2])}
        print(f"rewrite latency: {args.rounds} rounds x 4 methods ...", flush=True)
        results["rewrite"] = bench_rewrite(args.rounds, work)
        if args.rewrite_only:
            rw = results["rewrite"]
            rows = [*((f"rewrite: {k}", fmt(v)) for k, v in rw.items()), *rewrite_ratios(rw)]
            rows.append(("load average", " ".join(f"{x:.2f}" for x in os.getloadavg())))
            text = "\n".join(f"{k:<40}  {v}" for k, v in rows)
            return benchlib.report(text, results, args.json)
        results["netlink"] = bench_netlink_floor(args.rounds)
        print(f"start-up: {args.starts} starts ...", flush=True)
        results["start"] = bench_start(args.starts, work)
        window = 10.0 if args.quick else 60.0
        print(f"RSS and idle wake-ups: {window:.0f} s window ...", flush=True)
        results["idle"] = bench_idle(window, work)
        print("memory floors: one interpreter per dependency ...", flush=True)
        results["floors"] = bench_floors()
        results["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return benchlib.report(table(results), results, args.json)


if __name__ == "__main__":
    sys.exit(main())
