"""Facts for the API: per-interface counters and link speed (sysfs), the agent's usage (psutil).

An adapter: every call reads /proc and /sys now (``interfaces``: only the named interfaces).
Interfaces are those of the agent's network namespace. Nothing here raises for a vanished
interface or process: missing facts are left out. psutil is optional: EL9's python3.11 has no
psutil package, and there the agent's usage is its pid alone; it is imported when first asked.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

# EL9 (AppStream's python3.11) has no psutil: the usage figures are left out. psutil itself is
# imported at the first ``agent`` call (its import costs more CPU and memory than the rest of
# this module, and only the API asks for these figures).
HAVE_PSUTIL = importlib.util.find_spec("psutil") is not None

_COUNTERS = (
    ("rxBytes", "rx_bytes"),
    ("txBytes", "tx_bytes"),
    ("rxPackets", "rx_packets"),
    ("txPackets", "tx_packets"),
    ("rxErrors", "rx_errors"),
    ("txErrors", "tx_errors"),
    ("rxDropped", "rx_dropped"),
    ("txDropped", "tx_dropped"),
)
_SYS_NET = "/sys/class/net"


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:  # noqa: PTH123 - one small sysfs file
            return f.read(64).decode("ascii", "replace").strip()
    except OSError:  # gone, or no such attribute (speed of a link that is down: EINVAL)
        return None


def interfaces(names: Iterable[str], sys_net: str = _SYS_NET) -> dict[str, dict[str, Any]]:
    """For each of ``names``: byte/packet/error/drop counters and the link speed (Mb/s).

    Ten small sysfs reads per name, whatever the number of links in the guest (psutil's
    per-NIC calls read and query every interface). A name that is gone is left out.
    """
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if not name or "/" in name or name.startswith("."):
            continue
        base = f"{sys_net}/{name}"
        entry: dict[str, Any] = {}
        for key, attr in _COUNTERS:
            value = _read(f"{base}/statistics/{attr}")
            if value is None or not value.isdecimal():
                break
            entry[key] = int(value)
        else:
            speed = _read(f"{base}/speed")
            entry["speedMbps"] = int(speed) if speed and speed.isdecimal() and int(speed) else None
            duplex = _read(f"{base}/duplex")
            entry["duplex"] = duplex if duplex in {"full", "half"} else None
            out[name] = entry
    return out


AGENT_STATS_TTL = 1.0  # seconds: /v1/status may be asked thousands of times a second
_agent_cache: tuple[float, dict[str, Any]] | None = None


def agent(started_at: float) -> dict[str, Any]:
    """The agent process: pid, resident memory, CPU seconds, threads (at most 1 s old), uptime."""
    global _agent_cache  # noqa: PLW0603 - a one-value cache of this process's own figures
    now = time.monotonic()
    if not HAVE_PSUTIL:
        _agent_cache = (now, {"pid": os.getpid()})
    elif _agent_cache is None or now - _agent_cache[0] > AGENT_STATS_TTL:
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
    import psutil  # noqa: PLC0415 - see HAVE_PSUTIL

    return psutil.Process(os.getpid())
