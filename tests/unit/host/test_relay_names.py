"""Relay record names bound to their node: the names, and the loop's trust.

A record's name carries its node whole (``kvdev-relay-<claimUID>.<node>``) so that the chart's
admission policy can check it against the node in the writer's token: distinct (node, claim)
pairs never share a name, the name and the node label are what the CEL expects of the token's
node (the chart's literals: ``test_chart_contract``), and the loop trusts only its own node's
records, reporting (never replacing or deleting) a record of another node that holds its name.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apidouble import ApiDouble
from kvdev.host import contract
from kvdev.host.contract import record_name
from kvdev.host.kube.client import api_client
from kvdev.host.kube.wire import KubeApi
from kvdev.host.publish import relayed
from kvdev.host.publish.relayed import DriverFile, read_record, records
from kvdev.host.relay.finder import Found
from kvdev.host.relay.live import Relay

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "packaging" / "helm" / "kvdev"
HELM = REPO / "build" / "helm" / "bin" / "helm"
NS = "kvdev-system"
DRIVER = "sriov.example.com"
# A Node's name, as the API server validates it (a DNS-1123 subdomain).
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

_short = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
_long = st.from_regex(r"[a-z0-9][-a-z0-9]{30,61}[a-z0-9]", fullmatch=True)
_parts = st.lists(st.one_of(_short, _long), min_size=1, max_size=8)
nodes = _parts.map(".".join).filter(lambda n: len(n) <= 253)
fitting = nodes.filter(lambda n: len(n) <= contract.NODE_NAME_MAX)
too_long = (
    st.lists(_long, min_size=4, max_size=7)
    .map(".".join)
    .map(lambda n: n[:253].rstrip("-."))
    .filter(lambda n: len(n) > contract.NODE_NAME_MAX)
)
uids = st.uuids().map(str)
# Long names are slow to draw on a busy machine; the checks themselves are cheap.
drawn = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def file_of(uid: str) -> DriverFile:
    return DriverFile(uid, "nic-1", DRIVER, b"{}", "/etc/cdi/x.json")


def body(node: str, uid: str) -> dict:
    (made,), problems = records(node, NS, [file_of(uid)])
    assert problems == []
    return made


@drawn
@given(nodes, uids, nodes, uids)
def test_distinct_node_and_claim_pairs_never_share_a_name(node, uid, other_node, other_uid):
    if (node, uid) != (other_node, other_uid):
        assert record_name(node, uid) != record_name(other_node, other_uid)
    # The name gives its pair back: the claim UID holds no dot, the node is the rest.
    got_uid, dot, got_node = (
        record_name(node, uid).removeprefix(contract.RECORD_PREFIX).partition(".")
    )
    assert (got_uid, dot, got_node) == (uid, ".", node)


@drawn
@given(fitting, uids)
def test_a_fitting_node_has_a_valid_name_and_label_as_the_policy_computes_them(node, uid):
    made = body(node, uid)
    name, labels = made["metadata"]["name"], made["metadata"]["labels"]
    assert len(name) <= contract.NAME_MAX
    assert SUBDOMAIN.fullmatch(name)
    # What the chart's CEL requires of a record written with node `node`'s token:
    assert re.fullmatch(contract.UID_PATTERN.strip("^$"), labels[contract.CLAIM_UID_LABEL])
    assert name == contract.RECORD_PREFIX + labels[contract.CLAIM_UID_LABEL] + "." + node
    cel_label = node if len(node) <= 63 else re.match(contract.LABEL_PREFIX_PATTERN, node[:63])[0]
    assert labels[contract.NODE_LABEL] == cel_label
    assert len(cel_label) <= contract.LABEL_MAX
    assert LABEL_VALUE.fullmatch(cel_label)
    assert node.startswith(cel_label)
    record = read_record(made)
    assert record is not None
    assert (record.node, record.claim_uid) == (node, uid)


@drawn
@given(too_long, uids)
def test_a_node_whose_name_does_not_fit_has_no_records_and_says_why(node, uid):
    bodies, (problem,) = records(node, NS, [file_of(uid)])
    assert bodies == []
    assert f"over {contract.NODE_NAME_MAX}" in str(problem)


def test_the_node_bound_is_what_a_name_of_253_leaves():
    uid = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
    longest = ("a" * 60 + ".") * 3 + "a" * 21
    assert len(longest) == contract.NODE_NAME_MAX == 204
    assert len(record_name(longest, uid)) == 253
    assert relayed.node_problem(longest) is None
    assert relayed.node_problem(longest + "a") is not None


def test_a_record_whose_name_label_or_annotation_disagree_is_not_read():
    uid = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
    good = body("node-a", uid)
    assert read_record(good) is not None
    as_b = yaml.safe_load(yaml.safe_dump(good))
    as_b["metadata"]["annotations"][contract.NODE_ANNOTATION] = "node-b"  # name says node-a
    relabelled = yaml.safe_load(yaml.safe_dump(good))
    relabelled["metadata"]["labels"][contract.NODE_LABEL] = "node-b"
    upper = yaml.safe_load(yaml.safe_dump(good))
    upper["metadata"]["labels"][contract.CLAIM_UID_LABEL] = uid.upper()
    legacy = yaml.safe_load(yaml.safe_dump(good))
    legacy["metadata"]["name"] = f"kvdev-relay-{uid}-0123456789"
    for bad in (as_b, relabelled, upper, legacy):
        assert read_record(bad) is None


# --------------------------------------------------------------------------- the loop's trust


def test_the_loop_trusts_only_its_nodes_records_and_reports_a_taken_name(tmp_path, caplog):
    """Listed under node-a's label: its own record, its record of the old name form, a record
    annotated node-b holding the name of node-a's claim, and another of node-b. The pass
    replaces none of node-b's, deletes none of them, deletes the old form, reports the taken
    name naming both nodes, and still publishes node-a's other claim."""
    taken_uid, free_uid, own_uid = (
        "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11",
        "0b6f4c3e-91d4-4d2a-8f55-6a7e2c1d9b30",
        "3f1e2d4c-5b6a-4978-8a9b-0c1d2e3f4a5b",
    )
    api = ApiDouble()
    api.start()
    try:
        forged = body("node-a", taken_uid)
        forged["metadata"]["annotations"][contract.NODE_ANNOTATION] = "node-b"
        forged["data"] = {f"nic-1.{DRIVER}-metadata.json": '{"forged": true}'}
        stray = body("node-b", free_uid)
        stray["metadata"]["labels"][contract.NODE_LABEL] = "node-a"
        legacy = body("node-a", own_uid)
        legacy["metadata"]["name"] = f"kvdev-relay-{own_uid}-0123456789"
        for o in (forged, stray, legacy):
            api.put(o)
        config = tmp_path / "kubeconfig"
        server = {"server": api.url}
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "d", "cluster": server}],
                    "users": [{"name": "d", "user": {"token": "t"}}],
                    "contexts": [{"name": "d", "context": {"cluster": "d", "user": "d"}}],
                    "current-context": "d",
                }
            )
        )
        files = [file_of(taken_uid), file_of(free_uid), file_of(own_uid)]
        found = Found(files, claims={taken_uid, free_uid, own_uid})
        relay = Relay(KubeApi(api_client(config)), "node-a", NS, [], finder=lambda *_: found)
        with caplog.at_level(logging.WARNING, "kvdev.host.relay"):
            done = relay.sync()
        assert (done.created, done.taken, done.legacy, done.failed) == (2, 1, 1, 0)
        assert api.get("v1", "ConfigMap", NS, forged["metadata"]["name"])["data"] == forged["data"]
        assert api.get("v1", "ConfigMap", NS, stray["metadata"]["name"]) is not None
        assert api.get("v1", "ConfigMap", NS, legacy["metadata"]["name"]) is None
        for uid in (free_uid, own_uid):
            assert read_record(api.get("v1", "ConfigMap", NS, record_name("node-a", uid)))
        (taken,) = [r.getMessage() for r in caplog.records if "is taken by" in r.getMessage()]
        assert "'node-a'" in taken
        assert "'node-b'" in taken
        assert record_name("node-a", taken_uid) in taken
        again = relay.sync()  # the next pass: nothing written, the taken name still skipped
        assert (again.created, again.updated, again.taken, again.failed) == (0, 0, 1, 0)
    finally:
        api.stop()
