"""The controller's operator surface, its pure parts and the probes with an injected clock:
the Event correlator (de-duplication keys, the spam filter's token bucket, bounded LRUs, Event
names), which notes a render gives, the health/readiness/leader answers, ``--http-address``
and the lease-timing flags, and the HTTP endpoints on a loopback port."""

import threading
import urllib.error
import urllib.request

import pytest

from kvdev.host import cli
from kvdev.host.contract import CONTROLLER as MANAGER
from kvdev.host.contract import MANAGED_BY, VMI_LABEL
from kvdev.host.controller.endpoints import Endpoints, Probes, parse_address
from kvdev.host.controller.index import Kind, parse
from kvdev.host.controller.live import Controller
from kvdev.host.controller.metrics import Metrics
from kvdev.host.controller.reflector import Upsert
from kvdev.host.controller.render import Inputs, Rendered, Verb
from kvdev.host.controller.vmievents import (
    BURST,
    LRU,
    REFILL_SECONDS,
    Correlator,
    Create,
    Note,
    ObjectRef,
    Patch,
    Reason,
    TokenBucket,
    event_name,
)
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.host.kube.wire import KubeApi

VMI = ObjectRef("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1", "uid-1")
OTHER = ObjectRef("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm2", "uid-2")
PENDING = Note(Reason.CLAIM_PENDING, "spec.resourceClaims[0]: waiting for vm1-devices")
T0 = 1_800_000_000.0


def stored(decision, count=1):
    """What the API server answers a create or patch with (name and count)."""
    name = decision.body["metadata"]["name"] if isinstance(decision, Create) else decision.name
    return {"metadata": {"name": name}, "count": count}


# --------------------------------------------------------------------------- the spam filter


def test_the_token_bucket_gives_its_burst_then_one_per_refill_period():
    bucket = TokenBucket(BURST, REFILL_SECONDS, float(BURST), T0)
    assert [bucket.take(T0) for _ in range(BURST + 1)] == [True] * BURST + [False]
    assert not bucket.take(T0 + REFILL_SECONDS / 2)
    assert bucket.take(T0 + REFILL_SECONDS)  # one token back after 300 s
    assert not bucket.take(T0 + REFILL_SECONDS)
    # a long quiet time refills to the burst, never beyond
    later = T0 + 1000 * REFILL_SECONDS
    assert sum(bucket.take(later) for _ in range(BURST + 5)) == BURST


def test_a_clock_going_back_gives_no_tokens():
    bucket = TokenBucket(2, 10.0, 0.0, T0)
    assert not bucket.take(T0 - 100)
    assert not bucket.take(T0 - 100 + 9)


def test_the_spam_filter_is_per_object():
    correlator = Correlator("kvdev-host-controller")
    sent = [correlator.decide(VMI, PENDING, T0) for _ in range(BURST + 3)]
    assert sum(d is not None for d in sent) == BURST
    assert sent[-1] is None
    assert correlator.decide(OTHER, PENDING, T0) is not None  # another VMI has its own bucket


# --------------------------------------------------------------------------- de-duplication


def test_the_first_note_is_a_core_v1_event_as_clientgos_recorder_writes_it():
    correlator = Correlator("kvdev-host-controller", "ctl-0")
    decision = correlator.decide(VMI, PENDING, T0)
    assert isinstance(decision, Create)
    body = decision.body
    assert decision.namespace == "vms"
    assert (body["apiVersion"], body["kind"]) == ("v1", "Event")
    assert body["involvedObject"] == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "namespace": "vms",
        "name": "vm1",
        "uid": "uid-1",
    }
    assert (body["reason"], body["type"], body["count"]) == ("ClaimPending", "Normal", 1)
    assert body["source"] == {"component": "kvdev-host-controller", "host": "ctl-0"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2027-01-15T08:00:00Z"
    assert body["metadata"]["name"].startswith("vm1.")


def test_the_same_object_reason_and_message_again_patches_the_count():
    correlator = Correlator("c")
    first = correlator.decide(VMI, PENDING, T0)
    correlator.written(VMI, PENDING, stored(first), T0)
    again = correlator.decide(VMI, PENDING, T0 + 60)
    assert isinstance(again, Patch)
    assert again.name == first.body["metadata"]["name"]
    assert again.body == {
        "count": 2,
        "lastTimestamp": "2027-01-15T08:01:00Z",
        "message": PENDING.message,
    }
    assert isinstance(again.fallback, Create)  # if the Event is gone (404)
    correlator.written(VMI, PENDING, stored(again, count=2), T0 + 60)
    assert correlator.decide(VMI, PENDING, T0 + 120).body["count"] == 3


@pytest.mark.parametrize(
    ("ref", "note"),
    [
        (OTHER, PENDING),  # another object
        (VMI, Note(Reason.CLAIM_PENDING, "waiting for another claim")),  # another message
        (VMI, Note(Reason.HINT_REFUSED, PENDING.message)),  # another reason (and type)
    ],
)
def test_a_different_object_message_or_reason_is_a_new_event(ref, note):
    correlator = Correlator("c")
    correlator.written(VMI, PENDING, stored(correlator.decide(VMI, PENDING, T0)), T0)
    assert isinstance(correlator.decide(ref, note, T0 + 1), Create)


def test_after_the_window_or_a_failed_write_it_is_a_new_event():
    correlator = Correlator("c", window=600)
    correlator.decide(VMI, PENDING, T0)  # never written (the POST failed): not remembered
    assert isinstance(correlator.decide(VMI, PENDING, T0 + 1), Create)
    correlator.written(VMI, PENDING, stored(correlator.decide(VMI, PENDING, T0 + 2)), T0 + 2)
    assert isinstance(correlator.decide(VMI, PENDING, T0 + 600), Patch)
    assert isinstance(correlator.decide(VMI, PENDING, T0 + 1300), Create)


def test_the_caches_are_bounded_lrus():
    lru = LRU(3)
    for n in range(4):
        lru.put(n, str(n))
    assert len(lru) == 3
    assert lru.get(0) is None
    lru.get(1)  # used: now the newest
    lru.put(4, "4")
    assert (lru.get(1), lru.get(2)) == ("1", None)
    correlator = Correlator("c", size=2, burst=1)
    refs = [ObjectRef("v1", "K", "ns", f"o{n}", f"u{n}") for n in range(3)]
    assert all(correlator.decide(r, PENDING, T0) for r in refs)
    assert correlator.decide(refs[2], PENDING, T0) is None  # its bucket is empty
    assert correlator.decide(refs[0], PENDING, T0) is not None  # evicted: a new, full bucket


def test_event_names_stay_valid_and_distinct_and_messages_are_bounded():
    long = "v" * 250 + "-x"
    name = event_name(long, T0, 0)
    assert len(name) <= 253
    head, _, suffix = name.rpartition(".")
    assert not head.endswith(("-", "."))
    assert int(suffix, 16) == int(T0 * 1e9)
    assert event_name("vm1", T0, 0) != event_name("vm1", T0, 1)
    correlator = Correlator("c")
    body = correlator.decide(VMI, Note(Reason.HINT_REFUSED, "x" * 5000), T0).body
    assert len(body["message"]) == 1024
    assert body["message"].endswith("...")
    assert body["type"] == "Warning"


# --------------------------------------------------------------------------- the probes


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def controller():
    clock = Clock()
    ctl = Controller(KubeApi(client=None), watch_seconds=300, clock=clock, metrics=Metrics())
    ctl.test_clock = clock
    return ctl


def test_readyz_names_each_kind_not_yet_listed(controller):
    ok, text = controller.readyz()
    assert not ok
    assert text == (
        "not synced: VirtualMachineInstance, Pod, ResourceClaim, ResourceSlice, ConfigMap"
    )
    for reflector in controller.reflectors[:-1]:
        reflector.synced.set()
    assert controller.readyz() == (False, "not synced: ConfigMap")
    controller.reflectors[-1].synced.set()
    assert controller.readyz() == (True, "ok")


def test_healthz_fails_naming_a_watch_silent_past_the_bound(controller):
    assert controller.stale_after == 2 * (300 + 30)
    assert controller.healthz() == (True, "ok")  # nothing listed yet is not wedged
    for reflector in controller.reflectors:
        reflector.progressed = 1000.0
    controller.test_clock.now = 1000.0 + 660
    assert controller.healthz() == (True, "ok")
    controller.reflectors[0].progressed = 1000.0 + 500
    controller.test_clock.now = 1000.0 + 700
    ok, text = controller.healthz()
    assert not ok
    assert "watch Pod: no event, bookmark or list for 700 s" in text
    assert "VirtualMachineInstance" not in text


def test_healthz_fails_when_the_leaders_worker_stops_turning(controller):
    for reflector in controller.reflectors:
        reflector.progressed = 1000.0
    controller._beats.update({-1: 1000.0 + 661, 0: 1000.0 + 600, 1: 1000.0})
    controller.test_clock.now = 1000.0 + 661
    for reflector in controller.reflectors:  # the watches are fine
        reflector.progressed = controller.test_clock.now
    assert controller.healthz() == (True, "ok")  # a standby's worker does not turn
    controller.leading.set()
    ok, text = controller.healthz()
    assert (ok, "worker 1 has not turned for 661 s" in text) == (False, True)
    assert "worker 0" not in text
    assert "main loop" not in text


def test_leader_and_the_leader_gauge_follow_the_lease(controller):
    assert controller.leader() == (False, "not leading")
    assert b"kvdev_controller_leader 0.0" in controller.metrics.exposition()
    controller.leading.set()
    assert controller.leader() == (True, "leader")
    text = controller.metrics.exposition().decode()
    assert "kvdev_controller_leader 1.0" in text
    assert 'kvdev_controller_relists_total{resource="VirtualMachineInstance"} 0.0' in text
    assert 'kvdev_controller_configmap_writes_total{result="created"} 0.0' in text


class Notes:
    """Stands in for the Recorder: what the controller asked to record."""

    def __init__(self):
        self.asked = []

    def record(self, ref, notes):
        self.asked.append((ref.name, [n.reason.reason for n in notes]))


def test_a_note_repeated_by_a_sync_that_wrote_nothing_is_not_recorded_again():
    notes = Notes()
    ctl = Controller(KubeApi(client=None), recorder=notes)
    vmi = VirtualMachineInstance.model_validate(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "vms", "uid": "uid-1"},
            "spec": {"domain": {"devices": {}}},
        }
    )
    inputs = Inputs(vmi)
    base = {"vmi": "vms/vm1", "namespace": "vms", "name": "kvdev-vm1"}
    pending = (PENDING,)
    ctl._record(("vms", "vm1"), inputs, Rendered(**base, verb=Verb.CREATE, notes=pending))
    ctl._record(("vms", "vm1"), inputs, Rendered(**base, verb=Verb.NONE, notes=pending))
    ctl._record(("vms", "vm1"), inputs, Rendered(**base, verb=Verb.UPDATE, notes=pending))
    refused = (Note(Reason.HINT_REFUSED, "x"),)
    ctl._record(("vms", "vm1"), inputs, Rendered(**base, verb=Verb.NONE, notes=refused))
    assert notes.asked == [
        ("vm1", ["ClaimPending", "ConfigMapCreated"]),
        # the heartbeat sync: nothing written, the same note: nothing asked
        ("vm1", ["ClaimPending", "ConfigMapUpdated"]),  # a write: its count goes up
        ("vm1", ["HintRefused"]),  # a new note is recorded whatever the sync wrote
    ]


# --------------------------------------------------------------------------- HTTP and flags


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("0", None),
        ("", None),
        (":8080", ("", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9090", ("::1", 9090)),
    ],
)
def test_http_address_forms(text, address):
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", ":70000"])
def test_a_bad_http_address_says_what_is_expected(text):
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_address(text)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - loopback
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_the_endpoints_answer_with_the_probes_status_codes():
    probes = Probes(
        healthz=lambda: (False, "wedged: watch Pod"),
        readyz=lambda: (False, "not synced: Pod"),
        leader=lambda: (True, "leader"),
        metrics=lambda: b"kvdev_controller_leader 1.0\n",
        metrics_type="text/plain; version=1.0.0; charset=utf-8",
    )
    served = Endpoints(("127.0.0.1", 0), probes)
    served.start()
    try:
        host, port = served.address
        base = f"http://{host}:{port}"
        assert get(f"{base}/healthz")[::2] == (500, b"wedged: watch Pod\n")
        assert get(f"{base}/readyz")[::2] == (503, b"not synced: Pod\n")
        assert get(f"{base}/leader")[::2] == (200, b"leader\n")
        status, kind, body = get(f"{base}/metrics?x=1")
        assert (status, kind, body) == (200, probes.metrics_type, b"kvdev_controller_leader 1.0\n")
        assert get(f"{base}/other")[0] == 404
        with pytest.raises(Exception, match="cannot listen"):
            Endpoints(("127.0.0.1", port), probes)  # the port is taken
    finally:
        served.close()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--lease-duration=5", "--renew-deadline=6"],
            (
                "--retry-period (2) must be positive and less than --renew-deadline (6), which "
                "must be less than --lease-duration (5)"
            ),
        ),
        (["--retry-period=0"], "--retry-period (0) must be positive"),
        (["--renew-deadline=1", "--retry-period=1"], "less than --renew-deadline (1)"),
        (["--http-address=8080"], "--http-address: '8080' is not HOST:PORT"),
        (["--resync=0"], "--resync must be positive"),
    ],
)
def test_bad_live_settings_are_usage_errors_naming_the_flags(flags, message, capsys):
    assert cli.main(["controller", "--leader-elect", "--lease-namespace=x", *flags]) == 2
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------- echoes


def _configmap(version, data, owner="vm1"):
    return {
        "metadata": {
            "name": f"kvdev-{owner}",
            "namespace": "vms",
            "resourceVersion": version,
            "labels": {MANAGED_BY: MANAGER, VMI_LABEL: owner},
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": data,
    }


def _written(raw):
    body = {k: v for k, v in raw.items() if k != "metadata"}
    meta = {k: v for k, v in raw["metadata"].items() if k != "resourceVersion"}
    name, namespace = meta["name"], meta["namespace"]
    return Rendered("vms/vm1", namespace, name, Verb.CREATE, body={**body, "metadata": meta})


def test_the_echo_of_a_write_still_out_queues_nothing_anything_else_does(controller):
    """A create's watch event that beats its answer is not a change to sync again."""
    echo = _configmap("7", {"guest-hints.json": "{}"})
    with controller._in_flight(_written(echo)):
        controller.observe(Upsert(Kind.CONFIGMAP, parse(Kind.CONFIGMAP, echo)))
        assert len(controller._queue) == 0
        edited = _configmap("8", {"guest-hints.json": "{} "})  # someone else's, meanwhile
        controller.observe(Upsert(Kind.CONFIGMAP, parse(Kind.CONFIGMAP, edited)))
        assert len(controller._queue) == 1
    controller._queue.get(threading.Event(), 0)
    # with no write out, the same content is a change like any other (the cache moved)
    controller.observe(Upsert(Kind.CONFIGMAP, parse(Kind.CONFIGMAP, _configmap("9", echo["data"]))))
    assert len(controller._queue) == 1
    assert controller._writing == {}


def test_the_queue_depth_gauge_counts_the_vmis_waiting(controller):
    assert b"kvdev_controller_queue_depth 0.0" in controller.metrics.exposition()
    controller._queue.add([("vms", "a"), ("vms", "b")], 0.0)
    controller._queue.add([("vms", "c")], 30.0)  # delayed by a back-off: still waiting
    assert b"kvdev_controller_queue_depth 3.0" in controller.metrics.exposition()
