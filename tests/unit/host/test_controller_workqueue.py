"""The controller's keyed queue: one worker per VMI at a time, nothing lost, idle only when empty.

Plain objects and threads; every wait is bounded by steps or a guard, never by a time claim.
"""

import random
import threading
import time

from kvdev.host.controller.workqueue import KeyedQueue

NEVER = threading.Event()  # a stop event nobody sets
GUARD = 30.0  # a failure guard on a blocking get, not a speed claim


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_held_by_a_worker_is_not_handed_to_another():
    q = KeyedQueue(Clock())
    q.add(["vm-a", "vm-b"])
    assert q.get(NEVER, 0) == "vm-a"
    q.add(["vm-a"])  # changed while worker 1 syncs it
    assert q.get(NEVER, 0) == "vm-b"  # worker 2 skips vm-a
    assert q.get(NEVER, 0) is None  # worker 3: only vm-a is queued, and it is held
    q.done("vm-a")
    assert q.get(NEVER, 0) == "vm-a"  # the change during the sync is synced afterwards


def test_a_key_added_many_times_is_queued_once():
    q = KeyedQueue(Clock())
    q.add(["vm-a", "vm-a"])
    q.add(["vm-a"])
    assert len(q) == 1
    assert q.get(NEVER, 0) == "vm-a"
    assert q.get(NEVER, 0) is None


def test_keys_are_handed_out_in_the_order_they_were_added_a_delayed_one_once_due():
    clock = Clock()
    q = KeyedQueue(clock)
    q.add(["late"], delay=5)
    q.add(["b", "a"])
    assert q.get(NEVER, 0) == "b"
    clock.now = 5
    q.add(["c"])
    assert [q.get(NEVER, 0), q.get(NEVER, 0), q.get(NEVER, 0)] == ["a", "c", "late"]


def test_a_delayed_key_comes_forward_when_added_now():
    clock = Clock()
    q = KeyedQueue(clock)
    q.add(["vm-a"], delay=30)
    assert q.get(NEVER, 0) is None
    q.add(["vm-a"])
    assert q.get(NEVER, 0) == "vm-a"


def test_idle_is_set_only_when_nothing_is_queued_or_held():
    idle = threading.Event()
    q = KeyedQueue(Clock(), idle)
    assert q.settle()
    q.add(["vm-a"])
    assert not idle.is_set()
    key = q.get(NEVER, 0)
    assert not q.settle()  # held by a worker
    q.done(key)
    assert q.settle()
    q.add(["vm-b"], delay=3)
    assert not q.settle()  # a delayed key is still work


class Syncs:
    """Workers that record, per key, overlaps and the change count each sync saw."""

    def __init__(self, q: KeyedQueue[str], keys: list[str]) -> None:
        self.q = q
        self.lock = threading.Lock()
        self.held: set[str] = set()
        self.overlaps: list[str] = []
        self.changed = dict.fromkeys(keys, 0)  # changes made, per key
        self.seen = dict.fromkeys(keys, 0)  # the change count the last sync saw, per key
        self.stop = threading.Event()

    def produce(self, seed: int, keys: list[str], count: int) -> None:
        rng = random.Random(seed)  # noqa: S311 - reproducible test data
        for _ in range(count):
            key = rng.choice(keys)
            with self.lock:
                self.changed[key] += 1
            self.q.add([key])

    def work(self) -> None:
        while not self.stop.is_set():
            key = self.q.get(self.stop, GUARD)
            if key is None:
                continue
            with self.lock:
                if key in self.held:
                    self.overlaps.append(key)
                self.held.add(key)
                self.seen[key] = self.changed[key]  # the sync reads the current state
            time.sleep(0)  # let the other workers and the producers run while it is held
            with self.lock:
                self.held.discard(key)
            self.q.done(key)

    def drained(self) -> bool:
        """Whether the queue empties (polled, bounded by GUARD)."""
        end = time.monotonic() + GUARD
        while self.q.busy():
            if time.monotonic() > end:
                return False
            self.q.wake()
            self.stop.wait(0.01)
        return True


def test_many_workers_never_sync_one_key_twice_at_once_and_lose_no_change():
    """8 workers, 20 keys, 4,000 changes from 2 producers: each change is followed by a sync."""
    q: KeyedQueue[str] = KeyedQueue(Clock())
    keys = [f"vm-{i}" for i in range(20)]
    syncs = Syncs(q, keys)
    workers = [threading.Thread(target=syncs.work) for _ in range(8)]
    producers = [threading.Thread(target=syncs.produce, args=(s, keys, 2000)) for s in (1, 2)]
    for t in workers + producers:
        t.start()
    for t in producers:
        t.join()
    drained = syncs.drained()
    syncs.stop.set()
    q.wake()
    for t in workers:
        t.join(GUARD)
    assert drained
    assert syncs.overlaps == []
    assert syncs.seen == syncs.changed  # every key's last change was seen by a sync after it


def test_the_controllers_client_keeps_a_connection_per_watch_worker_and_sender(tmp_path):
    """Four workers, five watches and the Event sender on 2 CPUs: past the client's default
    pool (5 per CPU) urllib3 would open and drop a connection per request."""
    import yaml  # noqa: PLC0415

    from kvdev.host.kube import client as kubeclient  # noqa: PLC0415

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    api = kubeclient.api_client(path, connections=64)
    assert api.configuration.connection_pool_maxsize == 64
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 64
    default = kubeclient.api_client(path)
    assert kubeclient.api_client(path, connections=1).configuration.connection_pool_maxsize == (
        default.configuration.connection_pool_maxsize
    )  # never fewer than the client's default
