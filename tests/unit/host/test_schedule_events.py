"""Event mode of ``kvdev-host schedule``: queueing hints retry only the pods an event can help.

The hint must never miss a pod whose answer could change: random clusters and random event
streams (slices added, changed and removed, pods added and deleted, claims deallocated,
classes and nodes changed) replayed with and without hints give the same placements, and
never more attempts with hints.
"""

import json
import random

import pytest
import yaml
from test_schedule_fakes import (
    GPU,
    NUMA,
    by_name,
    claim,
    claim_spec,
    device_class,
    from_template,
    node,
    node_slice,
    obj,
    pod,
    template,
)

from kvdev.host import cli
from kvdev.host.scheduling import ClusterEvent, replay
from kvdev.host.scheduling.queueinghints import pinned_driver

NIC = "nic.example.com"


def _gpus(n, start=0):
    return [{"name": f"gpu-{i}", "attributes": {NUMA: {"int": i % 2}}} for i in range(start, n)]


def _cluster(nodes=2, gpus=2, pods=6):
    objs = [device_class(), device_class(NIC, NIC), template()]
    for n in range(nodes):
        objs += [node(f"n{n}"), node_slice(f"n{n}", _gpus(gpus))]
    objs += [pod(f"p{i}", [from_template()]) for i in range(pods)]
    return objs


def _outcome(run):
    return (
        sorted((p.pod.metadata.name, p.node) for p in run.result.placed),
        sorted(u.pod.metadata.name for u in run.result.unplaced),
    )


def test_a_slice_of_another_driver_wakes_nobody_and_new_gpus_wake_both():
    events = [
        ClusterEvent("ADDED", node_slice("n0", [{"name": "nic-0"}], driver=NIC)),
        ClusterEvent("MODIFIED", node_slice("n1", _gpus(4))),
    ]
    hinted = replay(_cluster(), events, hints=True)
    naive = replay(_cluster(), events, hints=False)
    assert _outcome(hinted) == _outcome(naive)
    assert len(hinted.result.placed) == 6
    assert hinted.retried == [0, 2]
    assert naive.retried == [2, 2]
    assert hinted.total_attempts == 8 < naive.total_attempts == 10
    assert hinted.placed_by == [0, 2]


def test_a_deleted_pod_frees_its_gpu_and_its_template_claim():
    gone = pod("p0", [from_template()])
    run = replay(_cluster(pods=5), [ClusterEvent("DELETED", gone)])
    placed = {p.pod.metadata.name for p in run.result.placed}
    assert placed == {"p1", "p2", "p3", "p4"}
    assert not run.result.unplaced
    assert run.retried == [1]


def test_a_deallocated_claim_gives_its_devices_back():
    one = claim_spec()
    objs = [device_class(), node("n0"), node_slice("n0", _gpus(1)), claim("held", spec=one)]
    objs += [pod("first", [by_name("gpu", "held")]), pod("second", [from_template()]), template()]
    first = replay(objs, [])
    assert [p.pod.metadata.name for p in first.result.placed] == ["first"]
    held = next(c for c in first.result.claims if c.metadata.name == "held")
    freed = held.model_copy(update={"status": None})
    run = replay(objs, [ClusterEvent("MODIFIED", freed)])
    assert sorted(p.pod.metadata.name for p in run.result.placed) == ["first", "second"]


def test_a_pod_added_by_an_event_is_tried_at_once():
    run = replay(_cluster(pods=1), [ClusterEvent("ADDED", pod("late", [from_template()]))])
    assert [p.pod.metadata.name for p in run.result.placed] == ["p0", "late"]
    assert run.attempts["ns/late"] == 1


def test_an_event_kvdev_cannot_replay_is_refused():
    with pytest.raises(ValueError, match=r"event 0: DELETED Node n0"):
        replay(_cluster(), [ClusterEvent("DELETED", node("n0"))])
    with pytest.raises(ValueError, match="type must be one of"):
        replay(_cluster(), [ClusterEvent("BOOKMARK", node("n0"))])


@pytest.mark.parametrize(
    ("expression", "driver"),
    [
        ('device.driver == "a.example.com"', "a.example.com"),
        ("device.driver == 'a.example.com' && device.attributes['x'].y", "a.example.com"),
        ('device.driver == "a.example.com" || true', None),
        ('device.driver == "a" ? true : false', None),
        ('device.attributes["a"].x == 1', None),
    ],
)
def test_a_class_pins_a_driver_only_when_nothing_could_widen_it(expression, driver):
    assert pinned_driver(expression) == driver


def _random_run(seed):
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    objs, nodes, named, pods = _random_cluster(rng)
    return objs, _random_events(rng, nodes, named, pods)


def _random_cluster(rng):
    objs = [device_class(), device_class(NIC, NIC), template()]
    objs.append(template("nic", spec=claim_spec(class_name=NIC)))
    nodes = rng.randint(1, 3)
    for n in range(nodes):
        objs.append(node(f"n{n}", allocatable={"cpu": str(rng.randint(1, 4))}))
        if rng.random() < 0.8:
            objs.append(node_slice(f"n{n}", _gpus(rng.randint(0, 3))))
    named = []
    for i in range(rng.randint(0, 2)):
        objs.append(claim(f"named-{i}"))
        named.append(f"named-{i}")
    pods = []
    for p in range(rng.randint(2, 8)):
        claims = [by_name("c", rng.choice(named))] if named and rng.random() < 0.3 else []
        if not claims:
            claims = [from_template("c", rng.choice(["one-gpu", "one-gpu", "nic"]))]
        pods.append(pod(f"p{p}", claims, requests={"cpu": "1"}))
    objs += pods
    return objs, nodes, named, pods


def _random_events(rng, nodes, named, pods):
    events = []
    for e in range(rng.randint(1, 8)):
        n = rng.randrange(nodes)
        kind = rng.choice(["slice", "slice", "nic", "delete-slice", "pod", "delete-pod", "free"])
        if kind == "slice":
            events.append(ClusterEvent("MODIFIED", node_slice(f"n{n}", _gpus(rng.randint(0, 4)))))
        elif kind == "nic":
            nics = [{"name": f"nic-{i}"} for i in range(rng.randint(1, 2))]
            events.append(ClusterEvent("ADDED", node_slice(f"n{n}", nics, driver=NIC)))
        elif kind == "delete-slice":
            events.append(ClusterEvent("DELETED", node_slice(f"n{n}", [])))
        elif kind == "pod":
            late = pod(f"late-{e}", [from_template()], requests={"cpu": "1"})
            events.append(ClusterEvent("ADDED", late))
            pods.append(late)
        elif kind == "delete-pod":
            events.append(ClusterEvent("DELETED", rng.choice(pods)))
        elif named:
            events.append(ClusterEvent("MODIFIED", claim(rng.choice(named))))
    return events


@pytest.mark.parametrize("seed", range(150))
def test_hints_never_change_the_placements(seed):
    objs, events = _random_run(seed)
    hinted = replay(objs, events, hints=True)
    naive = replay(objs, events, hints=False)
    assert _outcome(hinted) == _outcome(naive)
    assert hinted.total_attempts <= naive.total_attempts
    uncached = replay(objs, events, hints=False, selector_cache=False, filter_cache=False)
    assert _outcome(uncached) == _outcome(naive)
    assert [c.to_json_dict() for c in hinted.result.claims] == [
        c.to_json_dict() for c in naive.result.claims
    ]


def test_claims_and_classes_events_change_what_is_known():
    objs = [node("n0"), node_slice("n0", _gpus(1)), template()]
    objs.append(pod("p", [from_template()]))
    run = replay(objs, [ClusterEvent("ADDED", device_class())])
    assert [p.pod.metadata.name for p in run.result.placed] == ["p"]
    gone = obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU},
            "spec": {},
        }
    )
    run = replay([device_class(), *objs], [ClusterEvent("DELETED", gone)])
    assert [p.pod.metadata.name for p in run.result.placed] == ["p"]


def _write(tmp_path, objects, events, *, as_json=True):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([o.to_json_dict() for o in objects]), encoding="utf-8")
    stream = tmp_path / ("events.json" if as_json else "events.yaml")
    docs = [{"type": e.type, "object": e.object.to_json_dict()} for e in events]
    if as_json:
        stream.write_text("".join(json.dumps(d, indent=2) + "\n" for d in docs), encoding="utf-8")
    else:
        stream.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return cluster, stream


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "yaml"])
def test_the_command_replays_events_and_compares(tmp_path, capsys, as_json):
    events = [
        ClusterEvent("ADDED", node_slice("n0", [{"name": "nic-0"}], driver=NIC)),
        ClusterEvent("MODIFIED", node_slice("n1", _gpus(4))),
    ]
    cluster, stream = _write(tmp_path, _cluster(), events, as_json=as_json)
    args = ["schedule", "-f", str(cluster), "--events", str(stream), "-o", "json", "--compare"]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    pods = [o for o in json.loads(out)["items"] if o["kind"] == "Pod"]
    assert len(pods) == 6
    assert "queueing hints: 2 events, 2 retries, 8 attempts" in err
    assert "no hints (every pod on every event): 2 events, 4 retries, 10 attempts" in err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"type": "BOOKMARK", "object": {}}', "type must be one of"),
        ('{"type": "ADDED"}', "a Kubernetes object is needed"),
        ('{"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Pod"}}', "metadata"),
        ("a: &x [1]\nb: *x\n", "aliases are not allowed"),
        (
            json.dumps(
                {
                    "type": "DELETED",
                    "object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}},
                }
            ),
            "not an event kvdev-host schedule can replay",
        ),
    ],
    ids=["type", "no-object", "invalid-object", "alias", "unsupported"],
)
def test_the_command_refuses_a_bad_event_stream(tmp_path, capsys, text, words):
    cluster, _ = _write(tmp_path, _cluster(), [])
    stream = tmp_path / "bad.txt"
    stream.write_text(text, encoding="utf-8")
    assert cli.main(["schedule", "-f", str(cluster), "--events", str(stream)]) == 2
    assert words in capsys.readouterr().err
