"""The relay's metrics: what each pass moves, and the registry served over HTTP.

The loop runs against a small in-memory API (a list, creates that succeed or fail); the
metrics are read back from the registry, and once scraped from ``/metrics``.
"""

from __future__ import annotations

import threading
import urllib.request

from test_relay import node  # noqa: F401 - the fixture: one good spec and its file

from kvdev.errors import RetryableError
from kvdev.host.plugin.metrics import Address, MetricsServer
from kvdev.host.relay.live import Pass, Relay
from kvdev.host.relay.metrics import RelayMetrics


class Api:
    def __init__(self) -> None:
        self.failing = False

    def list_configmaps(self, *_args: object) -> list[dict[str, object]]:
        return []

    def create_configmap(self, _namespace: str, body: dict[str, object]) -> dict[str, object]:
        if self.failing:
            raise RetryableError("the API server answered 503")
        return dict(body)


def value(metrics: RelayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_complete_pass_moves_the_timestamp_and_a_failed_one_does_not(node):  # noqa: F811
    cdi, files = node
    api, metrics = Api(), RelayMetrics()
    relay = Relay(api, "node-a", "kvdev-system", [cdi], [files])
    assert value(metrics, "kvdev_relay_passes_total", outcome="failed") == 0
    assert value(metrics, "kvdev_relay_last_complete_pass_timestamp_seconds") == 0
    api.failing = True
    metrics.observe(relay.sync())
    assert value(metrics, "kvdev_relay_passes_total", outcome="failed") == 1
    assert value(metrics, "kvdev_relay_passes_total", outcome="complete") == 0
    assert value(metrics, "kvdev_relay_last_complete_pass_timestamp_seconds") == 0
    api.failing = False
    metrics.observe(relay.sync())
    assert value(metrics, "kvdev_relay_passes_total", outcome="complete") == 1
    assert value(metrics, "kvdev_relay_records") == 1
    assert value(metrics, "kvdev_relay_last_complete_pass_timestamp_seconds") > 0  # type: ignore[operator]


def test_a_pass_that_could_not_list_is_failed_and_keeps_the_last_count() -> None:
    metrics = RelayMetrics()
    metrics.observe(Pass(unchanged=3, records=3))
    metrics.observe(Pass(failed=1))  # the list failed: nothing is known
    assert value(metrics, "kvdev_relay_records") == 3
    assert value(metrics, "kvdev_relay_passes_total", outcome="failed") == 1


def test_the_loop_hands_each_pass_to_the_metrics_served_on_metrics(node):  # noqa: F811
    cdi, files = node
    metrics, stop = RelayMetrics(), threading.Event()
    passes: list[Pass] = []

    def observe(done: Pass) -> None:
        metrics.observe(done)
        passes.append(done)
        if len(passes) == 2:
            stop.set()

    Relay(Api(), "node-a", "kvdev-system", [cdi], [files]).run(stop, 0.0, observe)
    server = MetricsServer(metrics.registry, Address("127.0.0.1", 0))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.stop()
    assert 'kvdev_relay_passes_total{outcome="complete"} 2.0' in text
    assert "kvdev_relay_records 1.0" in text


def test_a_bad_metrics_address_is_a_usage_error_naming_the_flag(capsys, tmp_path):
    from kvdev.host.cli import main  # noqa: PLC0415

    code = main(
        [
            "relay",
            "--node-name=node-a",
            f"--cdi-dir={tmp_path}",
            "--metrics-address=nonsense",
            f"--kubeconfig={tmp_path / 'none'}",
        ]
    )
    assert code == 2
    assert "--metrics-address 'nonsense'" in capsys.readouterr().err
