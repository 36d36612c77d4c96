"""The host's Kubernetes client on the real API server: the client-side rate limit takes its
steps on every request (counted on a clock that moves only when the bucket sleeps, never
timed), the controller's JSON log lines name the VMI they are about, and an unreachable API
server is one short line of ours per back-off step, not urllib3's retry warnings; the Lease
has a client of its own, so a drained bucket of the controller's never holds up a renewal."""

from __future__ import annotations

import json
import socket
from typing import Any

from clusterlab import SYSTEM, apply, kvdev_host, minimal_vmi, wait_for
from controlplane import token_kubeconfig
from kubernetes import client

from kvdev.host import cli
from kvdev.host.commands.common import bucket_from
from kvdev.host.commands.controller import lease_elector
from kvdev.host.kube import client as kubeclient
from kvdev.host.kube.wire import KubeApi
from kvdev.host.ratelimit import TokenBucket


class StepClock:
    """Moves only when the bucket sleeps: the requests themselves take no time on it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_n_requests_at_qps_q_wait_the_buckets_steps(cluster):
    clock = StepClock()
    bucket = TokenBucket(qps=2, burst=3, clock=clock, sleep=clock.sleep)
    api = kubeclient.api_client(cluster.kubeconfig, bucket)
    core = client.CoreV1Api(api)
    names = [core.list_namespace(limit=1).kind for _ in range(9)]
    assert names == ["NamespaceList"] * 9  # every request really answered
    assert bucket.waits == 9 - 3  # the first `burst` at once, then one a step
    assert bucket.waited == 6 * 0.5
    assert clock.now == 3.0


def test_a_watch_takes_a_token_too(cluster):
    clock = StepClock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock, sleep=clock.sleep)
    api = kubeclient.api_client(cluster.kubeconfig, bucket)
    core = client.CoreV1Api(api)
    listed = core.list_namespace()
    response = core.list_namespace(
        watch=True,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=1,
        _preload_content=False,
    )
    response.release_conn()
    assert bucket.waits == 1


def test_the_lease_is_renewed_while_the_controllers_bucket_is_empty(cluster, namespace):
    flags = ["--kubeconfig", str(cluster.kubeconfig), "--kube-api-qps", "0.001"]
    flags += ["--kube-api-burst", "4", "--leader-elect", "--lease-namespace", namespace]
    args = cli.build_parser("controller").parse_args(["controller", *flags])
    controller = KubeApi.connect(args.kubeconfig, bucket_from(args))
    assert controller.bucket is not None
    while controller.bucket.reserve() == 0:  # the lists of a relist storm took every token
        pass
    elector = lease_elector(args, "ctl-a")
    assert elector is not None
    lease = elector.api
    assert lease is not None
    assert lease.bucket is not None
    assert lease.bucket is not controller.bucket
    assert (lease.bucket.qps, lease.bucket.burst) == (0.001, 4)  # the same flags, its own tokens
    assert lease.timeout == 5.0  # half of --renew-deadline's 10 s, as client-go's
    assert elector.try_acquire_or_renew()  # a GET and a create
    assert elector.try_acquire_or_renew()  # a GET and a renewing PUT
    assert lease.bucket.waits == 0
    assert dict(lease.calls) == {"get": 2, "create": 1, "update": 1}
    assert not controller.calls


def json_lines(text: str) -> list[dict[str, Any]]:
    """The complete lines (a process still writing may have half a line at the end)."""
    done = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in done.splitlines() if line.startswith("{")]


def test_the_controllers_json_lines_name_the_vmi_they_are_about(
    kube, controller_config, namespace, tmp_path
):
    (made,) = apply(kube, [minimal_vmi("vm-json", namespace)])
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": "ctl-json"}
    args = ("controller", "--kubeconfig", str(controller_config), "--log-format=json")
    with kvdev_host(tmp_path / "controller.log", *args, env=env) as ctl:

        def created() -> dict[str, Any] | None:
            assert ctl.alive(), ctl.text()
            for line in json_lines(ctl.text()):
                if "created ConfigMap kvdev-vm-json" in line["msg"]:
                    return line
            return None

        line = wait_for("the controller's created line", created)
    assert (line["kind"], line["namespace"], line["name"]) == (
        "VirtualMachineInstance",
        namespace,
        "vm-json",
    )
    assert line["uid"] == made.metadata.uid
    assert line["component"] == "kvdev-host-controller"
    assert line["level"] == "info"
    assert line["ts"].endswith("Z")
    every = ctl.text().splitlines()
    assert every, "no log at all"
    assert all(json.loads(raw)["component"] == "kvdev-host-controller" for raw in every)


def test_an_unreachable_api_server_is_one_short_line_per_back_off_step(cluster, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The cluster's CA and a token, but a port nothing listens on: connections refused.
    server = f"https://127.0.0.1:{port}"
    config = token_kubeconfig(tmp_path / "kc", server, cluster.pki / "ca.crt", "unused")
    args = ("controller", "--kubeconfig", str(config), "--log-format=json", "--no-leader-elect")
    with kvdev_host(tmp_path / "controller.log", *args) as ctl:

        def backed_off() -> list[dict[str, Any]]:
            assert ctl.alive(), ctl.text()
            steps = [line for line in json_lines(ctl.text()) if "again in" in line["msg"]]
            kinds = {line["msg"].split(":")[0] for line in steps}
            return steps if len(kinds) == 5 and len(steps) >= 10 else []

        steps = wait_for("two back-off steps of each watched kind", backed_off)
    text = ctl.text()
    assert "Retrying (" not in text
    assert "object at 0x" not in text
    said = f"API server {server} unreachable: connection refused (again in"
    for line in steps:
        assert said in line["msg"], line["msg"]
        assert line["level"] == "warning"
        assert len(line["msg"]) < 200  # one short line
    # Nothing else is logged: one line of ours per step of each reflector.
    assert len(json_lines(text)) == len(text.splitlines())
