"""Placing many pods over many nodes like kube-scheduler's DRA plugin (pure: data in, data out).

``run.schedule`` is the entry; ``state`` owns the mutable cluster view (node usage, devices in
use, versions), ``claims`` resolves a pod's claims (by name, templates, PodGroup claims,
extended resources), ``accounting`` node-allocatable resources (KEP-5517), ``nodefilter`` the
per-node decision and its cache; ``events.replay`` replays a stream of cluster changes, retrying
unschedulable pods as ``hints`` (queueing hints) says. No I/O anywhere in this package.
"""

from kvdev.host.scheduling.clusterevents import ClusterEvent, EventRun, replay
from kvdev.host.scheduling.run import Placement, ScheduleResult, Unplaced, schedule

__all__ = [
    "ClusterEvent",
    "EventRun",
    "Placement",
    "ScheduleResult",
    "Unplaced",
    "replay",
    "schedule",
]
