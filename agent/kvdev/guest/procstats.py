"""psutil facts for the API: per-interface counters and link speed, the agent's own usage.

An adapter: every call reads /proc and /sys now. Interfaces are those of the agent's network
namespace. Nothing here raises for a vanished interface or process: missing facts are left out.
"""

from __future__ import annotations

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


def agent(started_at: float) -> dict[str, Any]:
    """The agent process: pid, resident memory, CPU seconds, threads, uptime."""
    proc = psutil.Process(os.getpid())
    with proc.oneshot():
        cpu = proc.cpu_times()
        return {
            "pid": proc.pid,
            "rssBytes": proc.memory_info().rss,
            "cpuSeconds": round(cpu.user + cpu.system, 3),
            "threads": proc.num_threads(),
            "uptimeSeconds": round(max(0.0, time.time() - started_at), 3),
        }
