"""psutil facts for the API: per-interface counters and link speed, the agent's own usage.

An adapter: every call reads /proc and /sys now. Interfaces are those of the agent's network
namespace. Nothing here raises for a vanished interface or process: missing facts are left out.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import psutil


def interfaces() -> dict[str, dict[str, Any]]:
    """Per interface name: byte/packet/error/drop counters and the link speed (Mb/s)."""
    counters = psutil.net_io_counters(pernic=True, nowrap=True)
    stats = psutil.net_if_stats()
    out: dict[str, dict[str, Any]] = {}
    for name, c in counters.items():
        entry: dict[str, Any] = {
            "rxBytes": c.bytes_recv,
            "txBytes": c.bytes_sent,
            "rxPackets": c.packets_recv,
            "txPackets": c.packets_sent,
            "rxErrors": c.errin,
            "txErrors": c.errout,
            "rxDropped": c.dropin,
            "txDropped": c.dropout,
        }
        st = stats.get(name)
        if st is not None:
            entry["speedMbps"] = st.speed or None  # 0 means unknown (virtual links)
            entry["duplex"] = {2: "full", 1: "half"}.get(int(st.duplex))
        out[name] = entry
    return out


AGENT_STATS_TTL = 1.0  # seconds: /v1/status may be asked thousands of times a second
_agent_cache: tuple[float, dict[str, Any]] | None = None


def agent(started_at: float) -> dict[str, Any]:
    """The agent process: pid, resident memory, CPU seconds, threads (at most 1 s old), uptime."""
    global _agent_cache  # noqa: PLW0603 - a one-value cache of this process's own figures
    now = time.monotonic()
    if _agent_cache is None or now - _agent_cache[0] > AGENT_STATS_TTL:
        proc = _process()
        with proc.oneshot():
            cpu = proc.cpu_times()
            figures = {
                "pid": proc.pid,
                "rssBytes": proc.memory_info().rss,
                "cpuSeconds": round(cpu.user + cpu.system, 3),
                "threads": proc.num_threads(),
            }
        _agent_cache = (now, figures)
    return {**_agent_cache[1], "uptimeSeconds": round(max(0.0, time.time() - started_at), 3)}


@functools.cache
def _process() -> psutil.Process:
    return psutil.Process(os.getpid())
