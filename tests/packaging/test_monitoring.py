"""The chart's monitoring: PrometheusRule, Grafana dashboard, relay scrape, each on with a value.

The alerts are the rendered chart's (``helm template``, never a second copy): their spec is
written next to ``monitoring/alerts-test.yaml`` and given to ``promtool check rules`` and
``promtool test rules`` (promtool built from tests/promtool, its own pinned Go module, cached
like helm). Every metric name the rules and the dashboard's queries use must be one the code's
registries export (the controller's, the plugin's, the relay's), read from the registries
themselves; each alert has its runbook page in docs/runbooks/.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from test_helm_chart import helm, template  # noqa: F401 - the fixture and the helper

from kvdev.host.controller.guestwatch import Counts
from kvdev.host.controller.metrics import Metrics, State
from kvdev.host.plugin.metrics import PluginMetrics
from kvdev.host.relay.metrics import RelayMetrics

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).with_name("monitoring")
RUNBOOKS = REPO / "docs" / "runbooks"
NAMESPACE = "kvdev-system"
ALERTS = {
    "KvdevControllerDown",
    "KvdevControllerNotLeading",
    "KvdevConfigMapWritesFailing",
    "KvdevRelayNotPublishing",
    "KvdevGuestNICsDiffer",
    "KvdevGuestNICsUnreported",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
OPERATORS = {"and", "or", "unless", "bool", "offset", "atan2"}


@pytest.fixture(scope="session")
def promtool():
    subprocess.run([REPO / "tests" / "promtool" / "build.sh"], check=True)
    return REPO / "build" / "promtool" / "bin" / "promtool"


def registry_names(registry: CollectorRegistry) -> set[str]:
    """Every series name a registry exposes, by its families' types (labelled or not)."""
    names = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def exported() -> set[str]:
    controller = Metrics()
    controller.watch_state(lambda: State(watched=[], vmis=0, claims=0, leader=False))
    controller.watch_guests(lambda: Counts({}, {}, {}, 0.0))
    return (
        registry_names(controller.registry)
        | registry_names(PluginMetrics().registry)
        | registry_names(RelayMetrics().registry)
    )


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects, read conservatively.

    Strings, label matchers and ranges are dropped; then every identifier that is not a
    function (followed by ``(``), a keyword or operator, or a label of a grouping
    (``by (...)``, ``on (...)``) counts as a metric: an unknown construct yields a name the
    check does not know, never nothing. ``label_values(metric, label)``: only the metric.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"label_values\(\s*([^,()]*),[^)]*\)", r"(\1)", text)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = re.sub(
        rf"\b({'|'.join(KEYWORDS)})\s*\([^()]*\)",
        " ",
        text,
    )
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word in KEYWORDS | OPERATORS or re.fullmatch(r"(?i)inf|nan", word):
            continue
        names.add(word)
    return names


def rendered(helm, *sets):  # noqa: F811 - the fixture
    done, docs = template(helm, NAMESPACE, *sets)
    assert done.returncode == 0, done.stderr
    return docs


def one(docs, kind, name):
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]


def rules_of(helm):  # noqa: F811 - the fixture
    (rule,) = [
        d
        for d in rendered(helm, "metrics.prometheusRule.enabled=true")
        if d["kind"] == "PrometheusRule"
    ]
    return rule


def dashboard_of(helm):  # noqa: F811 - the fixture
    (cm,) = [
        d
        for d in rendered(helm, "metrics.grafanaDashboard.enabled=true")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    ]
    return cm


def expressions(dashboard: dict) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    found += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return found


def test_the_metric_name_reader_finds_each_selected_name_and_nothing_else():
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{namespace="x",le=~"1|2"}'
        "[5m]))) / on (pod) group_left b_total offset 5m and time() - max by (node) "
        '(max_over_time(c{x="y"}[1h])) > 300 or absent(d) unless e > bool inf'
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c", "d", "e"}
    assert metric_names("label_values(kvdev_controller_leader, namespace)") == {
        "kvdev_controller_leader"
    }
    assert metric_names("sum(nonsense_metric) by (le)") == {"nonsense_metric"}


def test_the_registries_name_what_they_export():
    names = exported()
    assert {
        "kvdev_controller_configmap_writes_total",
        "kvdev_controller_event_to_write_seconds_bucket",
        "kvdev_controller_leader",
        "kvdev_controller_queue_depth",
        "kvdev_plugin_errors_total",
        "kvdev_relay_last_complete_pass_timestamp_seconds",
        "kvdev_relay_passes_total",
    } <= names
    assert "kvdev_controller_leader_total" not in names


@pytest.mark.parametrize(
    ("value", "kind", "name"),
    [
        ("metrics.prometheusRule.enabled", "PrometheusRule", "kvdev-alerts"),
        ("metrics.grafanaDashboard.enabled", "ConfigMap", "kvdev-dashboard"),
        ("metrics.serviceMonitor.enabled", "ServiceMonitor", "kvdev-host-relay"),
    ],
)
def test_each_monitoring_object_is_off_by_default_and_on_with_its_value(helm, value, kind, name):  # noqa: F811
    def named(docs):
        return [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]

    assert named(rendered(helm)) == []
    (doc,) = named(rendered(helm, f"{value}=true"))
    assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "kvdev"


def test_the_relay_serves_metrics_and_its_servicemonitor_labels_the_node(helm):  # noqa: F811
    docs = rendered(helm, "metrics.serviceMonitor.enabled=true", "relay.metricsPort=9102")
    (relay,) = [
        d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("relay")
    ]
    (container,) = relay["spec"]["template"]["spec"]["containers"]
    assert "--metrics-address=:9102" in container["args"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9102, "protocol": "TCP"}]
    (service,) = [
        d
        for d in docs
        if d["kind"] == "Service" and d["metadata"]["name"] == "kvdev-host-relay-metrics"
    ]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    (monitor,) = [
        d
        for d in docs
        if d["kind"] == "ServiceMonitor" and d["metadata"]["name"] == "kvdev-host-relay"
    ]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    ]


def test_the_rendered_rules_pass_promtool_check_and_every_alert_fires_and_resolves(
    helm,  # noqa: F811
    promtool,
    tmp_path,
):
    spec = rules_of(helm)["spec"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(HERE / "alerts-test.yaml", tmp_path)

    def promtool_in(*args):
        return subprocess.run(
            [promtool, *args], cwd=tmp_path, capture_output=True, text=True, check=False
        )

    check = promtool_in("check", "rules", "rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in check.stdout
    run = promtool_in("test", "rules", "alerts-test.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    # each alert is seen firing and, later, resolved
    cases = yaml.safe_load((HERE / "alerts-test.yaml").read_text())["tests"]
    fired, resolved = {}, {}
    for case in cases:
        for check_ in case["alert_rule_test"]:
            when = int(check_["eval_time"].removesuffix("m"))
            table = fired if check_["exp_alerts"] else resolved
            table.setdefault(check_["alertname"], []).append(when)
    assert set(fired) == ALERTS
    for alert, times in fired.items():
        assert any(t > min(times) for t in resolved.get(alert, [])), alert


def test_a_changed_threshold_reaches_the_rendered_rule(helm):  # noqa: F811
    docs = rendered(
        helm, "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.guestDiffersSeconds=60"
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    (differ,) = [
        r for r in rule["spec"]["groups"][0]["rules"] if r["alert"] == "KvdevGuestNICsDiffer"
    ]
    assert differ["expr"].endswith("> 60")


def test_every_alert_uses_exported_metrics_and_links_its_runbook(helm):  # noqa: F811
    rules = rules_of(helm)["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == ALERTS
    known = exported()
    toctree = (RUNBOOKS / "index.md").read_text()
    assert "runbooks/index" in (REPO / "docs" / "index.md").read_text()
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= known, (rule["alert"], names - known)
        assert f'namespace="{NAMESPACE}"' in rule["expr"]
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"/docs/runbooks/{rule['alert']}.md")
        page = (RUNBOOKS / f"{rule['alert']}.md").read_text()
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in page, (rule["alert"], section)
        assert f"\n{rule['alert']}\n" in toctree


def test_the_dashboard_is_valid_json_using_only_exported_metrics(helm):  # noqa: F811
    cm = dashboard_of(helm)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = cm["data"].values()
    dashboard = json.loads(text)
    assert dashboard["uid"] == "kvdev-overview"
    known = exported()
    used = set()
    for expr in expressions(dashboard):
        names = metric_names(expr)
        assert names, expr
        assert names <= known, (expr, names - known)
        used |= names
    # the panels the monitoring guide promises
    for needed in (
        "kvdev_controller_configmap_renders_total",
        "kvdev_controller_event_to_write_seconds_bucket",
        "kvdev_controller_configmap_writes_total",
        "kvdev_controller_queue_depth",
        "kvdev_relay_records",
        "kvdev_controller_guest_nics",
    ):
        assert needed in used, needed
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
