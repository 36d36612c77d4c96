"""core.metrics (the loop's counters) and adapters.exposition (their Prometheus text), read back
with prometheus_client's own text parser; and GET /v1/metrics through the API's routes."""

from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvdev import __version__
from kvdev.errors import Problem
from kvdev.guest.adapters.exposition import CONTENT_TYPE, Exposition
from kvdev.guest.api.bridge import Bridge
from kvdev.guest.api.routes import Api
from kvdev.guest.api.server import Peer, Request
from kvdev.guest.core import steps as s
from kvdev.guest.core.metrics import BUCKETS, STEP_KINDS, TRIGGERS, Metrics
from kvdev.guest.core.status import Condition, DeviceStatus, Phase, Status


@dataclass
class Done:
    """A pass's outcome as the loop hands it over (reconciler.Outcome's fields)."""

    status: Status
    results: list = field(default_factory=list)
    failed: bool = False
    unsaved: bool = False
    new_metadata: bool = False


def device(name, phase=Phase.CONFIGURED):
    return DeviceStatus(f"c/r/d/p/{name}", phase, "c", "r", "d", "p", name, 1)


def status(*devices, errors=(), conditions=(), unmanaged=()):
    return Status(1, tuple(devices), tuple(unmanaged), tuple(errors), conditions=conditions)


def ok(step):
    return s.StepResult(step, ok=True)


def bad(step, retryable=False):
    return s.StepResult(step, ok=False, error="EINVAL", retryable=retryable)


MTU = s.SetMtu(2, "eth1", "c/r/d/p/vf-0", "metadata", 9000)
ADDR = s.AddAddress(2, "eth1", "c/r/d/p/vf-0", "metadata", "10.1.0.5/24")


def samples(metrics):
    """{(sample name, sorted labels): value} of the exposition of ``metrics``."""
    text = Exposition(lambda: metrics.view, __version__).render().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found, name, **labels):
    return found[name, tuple(sorted(labels.items()))]


def test_before_any_pass_every_series_is_there_at_zero():
    found = samples(Metrics())
    for trigger in TRIGGERS:
        for result in ("ok", "error", "failed"):
            assert value(found, "kvdev_agent_passes_total", trigger=trigger, result=result) == 0
    for kind in STEP_KINDS:
        assert value(found, "kvdev_agent_steps_applied_total", kind=kind) == 0
        assert value(found, "kvdev_agent_step_errors_total", kind=kind) == 0
    assert "SetMtu" in STEP_KINDS
    assert "WriteLinkFile" in STEP_KINDS
    for kind in ("invalid", "unavailable", "truncated"):
        assert value(found, "kvdev_agent_metadata_errors_total", kind=kind) == 0
    assert value(found, "kvdev_agent_drift_restored_total") == 0
    assert value(found, "kvdev_agent_pass_duration_seconds_count") == 0
    assert value(found, "kvdev_agent_devices", phase="Configured") == 0
    assert not any(name == "kvdev_agent_last_ok_pass_timestamp_seconds" for name, _ in found)
    info = [labels for name, labels in found if name == "kvdev_agent_build_info"]
    assert len(info) == 1
    assert dict(info[0])["version"] == __version__


def test_a_pass_counts_its_trigger_result_steps_phases_and_when_it_ended():
    m = Metrics()
    done = Done(status(device("vf-0"), unmanaged=("eth0",)), [ok(MTU), ok(ADDR), ok(ADDR)])
    done.new_metadata = True
    m.record("metadata", done, None, seconds=0.02, now=1_700_000_000.5)
    found = samples(m)
    assert value(found, "kvdev_agent_passes_total", trigger="metadata", result="ok") == 1
    assert sum(v for (n, _), v in found.items() if n == "kvdev_agent_passes_total") == 1
    assert value(found, "kvdev_agent_steps_applied_total", kind="SetMtu") == 1
    assert value(found, "kvdev_agent_steps_applied_total", kind="AddAddress") == 2
    assert value(found, "kvdev_agent_step_errors_total", kind="SetMtu") == 0
    assert value(found, "kvdev_agent_drift_restored_total") == 0  # new metadata: not drift
    assert value(found, "kvdev_agent_devices", phase="Configured") == 1
    assert value(found, "kvdev_agent_devices", phase="Unmanaged") == 1
    assert value(found, "kvdev_agent_devices", phase="Missing") == 0
    assert value(found, "kvdev_agent_last_ok_pass_timestamp_seconds") == 1_700_000_000.5


def test_a_failed_step_makes_an_error_pass_and_counts_by_kind():
    m = Metrics()
    m.record("start", Done(status(), [ok(ADDR), bad(MTU)]), None, seconds=0.01, now=5.0)
    found = samples(m)
    assert value(found, "kvdev_agent_passes_total", trigger="start", result="error") == 1
    assert value(found, "kvdev_agent_step_errors_total", kind="SetMtu") == 1
    assert value(found, "kvdev_agent_steps_applied_total", kind="AddAddress") == 1
    assert ("kvdev_agent_last_ok_pass_timestamp_seconds", ()) not in found


def test_unsaved_state_is_an_error_pass():
    m = Metrics()
    m.record("link", Done(status(), unsaved=True), None, seconds=0.01, now=5.0)
    assert value(samples(m), "kvdev_agent_passes_total", trigger="link", result="error") == 1


def test_a_failed_pass_counts_only_itself_and_keeps_the_phases():
    m = Metrics()
    first = Done(status(device("vf-0")), [ok(MTU)], new_metadata=True)
    m.record("start", first, None, seconds=0.01, now=10.0)
    failed = Done(status(device("vf-0")), [], failed=True)
    m.record("udev", failed, first, seconds=0.3, now=20.0)
    found = samples(m)
    assert value(found, "kvdev_agent_passes_total", trigger="udev", result="failed") == 1
    assert value(found, "kvdev_agent_steps_applied_total", kind="SetMtu") == 1
    assert value(found, "kvdev_agent_devices", phase="Configured") == 1
    assert value(found, "kvdev_agent_last_ok_pass_timestamp_seconds") == 10.0
    assert value(found, "kvdev_agent_pass_duration_seconds_count") == 2


def test_drift_is_what_a_pass_without_new_metadata_puts_back_after_a_clean_one():
    m = Metrics()
    clean = Done(status(), [ok(MTU)], new_metadata=True)
    m.record("start", clean, None, seconds=0.01, now=1.0)
    restored = Done(status(), [ok(MTU), ok(ADDR)])
    m.record("link", restored, clean, seconds=0.01, now=2.0)
    assert value(samples(m), "kvdev_agent_drift_restored_total") == 2
    retried = Done(status(), [ok(MTU)])  # after a pass whose step failed: a retry, not drift
    m.record("timer", retried, Done(status(), [bad(MTU, retryable=True)]), seconds=0.01, now=3)
    assert value(samples(m), "kvdev_agent_drift_restored_total") == 2
    newer = Done(status(), [ok(ADDR)], new_metadata=True)
    m.record("metadata", newer, restored, seconds=0.01, now=4.0)
    assert value(samples(m), "kvdev_agent_drift_restored_total") == 2


def test_metadata_errors_are_counted_when_they_appear_not_while_they_last():
    m = Metrics()
    torn = Problem("unexpected end of JSON", "/run/dra/a.json")
    other = Problem("not an IP address", "/run/dra/b.json", 0, "requests[0]")
    gone = Condition("MetadataUnavailable", "/run/dra: root missing")
    cut = Condition("MetadataTruncated", "10000 entries")
    m.record("metadata", Done(status(errors=[torn])), None, seconds=0.01, now=1.0)
    m.record("link", Done(status(errors=[torn])), None, seconds=0.01, now=2.0)
    found = samples(m)
    assert value(found, "kvdev_agent_metadata_errors_total", kind="invalid") == 1
    both = Done(status(errors=[torn, other], conditions=(gone, cut)))
    m.record("metadata", both, None, seconds=0.01, now=3.0)
    m.record("metadata", Done(status()), None, seconds=0.01, now=4.0)
    m.record("metadata", Done(status(errors=[torn])), None, seconds=0.01, now=5.0)  # again
    found = samples(m)
    assert value(found, "kvdev_agent_metadata_errors_total", kind="invalid") == 3
    assert value(found, "kvdev_agent_metadata_errors_total", kind="unavailable") == 1
    assert value(found, "kvdev_agent_metadata_errors_total", kind="truncated") == 1
    assert value(found, "kvdev_agent_steps_applied_total", kind="SetMtu") == 0


def test_pass_durations_fill_cumulative_buckets_with_their_sum():
    m = Metrics()
    for seconds in (0.001, 0.005, 0.2, 45.0):  # 0.005 is on a bound: le includes it
        m.record("verify", Done(status()), None, seconds=seconds, now=1.0)
    found = samples(m)
    name = "kvdev_agent_pass_duration_seconds_bucket"
    assert value(found, name, le="0.005") == 2
    assert value(found, name, le="0.1") == 2
    assert value(found, name, le="0.25") == 3
    assert value(found, name, le=str(BUCKETS[-1])) == 3
    assert value(found, name, le="+Inf") == 4
    assert value(found, "kvdev_agent_pass_duration_seconds_count") == 4
    assert value(found, "kvdev_agent_pass_duration_seconds_sum") == pytest.approx(45.206)


def test_a_published_view_never_changes_afterwards():
    m = Metrics()
    before = m.view
    m.record("signal", Done(status(), [ok(MTU)]), None, seconds=0.01, now=1.0)
    assert before.steps["SetMtu"] == 0
    assert before.passes["signal", "ok"] == 0
    assert m.view.steps["SetMtu"] == 1


def _get(api, method="GET", path="/v1/metrics"):
    return api.handle(Request(method, path, {}, Peer(0, 0, 1, frozenset({0})), b""))


def test_the_api_serves_the_text_with_prometheus_content_type():
    bridge = Bridge()
    try:
        api = Api(bridge, agent_stats=lambda _t: {})
        bridge.metrics.record("start", Done(status(), [ok(MTU)]), None, seconds=0.01, now=9.0)
        answer = _get(api)
        assert answer.status == 200
        assert answer.content_type == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
        text = answer.body.decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        applied = families["kvdev_agent_steps_applied"].samples
        assert [x.value for x in applied if x.labels == {"kind": "SetMtu"}] == [1]
        bridge.metrics.record("link", Done(status(), [ok(MTU)]), None, seconds=0.01, now=9.5)
        again = {f.name: f for f in text_string_to_metric_families(_get(api).body.decode())}
        applied = again["kvdev_agent_steps_applied"].samples
        assert [x.value for x in applied if x.labels == {"kind": "SetMtu"}] == [2]
        assert _get(api, "HEAD").status == 200
        refused = _get(api, "POST")
        assert refused.status == 405
        assert ("Allow", "GET") in refused.headers
    finally:
        bridge.close()
