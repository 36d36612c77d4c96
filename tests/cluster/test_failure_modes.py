"""The controller when the real control plane misbehaves: the leader SIGKILLed (the other replica
takes the Lease, nothing missed), the API server restarted mid-watch, etcd compacted while the
controller could not watch (410 Gone -> relist), a 409 on an update.

Times are printed as figures, never asserted: the Lease's own fields say who led when."""

import signal
import threading
import time

from clusterlab import SYSTEM, kvdev_host, wait_for
from kubernetes import client

from kvdev.host.controller.index import Kind, parse
from kvdev.host.controller.live import Controller
from kvdev.host.kube.wire import KubeApi

LEASE = "kvdev-host-controller"


def controller(config, tmp_path, identity, *, elect=True):
    """A controller process; without election where the test stops the API server or the
    controller itself for longer than a leader may go without renewing (10 s)."""
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": identity}
    args = ["controller", "--kubeconfig", str(config), "--log-level=debug"]
    args.append("--leader-elect" if elect else "--no-leader-elect")
    return kvdev_host(tmp_path / f"{identity}.log", *args, env=env)


def holder(kube):
    lease = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, SYSTEM)
    return lease.spec.holder_identity, lease.spec.lease_transitions or 0


def test_the_leader_sigkilled_the_other_leads_and_misses_nothing(
    kube, world, controller_config, tmp_path, capsys
):
    _, _, claims = world.running()
    with (
        controller(controller_config, tmp_path, "ctl-a") as a,
        controller(controller_config, tmp_path, "ctl-b") as b,
    ):
        world.stream_with('"generation": 1', "kvdev-vm1")
        leader_id, transitions = wait_for("a holder", lambda: holder(kube)[0] and holder(kube))
        leader, follower = (a, b) if leader_id == "ctl-a" else (b, a)
        assert "leads" not in follower.text()
        killed = time.monotonic()
        leader.stop(signal.SIGKILL)
        world.report_network(claims["devices"], "10.9.9.9/24")  # while nobody leads
        new_id, new_transitions = wait_for(
            "the other replica takes the Lease",
            lambda: (h := holder(kube))[0] != leader_id and h[0] and h,
            guard=120,
        )
        took = time.monotonic() - killed
        assert new_id != leader_id
        assert new_transitions == transitions + 1
        followed = world.stream_with("10.9.9.9/24", "the new leader's write")
        assert followed["metadata"]["generation"] == 2
        assert follower.alive(), follower.text()
    with capsys.disabled():
        print(
            f"\n  leader SIGKILLed -> the other holds the Lease: {took:.1f} s (lease duration 15 s)"
        )


def test_an_api_server_restart_mid_watch_is_survived(
    cluster, world, controller_config, tmp_path, capsys
):
    _, _, claims = world.running()
    with controller(controller_config, tmp_path, "ctl-restart", elect=False) as ctl:
        world.stream_with('"generation": 1', "kvdev-vm1")
        began = time.monotonic()
        cluster.restart("kube-apiserver")
        restarted = time.monotonic() - began
        world.report_network(claims["devices"], "10.7.7.7/24")
        world.stream_with("10.7.7.7/24", "the change after the restart")
        assert ctl.alive(), ctl.text()
    with capsys.disabled():
        print(f"\n  kube-apiserver restarted (ready again) in {restarted:.1f} s")


def test_etcd_compacted_while_the_controller_cannot_watch_gives_410_and_a_relist(
    cluster, world, controller_config, tmp_path
):
    _, _, claims = world.running()
    with controller(controller_config, tmp_path, "ctl-compact", elect=False) as ctl:
        world.stream_with('"generation": 1', "kvdev-vm1")
        ctl.proc.send_signal(signal.SIGSTOP)  # the controller holds its resourceVersions
        try:
            world.report_network(claims["devices"], "10.4.4.4/24")
            cluster.compact()
            # A restarted API server's watch cache starts after the compaction: resuming from
            # the controller's old resourceVersion can only be 410 Gone.
            cluster.restart("kube-apiserver")
        finally:
            ctl.proc.send_signal(signal.SIGCONT)
        followed = world.stream_with("10.4.4.4/24", "the change made while it was stopped")
        assert followed["metadata"]["generation"] == 2
        wait_for(
            "a 410 and a relist in the log",
            lambda: "410" in ctl.text() and "listing again" in ctl.text(),
        )


def test_a_409_on_update_is_retried_from_a_fresh_read(cluster, kube, world):
    """In-process, so the stale read is certain: the ConfigMap changed by someone else after
    the controller's cache saw it."""
    _, _, claims = world.running()
    api = KubeApi.connect(cluster.kubeconfig)
    ctl = Controller(api, watch_seconds=30)
    stop = threading.Event()
    runner = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    runner.start()
    try:
        wait_for("kvdev-vm1 created", lambda: world.configmap() is not None and ctl.idle.is_set())
    finally:
        stop.set()
        runner.join(timeout=60)
    key = (world.ns, "vm1")
    core = client.CoreV1Api(kube)
    core.patch_namespaced_config_map(
        "kvdev-vm1", world.ns, {"metadata": {"annotations": {"someone": "else"}}}
    )
    world.report_network(claims["devices"], "10.3.3.3/24")
    fresh = client.ResourceV1Api(kube).read_namespaced_resource_claim("vm1-devices", world.ns)
    raw = api.get_resource_claim(world.ns, "vm1-devices")
    assert raw["metadata"]["uid"] == fresh.metadata.uid
    ctl.index.upsert(Kind.CLAIM, parse(Kind.CLAIM, raw))  # the cache: new claim, stale ConfigMap
    before = dict(api.calls)
    result = ctl.sync(key)
    assert ctl.stats.conflicts == 1
    assert result.verb.name == "UPDATE"
    spent = {k: v - before.get(k, 0) for k, v in api.calls.items() if v != before.get(k, 0)}
    assert spent == {"update": 2, "get": 1}  # PUT (409), GET, PUT
    cm = world.configmap()
    assert "10.3.3.3/24" in cm.data[world.devices_key]
    assert cm.metadata.annotations["someone"] == "else"  # the other writer's edit is kept
