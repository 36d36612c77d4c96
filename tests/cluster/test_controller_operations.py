"""The live controller as an operator sees it, on the real control plane: ``/readyz`` 503 until
every cache is synced, ``/healthz``, ``/leader`` with two replicas on one Lease, ``/metrics``
moving as a VMI and its claims are created and changed, and the core/v1 Events it records on
the VMI (a repeated condition bumps ``count``, it adds no Event).

The controller runs as a process with the shipped ServiceAccount's token (its RBAC: Events
included) and ``--http-address 127.0.0.1:0`` (the port it logs). Every wait polls for a
condition with the generous guard of ``clusterlab.wait_for``; nothing is timed."""

import contextlib
import re
import time
import urllib.error
import urllib.request
import uuid

import pytest
from clusterlab import SYSTEM, kvdev_host, refusals, wait_for
from controlplane import token_kubeconfig
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

NOT_RECORDED = re.compile(r"recorder: ([^/\s]+)/\S+: Event \S+ not recorded: (.*)$", re.MULTILINE)
SERVING = re.compile(r"serving /healthz /readyz /leader /metrics on (http://127\.0\.0\.1:\d+)")
ROLE = "kvdev-host-controller"  # the shipped ClusterRole


def served(config, tmp_path, identity, *extra, env=None):
    """A controller process serving its endpoints on a free loopback port."""
    args = ["controller", "--kubeconfig", str(config), "--http-address=127.0.0.1:0", *extra]
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": identity, **(env or {})}
    return kvdev_host(tmp_path / f"{identity}.log", *args, env=env)


def base_url(ctl):
    def found():
        assert ctl.alive(), ctl.text()
        match = SERVING.search(ctl.text())
        return match.group(1) if match else None

    return wait_for("the controller's address in its log", found)


def get(url, path):
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=30) as answer:  # noqa: S310 - loopback
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(url):
    """{(sample name, sorted labels): value} of /metrics, parsed by prometheus_client."""
    status, text = get(url, "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics, name, **labels):
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def writes(metrics, result):
    return value(metrics, "kvdev_controller_configmap_writes_total", result=result)


def vmi_events(core, namespace, uid):
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}")
    return found.items


def recorded_events(core, namespace, uid):
    """The VMI's Events once each reason is there and HintRefused was counted twice; checked."""

    def recorded():
        events = vmi_events(core, namespace, uid)
        reasons = {e.reason for e in events}
        refused = [e for e in events if e.reason == "HintRefused"]
        wanted = {"ClaimPending", "ConfigMapCreated", "ConfigMapUpdated", "HintRefused"}
        return wanted <= reasons and refused and refused[0].count >= 2 and events

    events = wait_for("the VMI's Events, HintRefused counted twice", recorded)
    (refused,) = [e for e in events if e.reason == "HintRefused"]  # one Event, counted up
    assert refused.type == "Warning"
    assert "macAddress" in refused.message
    assert refused.source.component == "kvdev-host-controller"
    assert refused.first_timestamp <= refused.last_timestamp
    (created,) = [e for e in events if e.reason == "ConfigMapCreated"]
    assert (created.type, created.count) == ("Normal", 1)
    assert "kvdev-vm1" in created.message
    assert all(e.type == "Normal" for e in events if e.reason == "ClaimPending")
    # One Event per (reason, message): repeats were patches, not new Events.
    assert len({(e.reason, e.message) for e in events}) == len(events)
    return events


def recorded_anew_once_deleted(world, core, uid, events, claims):
    """The Event gone (the API server's --event-ttl, or deleted): the next PATCH is a 404, and
    the recorder creates it anew, count 1."""
    (old,) = [e for e in events if e.reason == "HintRefused"]
    core.delete_namespaced_event(old.metadata.name, world.ns)
    world.report_network(claims["devices"], "10.6.6.7/24")
    world.stream_with("10.6.6.7/24", "the claim's second network data")

    def anew():
        found = [e for e in vmi_events(core, world.ns, uid) if e.reason == "HintRefused"]
        return found and found[0].metadata.name != old.metadata.name and found

    (again,) = wait_for("HintRefused recorded anew", anew)
    assert again.count == 1


def only_elsewhere_failed(metrics, log, namespace):
    """No Event failed but in namespaces being deleted or gone (earlier tests'), never in
    ``namespace``.

    The API server refuses new Events there (403: "being terminated" while it is deleted,
    "namespaces ... not found" once it is gone); the controller counts each one it could not
    record and, at debug level, logs it.
    """
    failed = NOT_RECORDED.findall(log)
    assert value(metrics, "kvdev_controller_events_total", result="failed") == len(failed)
    assert namespace not in {where for where, _ in failed}, failed
    assert all(
        "403 Forbidden" in why and ("being terminated" in why or f'"{where}" not found' in why)
        for where, why in failed
    ), failed


def test_metrics_and_events_follow_a_vmi(world, controller_config, tmp_path, capsys):
    debug = ("--no-leader-elect", "--log-level", "debug")  # every Event not recorded is logged
    with served(controller_config, tmp_path, "ctl-ops", *debug) as ctl:
        url = base_url(ctl)
        wait_for("/readyz 200", lambda: get(url, "/readyz") == (200, "ok\n"))
        assert get(url, "/healthz") == (200, "ok\n")
        assert get(url, "/leader") == (200, "leader\n")  # no election: it writes
        assert get(url, "/nothing")[0] == 404

        def first_pass_done():  # each VMI of earlier tests synced to its end once
            m = scrape(url)
            done = sum(writes(m, r) for r in ("created", "updated", "unchanged"))
            done += sum(
                value(m, "kvdev_controller_errors_total", reason=r)
                for r in ("refused", "retryable", "permanent")
            )
            return done >= value(m, "kvdev_controller_vmis_tracked") and m

        before = wait_for("the first pass over the cluster's VMIs", first_pass_done)
        assert value(before, "kvdev_controller_leader") == 1
        core = client.CoreV1Api(world.kube)
        world.claim()
        world.template()
        vmi = world.vmi()
        uid = vmi.metadata.uid

        def pending():  # the claim cannot be allocated before a pod using it is scheduled
            # (a VMI seen before its claim's watch event first says the claim is not found)
            events = vmi_events(core, world.ns, uid)
            return [
                e
                for e in events
                if e.reason == "ClaimPending"
                and "vm1-devices" in e.message
                and "to be allocated" in e.message
            ]

        (waiting,) = wait_for("ClaimPending on vm1 for vm1-devices", pending)
        assert waiting.type == "Normal"
        assert "to be allocated" in waiting.message
        _, claims = world.scheduled(world.launcher(vmi).metadata.name)
        world.custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1",
            {"status": {"nodeName": world.node, "phase": "Running"}},
        )  # fmt: skip
        world.stream_with('"generation": 1', "kvdev-vm1")
        made = wait_for(
            "writes_total{result=created} up by one",
            lambda: (
                (m := scrape(url)) and writes(m, "created") == writes(before, "created") + 1 and m
            ),
        )
        assert value(made, "kvdev_controller_vmis_tracked") >= 1
        assert value(made, "kvdev_controller_claims_tracked") >= 2  # vm1-devices and fast-nic's

        world.report_network(claims["devices"], "10.6.6.6/24")
        world.stream_with("10.6.6.6/24", "the claim's network data")
        changed = wait_for(
            "writes_total{result=updated} up",
            lambda: (m := scrape(url)) and writes(m, "updated") > writes(made, "updated") and m,
        )
        histogram = "kvdev_controller_event_to_write_seconds"
        assert value(changed, f"{histogram}_count") > value(made, f"{histogram}_count")
        assert value(changed, f"{histogram}_sum") > 0
        for resource in ("VirtualMachineInstance", "Pod", "ResourceClaim", "ResourceSlice"):
            assert ("kvdev_controller_relists_total", (("resource", resource),)) in changed

        events = recorded_events(core, world.ns, uid)
        recorded_anew_once_deleted(world, core, uid, events, claims)
        m = scrape(url)
        assert value(m, "kvdev_controller_events_total", result="created") >= len(events)
        assert value(m, "kvdev_controller_events_total", result="patched") >= 1
        only_elsewhere_failed(m, ctl.text(), world.ns)
        size = len(get(url, "/metrics")[1].encode())
    assert refusals(ctl.text()) == []
    count, total = value(changed, f"{histogram}_count"), value(changed, f"{histogram}_sum")
    with capsys.disabled():
        mean = total / count * 1000
        print(f"\n  /metrics: {size} bytes; event -> write: {count:.0f} writes, mean {mean:.0f} ms")
        for e in sorted(events, key=lambda e: e.first_timestamp):
            print(f"  {e.type:8} {e.reason:17} x{e.count:<3} {e.message[:90]}")


def test_a_configmap_of_that_name_not_its_own_is_a_warning_event(
    kube, namespace, controller_config, tmp_path
):
    core = client.CoreV1Api(kube)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "kvdev-vm2"}, "data": {}})
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm2", "namespace": namespace},
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimName": "vm2-devices"}],
            "domain": {"devices": {}},
        },
    }
    custom = client.CustomObjectsApi(kube)
    vmi = custom.create_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstances", body
    )
    with served(controller_config, tmp_path, "ctl-not-own", "--no-leader-elect") as ctl:
        url = base_url(ctl)

        def warned():
            assert ctl.alive(), ctl.text()
            events = vmi_events(core, namespace, vmi["metadata"]["uid"])
            return [e for e in events if e.reason == "ConfigMapNotOwned"]

        (event,) = wait_for("a ConfigMapNotOwned Event on vm2", warned)
        assert event.type == "Warning"
        assert "kvdev-vm2" in event.message
        assert "not managed by kvdev-host-controller" in event.message
        m = scrape(url)
        assert value(m, "kvdev_controller_errors_total", reason="refused") >= 1
    cm = core.read_namespaced_config_map("kvdev-vm2", namespace)
    assert cm.metadata.labels is None  # left alone
    assert refusals(ctl.text()) == []


@pytest.fixture
def partial_rbac(cluster, kube, namespace, tmp_path):
    """A ServiceAccount holding the controller's ClusterRole without VMIs; the rest is added by
    calling the fixture's value. Yields (kubeconfig, grant)."""
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "late"}})
    shipped = rbac.read_cluster_role(ROLE)
    rules = [
        kube.sanitize_for_serialization(r)
        for r in shipped.rules
        if "virtualmachineinstances" not in (r.resources or [])
    ]
    names = [f"{namespace}-partial", f"{namespace}-full"]
    rbac.create_cluster_role({"metadata": {"name": names[0]}, "rules": rules})
    subject = {"kind": "ServiceAccount", "name": "late", "namespace": namespace}

    def bind(name, role):
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        body = {"metadata": {"name": name}, "roleRef": ref, "subjects": [subject]}
        rbac.create_cluster_role_binding(body)

    bind(names[0], names[0])
    token = core.create_namespaced_service_account_token(
        "late", namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = token_kubeconfig(
        tmp_path / "late.kubeconfig", cluster.server, cluster.pki / "ca.crt", token
    )
    try:
        yield config, lambda: bind(names[1], ROLE)
    finally:
        for name in names:
            with contextlib.suppress(client.exceptions.ApiException):  # not granted yet
                rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(names[0])


def test_readyz_is_503_naming_what_is_not_synced_until_it_is(partial_rbac, tmp_path):
    config, grant = partial_rbac
    with served(config, tmp_path, "ctl-late", "--no-leader-elect") as ctl:
        url = base_url(ctl)

        def only_vmis():  # the VMI list is refused 403; the other four kinds get synced
            assert ctl.alive(), ctl.text()
            return get(url, "/readyz") == (503, "not synced: VirtualMachineInstance\n")

        wait_for("/readyz 503 naming VirtualMachineInstance alone", only_vmis)
        assert "list VirtualMachineInstance: API server answered 403" in ctl.text()
        assert get(url, "/healthz") == (200, "ok\n")  # alive: waiting is not wedged
        grant()
        wait_for("/readyz 200 once VMIs are listed", lambda: get(url, "/readyz") == (200, "ok\n"))
        assert get(url, "/healthz") == (200, "ok\n")
        assert ctl.alive(), ctl.text()


def test_two_replicas_on_one_lease_one_leads_both_ready(kube, controller_config, tmp_path, capsys):
    lease = f"t-{uuid.uuid4().hex[:8]}"
    timing = ["--lease-duration=4", "--renew-deadline=3", "--retry-period=0.5"]
    args = ["--leader-elect", f"--lease-name={lease}", *timing]
    coordination = client.CoordinationV1Api(kube)
    try:
        with (
            served(controller_config, tmp_path, "ctl-one", *args) as one,
            served(controller_config, tmp_path, "ctl-two", *args) as two,
        ):
            urls = {"ctl-one": base_url(one), "ctl-two": base_url(two)}

            def split():
                answers = {k: get(u, "/leader") for k, u in urls.items()}
                return sorted(s for s, _ in answers.values()) == [200, 503] and answers

            answers = wait_for("one /leader 200, the other 503", split)
            leader = next(k for k, (s, _) in answers.items() if s == 200)
            follower = next(k for k in urls if k != leader)
            assert answers[leader] == (200, "leader\n")
            assert answers[follower] == (503, "not leading\n")
            held = coordination.read_namespaced_lease(lease, SYSTEM).spec
            assert held.holder_identity == leader
            assert held.lease_duration_seconds == 4
            # Readiness does not depend on leading: the standby's caches are synced too.
            for url in urls.values():
                wait_for("/readyz 200", lambda u=url: get(u, "/readyz") == (200, "ok\n"))
            assert value(scrape(urls[leader]), "kvdev_controller_leader") == 1
            assert value(scrape(urls[follower]), "kvdev_controller_leader") == 0
            processes = {"ctl-one": one, "ctl-two": two}
            began = time.monotonic()
            assert processes[leader].stop() == 0  # SIGTERM: it releases the Lease
            wait_for(
                "the standby leads",
                lambda: get(urls[follower], "/leader") == (200, "leader\n"),
            )
            took = time.monotonic() - began
            assert processes[follower].alive(), processes[follower].text()
        with capsys.disabled():
            print(f"\n  leader SIGTERMed -> the standby's /leader 200: {took:.1f} s (retry 0.5 s)")
    finally:
        coordination.delete_namespaced_lease(lease, SYSTEM)
