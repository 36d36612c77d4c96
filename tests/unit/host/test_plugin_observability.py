"""The kubelet plugin's metrics, health self-check and device-status seam, in-process.

Pure parts (the error reasons, ``--metrics-address`` parsing, the dial deadline, the health
check's reuse rule) with plain values; ``Plugin`` with real files and claims from a directory
and a recording ``DeviceStatusSink`` (a fake: the real one is judged by the API server in
tests/cluster/test_serve_device_status.py); ``SelfCheck`` against a real ``PluginServer``.
"""

import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from agentlab import eventually
from hostlab import DRIVER, allocated_claim, vf_slice
from kvdev.errors import PermanentError, Problem, RetryableError, SchemaError, UsageError
from kvdev.host.k8s import ResourceClaim
from kvdev.host.plugin.claimsource import (
    ClaimNotFoundError,
    ClaimUidMismatchError,
    FileClaimSource,
)
from kvdev.host.plugin.claimstatus import DeviceStatusWriteError, field_manager
from kvdev.host.plugin.health import DIAL_DEADLINE, SelfCheck, Verdict, dial_deadline
from kvdev.host.plugin.metrics import Address, PluginMetrics, error_reason
from kvdev.host.plugin.server import PluginServer, Sockets
from kvdev.host.plugin.service import ClaimRef, Plugin
from kvdev.host.publish import writer


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ClaimNotFoundError("x"), "claim_not_found"),
        (ClaimUidMismatchError("x"), "uid_mismatch"),
        (SchemaError([Problem("bad")]), "invalid"),
        (RetryableError("x"), "retryable"),
        (PermanentError("x"), "permanent"),
        (KeyError("x"), "internal"),
    ],
)
def test_each_error_has_its_reason_label(error, reason):
    assert error_reason(error) == reason


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", None),
        ("0", None),
        (":8081", Address("", 8081)),
        ("127.0.0.1:0", Address("127.0.0.1", 0)),
        ("[::1]:9090", Address("::1", 9090)),
        ("metrics.local:65535", Address("metrics.local", 65535)),
    ],
)
def test_metrics_address_forms(text, want):
    assert Address.parse(text) == want


@pytest.mark.parametrize("text", ["8081", "host:", "host:65536", "host:x", ":-1"])
def test_a_bad_metrics_address_names_the_flag(text):
    with pytest.raises(UsageError, match=r"--metrics-address .*HOST:PORT"):
        Address.parse(text)


def test_a_self_dial_gets_half_the_probe_deadline_at_most_the_cap():
    assert dial_deadline(None) == DIAL_DEADLINE
    assert dial_deadline(1.0) == 0.5
    assert dial_deadline(1000.0) == DIAL_DEADLINE
    assert dial_deadline(-1.0) == 0.0


def test_the_field_manager_is_named_after_the_driver():
    assert field_manager("dra.net") == "kvdev-host/dra.net"


# ------------------------------------------------------------------ Plugin: metrics and status


class RecordingSink:
    """A DeviceStatusSink that records calls; ``fail`` makes each call raise."""

    def __init__(self, fail: str | None = None) -> None:
        self.applied: list[ResourceClaim] = []
        self.cleared: list[tuple[str, str, str]] = []
        self.fail = fail

    def apply(self, claim: ResourceClaim) -> None:
        if self.fail:
            raise DeviceStatusWriteError("refused", self.fail)
        self.applied.append(claim)

    def clear(self, namespace: str, name: str, uid: str) -> None:
        if self.fail:
            raise DeviceStatusWriteError("refused", self.fail)
        self.cleared.append((namespace, name, uid))


@pytest.fixture
def short_dir():
    path = Path(tempfile.mkdtemp(prefix="kvdev-obs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def plugin_on(root: Path, sink: RecordingSink | None) -> Plugin:
    claims = root / "claims"
    claims.mkdir(parents=True)
    docs = [vf_slice(3), *(allocated_claim(i) for i in range(3))]
    (claims / "objects.yaml").write_text(yaml.safe_dump_all(docs))
    layout = writer.Layout(DRIVER, root / "plugin", root / "cdi")
    return Plugin(layout, FileClaimSource(claims, DRIVER), sink)


def ref(i: int, uid: str | None = None) -> ClaimRef:
    doc = allocated_claim(i)
    return ClaimRef("vms", doc["metadata"]["name"], uid or doc["metadata"]["uid"])


def sample(plugin: Plugin, name: str, **labels: str) -> float:
    value = plugin.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_prepare_applies_the_claims_status_and_unprepare_clears_it(short_dir):
    sink = RecordingSink()
    plugin = plugin_on(short_dir, sink)
    assert not plugin.prepare(ref(0)).error
    assert not plugin.prepare(ref(1)).error
    assert [c.metadata.name for c in sink.applied] == ["claim-0", "claim-1"]
    assert not plugin.unprepare(ref(0)).error
    assert sink.cleared == [("vms", "claim-0", ref(0).uid)]
    assert sample(plugin, "kvdev_plugin_prepare_claims_total", result="success") == 2
    assert sample(plugin, "kvdev_plugin_prepare_claim_duration_seconds_count") == 2
    assert sample(plugin, "kvdev_plugin_unprepare_claims_total", result="success") == 1
    assert sample(plugin, "kvdev_plugin_prepared_claims") == 1


def test_a_failed_status_write_is_counted_and_the_prepare_still_succeeds(short_dir):
    plugin = plugin_on(short_dir, RecordingSink(fail="forbidden"))
    result = plugin.prepare(ref(0))
    assert result.error == ""
    assert result.devices
    assert plugin.unprepare(ref(0)).error == ""
    assert sample(plugin, "kvdev_plugin_prepare_claims_total", result="success") == 1
    errors = "kvdev_plugin_errors_total"
    assert sample(plugin, errors, operation="device_status", reason="forbidden") == 2


def test_a_claim_that_fails_counts_its_reason_and_writes_no_status(short_dir):
    sink = RecordingSink()
    plugin = plugin_on(short_dir, sink)
    assert "uid" in plugin.prepare(ref(0, uid="00000000-0000-4000-8000-000000000bad")).error
    assert "not found" in plugin.prepare(ClaimRef("vms", "nope", ref(0).uid)).error
    assert plugin.prepare(ClaimRef("", "x", "y")).error
    assert sink.applied == []
    errors = "kvdev_plugin_errors_total"
    assert sample(plugin, errors, operation="prepare", reason="uid_mismatch") == 1
    assert sample(plugin, errors, operation="prepare", reason="claim_not_found") == 1
    assert sample(plugin, errors, operation="prepare", reason="invalid") == 1
    assert sample(plugin, "kvdev_plugin_prepare_claims_total", result="error") == 3
    assert sample(plugin, "kvdev_plugin_prepared_claims") == 0


def test_without_a_sink_no_status_is_written(short_dir):
    plugin = plugin_on(short_dir, None)
    assert not plugin.prepare(ref(0)).error
    assert sample(plugin, "kvdev_plugin_errors_total", operation="device_status", reason="x") == 0


def test_two_plugins_do_not_share_counters(short_dir):
    one, two = PluginMetrics(), PluginMetrics()
    one.claim_done("prepare", "u", 0.1, None)
    assert two.registry.get_sample_value("kvdev_plugin_prepared_claims") == 0
    assert one.registry.get_sample_value("kvdev_plugin_prepared_claims") == 1


# ------------------------------------------------------------------ the health self-check


def test_self_check_is_healthy_while_served_and_names_the_socket_once_stopped(short_dir):
    plugin = plugin_on(short_dir, None)
    sockets = Sockets.default(DRIVER, short_dir / "plugin", short_dir / "registry")
    server = PluginServer(plugin, sockets, driver=DRIVER)
    check = SelfCheck(sockets, DRIVER)
    with server:
        assert check.check(30.0) == Verdict(healthy=True, reason="", began=check._last.began)
        assert (
            SelfCheck(sockets, "other.example.com")
            .check(30.0)
            .reason.endswith("GetInfo names 'sriov.example.com'")
        )
    verdict = check.check(30.0)
    assert not verdict.healthy
    assert verdict.reason.startswith(f"{sockets.registration}: GetInfo: UNAVAILABLE")


def test_a_check_that_began_after_a_probe_arrived_answers_it_too(short_dir):
    now = [100.0]
    check = SelfCheck(
        Sockets(short_dir / "dra.sock", short_dir / "reg.sock"), DRIVER, lambda: now[0]
    )
    dials = []

    def dial(budget):
        dials.append(budget)
        return Verdict(healthy=True, reason="", began=now[0])

    check._dial = dial
    check.check(1.0)
    check.check(1.0)  # arrived at the instant the last dial began: its answer is as fresh
    assert len(dials) == 1
    now[0] += 1
    check.check(1.0)  # arrived later: a dial of its own
    assert len(dials) == 2


def test_a_probe_does_not_wait_past_its_budget_for_a_running_check(short_dir):
    check = SelfCheck(Sockets(short_dir / "dra.sock", short_dir / "reg.sock"), DRIVER)
    with check._running:  # a check in flight, stuck
        verdict = check.check(0.01)
    assert verdict.reason == "an earlier check is still running"
    assert not verdict.healthy


def test_concurrent_probes_share_dials_instead_of_piling_up(short_dir):
    """Six probes while a dial hangs: the hung one, then one more that answers all the others."""
    ticks = []
    lock = threading.Lock()

    def clock():
        with lock:
            ticks.append(None)
            return float(len(ticks))

    check = SelfCheck(Sockets(short_dir / "dra.sock", short_dir / "reg.sock"), DRIVER, clock)
    gate, dials = threading.Event(), []

    def dial(budget):
        began = clock()
        dials.append(began)
        assert gate.wait(60), "the test never released the dial"  # a failure guard
        return Verdict(healthy=True, reason="", began=began)

    check._dial = dial
    with ThreadPoolExecutor(6) as pool:
        first = pool.submit(check.check, 60.0)
        assert eventually(lambda: len(dials) == 1, timeout=60)
        rest = [pool.submit(check.check, 60.0) for _ in range(5)]
        # every probe has arrived (1 dial + 6 arrivals)
        assert eventually(lambda: len(ticks) == 7, timeout=60)
        gate.set()
        verdicts = [first.result(), *(r.result() for r in rest)]
    assert all(v.healthy for v in verdicts)
    assert len(dials) == 2  # not six
