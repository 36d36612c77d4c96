"""The live controller, with the real ``kubernetes`` client, against the local API double.

Every wait is bounded (``until``); times are printed as figures, never asserted.
"""

import copy
import threading
import time
from pathlib import Path

import pytest
import yaml

from apidouble import ApiDouble
from kvdev.host.controller.backoff import Backoff
from kvdev.host.controller.election import Lease, LeaseElector
from kvdev.host.controller.index import Kind
from kvdev.host.controller.live import Controller
from kvdev.host.controller.render import render
from kvdev.host.kube.wire import KubeApi
from kvdev.schema import decode_stream
from kvdev.schema.stream import DEVICE_METADATA

REPO = Path(__file__).resolve().parents[3]
HOST = REPO / "packaging" / "examples" / "host"
CM = ("v1", "ConfigMap", "vms", "kvdev-vm1")
CLAIM = ("resource.k8s.io/v1", "ResourceClaim", "vms", "vm1-devices")
NIC1 = "vm1-devices.nic-1.sriov.example.com-metadata.json"
BOUND = 30.0


def until(predicate, what, bound=BOUND):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.01)
    pytest.fail(f"not within {bound:.0f} s: {what}")


def example_objects():
    out = []
    for name in ("claims.yaml", "slices.yaml", "vmi.yaml"):
        for doc in yaml.safe_load_all((HOST / name).read_text()):
            out.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return out


def kubeconfig(path, url):
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "double", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "double"}}],
                "contexts": [{"name": "c", "context": {"cluster": "double", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


class Running:
    """A controller thread on the double, stopped at the end."""

    def __init__(self, api, **kwargs):
        self.stop = threading.Event()
        self.elector = kwargs.pop("elector", None)
        kwargs.setdefault("backoff", lambda: Backoff(base=0.02, cap=0.2))
        kwargs.setdefault("watch_seconds", 5)
        self.controller = Controller(api, **kwargs)
        self.result = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.result = self.controller.run(self.stop, elector=self.elector)

    def __enter__(self):
        self.thread.start()
        return self.controller

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=BOUND)
        assert not self.thread.is_alive()


@pytest.fixture
def double():
    api = ApiDouble(bookmark_seconds=0.1)
    api.start()
    for obj in example_objects():
        api.put(obj)
    yield api
    api.stop()


@pytest.fixture
def api(double, tmp_path):
    return KubeApi.connect(kubeconfig(tmp_path / "kubeconfig", double.url))


def configmap(double):
    return double.get(*CM)


def stream(cm, key):
    return decode_stream(cm["data"][key], DEVICE_METADATA).document


def test_creates_the_vmis_configmap_owned_by_it(double, api, capsys):
    start = time.monotonic()
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None, "the ConfigMap exists")
        until(controller.idle.is_set, "the controller is idle")
        first = time.monotonic() - start
    cm = configmap(double)
    vmi = double.get("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1")
    assert cm["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "name": "vm1",
            "uid": vmi["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert cm["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kvdev-host-controller",
        "kvdev.io/vmi": "vm1",
    }
    assert len(cm["data"]) == 5
    assert double.count("POST", "/configmaps") == 1
    assert double.count("PUT", "/configmaps") == 0
    with capsys.disabled():
        print(f"\n  controller: start -> first ConfigMap created and idle: {first:.2f} s")


def test_a_claim_status_change_reaches_the_configmap_in_one_write(double, api, capsys):
    rounds, latencies, spent = 20, [], []
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        first = configmap(double)
        puts = double.count("PUT", "/configmaps")
        for n in range(rounds):
            calls = dict(api.calls)
            claim = double.get(*CLAIM)
            claim["status"]["devices"][0]["networkData"]["ips"] = [f"10.1.0.{100 + n}/24"]
            changed_at = time.monotonic()
            double.put(claim)
            until(
                lambda n=n: stream(configmap(double), NIC1).generation == n + 2,
                "the new IP in the ConfigMap",
            )
            latencies.append(time.monotonic() - changed_at)
            until(controller.idle.is_set, "idle again")
            spent.append(sum(api.calls[k] - calls.get(k, 0) for k in api.calls))
        after = configmap(double)
    doc = stream(after, NIC1)
    assert doc.requests[0].devices[0].network_data.ips == [f"10.1.0.{100 + rounds - 1}/24"]
    assert {k for k in after["data"] if after["data"][k] != first["data"][k]} == {NIC1}
    assert double.count("PUT", "/configmaps") == puts + rounds
    latencies.sort()
    with capsys.disabled():
        print(
            f"\n  controller: claim status change -> ConfigMap updated, {rounds} changes: "
            f"median {latencies[rounds // 2] * 1000:.1f} ms, "
            f"p95 {latencies[int(rounds * 0.95)] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
        )
        print(f"  controller: API calls per reconcile of a change: {sorted(set(spent))}")


def test_nothing_changed_means_no_write_even_after_a_relist(double, api, capsys):
    with Running(api, resync=0.3) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        version = configmap(double)["metadata"]["resourceVersion"]
        syncs = controller.stats.syncs
        pod = double.get("v1", "Pod", "vms", "virt-launcher-vm1-abcde")
        pod["metadata"]["annotations"] = {"touched": "yes"}
        double.put(pod)  # concerns the VMI, changes nothing it renders
        double.compact()
        double.close_watches()  # every reflector re-watches from a compacted version: 410
        until(lambda: all(r.lists >= 2 for r in controller.reflectors), "every kind listed again")
        until(lambda: controller.stats.syncs >= syncs + 2, "synced again (pod, resync)")
        until(controller.idle.is_set, "idle")
    assert configmap(double)["metadata"]["resourceVersion"] == version
    assert double.count("PUT", "/configmaps") == 0
    assert double.count("POST", "/configmaps") == 1
    with capsys.disabled():
        per = {r.kind.name: r.lists for r in controller.reflectors}
        print(
            f"\n  controller: lists per kind after one 410: {per}, syncs {controller.stats.syncs}"
        )


def test_a_410_relist_still_sees_what_changed_meanwhile(double, api):
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        for r in controller.reflectors:
            r.close()  # streams end; while they reopen, the claim changes and history goes
        claim = double.get(*CLAIM)
        claim["status"]["devices"][1]["networkData"]["ips"] = ["10.1.0.66/24"]
        double.put(claim)
        double.compact()
        double.close_watches()
        key = "vm1-devices.nic-2.sriov.example.com-metadata.json"
        until(lambda: stream(configmap(double), key).generation == 2, "the change applied")
    ips = stream(configmap(double), key).requests[0].devices[0].network_data.ips
    assert ips == ["10.1.0.66/24"]


def test_bookmarks_move_every_reflector_to_the_latest_version(double, api):
    with Running(api, resync=3600) as controller:
        until(controller.idle.is_set, "first sync")
        double.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "other", "namespace": "x"},
                "spec": {"containers": [{"name": "c"}]},
            }
        )  # not a launcher pod: no reflector gets an event for it
        latest = str(double.version)
        slices = next(r for r in controller.reflectors if r.kind is Kind.SLICE)
        until(lambda: slices.resource_version == latest, "a bookmark with the latest version")


def test_a_conflict_is_retried_from_a_fresh_read(double, api, capsys):
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        double.fail("PUT", "/configmaps/kvdev-vm1", 409)
        gets = double.count("GET", "/configmaps/kvdev-vm1")
        calls = dict(api.calls)
        claim = double.get(*CLAIM)
        claim["status"]["devices"][0]["networkData"]["ips"] = ["10.1.0.55/24"]
        double.put(claim)
        until(lambda: stream(configmap(double), NIC1).generation == 2, "updated after a 409")
        until(controller.idle.is_set, "idle")
        spent = {
            k: api.calls[k] - calls.get(k, 0) for k in api.calls if api.calls[k] > calls.get(k, 0)
        }
    assert controller.stats.conflicts == 1
    assert double.count("GET", "/configmaps/kvdev-vm1") == gets + 1
    assert double.count("PUT", "/configmaps/kvdev-vm1") == 2  # the 409, then the one that won
    with capsys.disabled():
        print(f"\n  controller: API calls for a reconcile that met a 409: {spent}")


def test_someone_elses_edit_of_the_configmap_is_undone(double, api):
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        good = configmap(double)["data"]
        edited = configmap(double)
        edited["data"][NIC1] = "garbage"
        edited["metadata"]["annotations"] = {"owner-note": "kept"}
        double.put(edited)
        until(lambda: configmap(double)["data"] == good, "the data restored")
    cm = configmap(double)
    assert cm["metadata"]["annotations"]["owner-note"] == "kept"  # others' metadata stays
    assert stream(cm, NIC1).generation == 1  # the same content as before the edit


def test_a_configmap_of_that_name_kvdev_does_not_manage_is_left_alone(double, api):
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kvdev-vm1", "namespace": "vms"},
        "data": {"mine": "yes"},
    }
    double.put(foreign)
    with Running(api, resync=3600) as controller:
        until(lambda: controller.stats.refused >= 1, "refused")
        until(controller.idle.is_set, "idle")
    assert configmap(double)["data"] == {"mine": "yes"}
    assert double.count("PUT", "/configmaps") == 0
    assert double.count("POST", "/configmaps") == 1  # 409 AlreadyExists, then a GET: not ours


def test_a_deleted_vmi_leaves_garbage_collection_to_its_owner_reference(double, api):
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        vmi = double.get("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1")
        writes = double.count("POST") + double.count("PUT")
        double.delete("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1")
        until(lambda: controller.index.get(Kind.VMI, ("vms", "vm1")) is None, "VMI gone")
        claim = double.get(*CLAIM)
        claim["status"]["devices"][0]["networkData"]["ips"] = ["10.1.0.44/24"]
        double.put(claim)  # concerns no VMI any more
        until(
            lambda: (
                controller.index.get(Kind.CLAIM, ("vms", "vm1-devices")).version
                == double.get(*CLAIM)["metadata"]["resourceVersion"]
            ),
            "claim seen",
        )
        until(controller.idle.is_set, "idle")
    assert double.count("POST") + double.count("PUT") == writes
    # the double has no garbage collector: the owner reference is what makes the real one act
    refs = configmap(double)["metadata"]["ownerReferences"]
    assert [(r["uid"], r["controller"], r["blockOwnerDeletion"]) for r in refs] == [
        (vmi["metadata"]["uid"], True, True)
    ]


def test_api_errors_back_off_and_recover(double, api):
    double.fail("GET", "/resourceclaims", 500, count=3)
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
    claims = next(r for r in controller.reflectors if r.kind is Kind.CLAIM)
    assert claims.backoff.failures == 0  # reset after the list that worked
    assert double.count("GET", "/resourceclaims", watch=False) >= 4


def test_a_template_claim_appears_when_the_pod_names_it(double, api):
    pod = double.get("v1", "Pod", "vms", "virt-launcher-vm1-abcde")
    status = pod["status"]["resourceClaimStatuses"]
    pod["status"]["resourceClaimStatuses"] = []
    double.put(pod)
    key = "fast-nic.nic.dra.net-metadata.json"
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        assert key not in configmap(double)["data"]
        pod = double.get("v1", "Pod", "vms", "virt-launcher-vm1-abcde")
        pod["status"]["resourceClaimStatuses"] = status
        double.put(pod)
        until(lambda: key in configmap(double)["data"], "the template claim's stream")


# --------------------------------------------------------------------------- the Lease


def elector(api, identity):
    e = LeaseElector(
        Lease("kvdev", "ctl"), identity, lease_seconds=3, renew_seconds=2, retry_seconds=0.2
    )
    e.api = api
    return e


def test_only_one_candidate_leads_and_a_release_hands_over(double, api):
    a, b = elector(api, "a"), elector(api, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renews
    a.release()
    assert b.try_acquire_or_renew()
    lease = double.get("coordination.k8s.io/v1", "Lease", "kvdev", "ctl")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 0  # a released it: no take-over


def test_an_expired_lease_is_taken_over_after_the_observed_duration(double, api):
    now = [0.0]
    a, b = elector(api, "a"), elector(api, "b")
    b.clock = lambda: now[0]
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # observed at t=0
    now[0] = 2.9
    assert not b.try_acquire_or_renew()
    now[0] = 3.1  # no renewal seen for more than leaseDurationSeconds
    assert b.try_acquire_or_renew()
    lease = double.get("coordination.k8s.io/v1", "Lease", "kvdev", "ctl")
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)
    assert not a.try_acquire_or_renew()


def test_two_replicas_only_the_leader_writes(double, tmp_path):
    path = kubeconfig(tmp_path / "k", double.url)
    first, second = KubeApi.connect(path), KubeApi.connect(path)
    one = Running(first, resync=3600, elector=elector(first, "one"))
    two = Running(second, resync=3600, elector=elector(second, "two"))
    leader = one.__enter__()
    until(lambda: configmap(double) is not None and leader.idle.is_set(), "leader synced")
    with two as standby:
        # A standby lists and watches while it waits (warm caches, ready), but writes nothing.
        until(lambda: standby.readyz()[0], "the standby's caches synced")
        assert standby.leader() == (False, "not leading")
        assert not standby.synced.is_set()  # its worker waits for the Lease
        assert second.calls["create"] == 0
        assert double.count("PUT", "/configmaps") == 0
        one.__exit__(None, None, None)  # stops and releases the Lease
        until(standby.synced.is_set, "the standby took over")
        until(standby.idle.is_set, "the standby synced")
    lease = double.get("coordination.k8s.io/v1", "Lease", "kvdev", "ctl")
    assert lease["spec"].get("holderIdentity") in (None, "two")  # two released it in turn
    assert (one.result, two.result) == (True, True)
    assert second.calls["create"] == 0  # the ConfigMap was already right
    assert double.count("POST", "/configmaps") == 1


def test_losing_the_lease_stops_the_controller(double, api):
    runner = Running(api, resync=3600, elector=elector(api, "me"))
    with runner as controller:
        until(controller.synced.is_set, "leading and synced")
        lease = double.get("coordination.k8s.io/v1", "Lease", "kvdev", "ctl")
        stolen = copy.deepcopy(lease)
        stolen["spec"]["holderIdentity"] = "thief"
        double.put(stolen)
        until(lambda: not runner.thread.is_alive(), "the controller stopped")
    assert runner.result is False
    lease = double.get("coordination.k8s.io/v1", "Lease", "kvdev", "ctl")
    assert lease["spec"]["holderIdentity"] == "thief"  # a loser does not release


def test_a_deleted_configmap_is_made_again_and_lists_are_paged(double, tmp_path):
    api = KubeApi.connect(kubeconfig(tmp_path / "k", double.url))
    with Running(api, resync=3600, page_size=1) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        first = configmap(double)
        double.delete(*CM)
        until(lambda: configmap(double) is not None, "made again")
        until(controller.idle.is_set, "idle")
    assert configmap(double)["data"] == first["data"]
    assert double.count("POST", "/configmaps") == 2
    slices = double.count("GET", "/resourceslices", watch=False)
    assert slices >= 3  # three slices, one per page


def test_an_object_that_does_not_parse_is_skipped_and_the_last_good_one_kept(double, api, caplog):
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
        good = controller.index.get(Kind.VMI, ("vms", "vm1")).version
        vmi = double.get("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1")
        broken = copy.deepcopy(vmi)
        broken["spec"]["networks"][1]["name"] = 3
        double.put(broken)
        until(lambda: "spec.networks[1].name" in caplog.text, "the bad field reported")
        assert controller.index.get(Kind.VMI, ("vms", "vm1")).version == good
        vmi["spec"]["domain"]["devices"]["gpus"][0]["tag"] = "gpu-a"
        double.put(vmi)
        until(lambda: '"tag":"gpu-a"' in configmap(double)["data"]["guest-hints.json"], "fixed")
    assert "VirtualMachineInstance/vms/vm1" in caplog.text
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    concerned = {(o["kind"], o["namespace"], o["name"]) for o in (r.k8s_object for r in skipped)}
    assert concerned == {("VirtualMachineInstance", "vms", "vm1")}  # the JSON line names it


def test_a_pod_of_another_namespace_naming_the_vmis_uid_has_no_say(double, api):
    """was: any pod with vm1's UID among its owners decided which claim fed kvdev-vm1."""
    pod = copy.deepcopy(double.get("v1", "Pod", "vms", "virt-launcher-vm1-abcde"))
    pod["metadata"] = {
        **pod["metadata"],
        "namespace": "elsewhere",
        "name": "impostor",
        "uid": "eeeeeeee-0000-4000-8000-000000000002",
    }
    pod["metadata"].pop("resourceVersion", None)
    pod["status"]["resourceClaimStatuses"] = [
        {"name": "fast-nic", "resourceClaimName": "vm1-devices"}
    ]
    double.put(pod)
    with Running(api, resync=3600) as controller:
        until(lambda: configmap(double) is not None and controller.idle.is_set(), "first sync")
    data = configmap(double)["data"]
    assert "fast-nic.nic.dra.net-metadata.json" in data  # from the VMI's own launcher pod
    assert len(data) == 5  # as without the impostor


def test_a_worker_survives_any_exception_from_a_render(double, api, caplog):
    """A render that raises (a defect, one VMI's content) is logged, counted and backed off."""
    calls = []

    def raising_twice(inputs):
        calls.append(inputs.vmi.metadata.name)
        if len(calls) <= 2:
            raise ZeroDivisionError("injected by the test")
        return render(inputs)

    with Running(api, resync=3600, workers=1, renderer=raising_twice) as controller:
        until(lambda: configmap(double) is not None, "the one worker syncs again and writes")
        until(controller.idle.is_set, "the controller is idle")
    print(f"renders: {len(calls)}; failures counted: {controller.stats.failures}")
    assert len(calls) >= 3
    assert controller.stats.failures == 2
    exposition = controller.metrics.exposition().decode()
    assert 'kvdev_controller_errors_total{reason="exception"} 2.0' in exposition
    logged = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert len(logged) == 2
    assert all(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in logged)


def labelled_configmap(data, owners=None):
    """``kvdev-vm1`` with the controller's label; ``owners``: its ownerReferences, if any."""
    meta = {
        "name": "kvdev-vm1",
        "namespace": "vms",
        "labels": {"app.kubernetes.io/managed-by": "kvdev-host-controller"},
    }
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def test_a_configmap_another_vmi_controls_is_never_written(double, api, caplog):
    other = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "name": "vm-other",
        "uid": "99999999-0000-4000-8000-000000000001",
        "controller": True,
    }
    theirs = labelled_configmap({"guest-hints.json": "theirs"}, [other])
    double.put(theirs)
    with Running(api, resync=3600) as controller:
        until(lambda: controller.stats.refused >= 1, "refused")
        until(controller.idle.is_set, "idle")
    assert configmap(double)["data"] == {"guest-hints.json": "theirs"}
    assert configmap(double)["metadata"]["ownerReferences"] == theirs["metadata"]["ownerReferences"]
    assert double.count("PUT", "/configmaps") == 0
    exposition = controller.metrics.exposition().decode()
    assert "kvdev_controller_configmap_owner_refusals_total 1.0" in exposition
    assert any("vm-other" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_labelled_configmap_no_vmi_controls_is_read_again_and_adopted(double, api):
    """Its data is not cached (not of the controller's shape): the sync reads it, then writes."""
    double.put(labelled_configmap({"stale": "yes"}))
    with Running(api, resync=3600) as controller:
        until(lambda: controller.stats.updates >= 1, "adopted")
        until(controller.idle.is_set, "idle")
    cm = configmap(double)
    vmi = double.get("kubevirt.io/v1", "VirtualMachineInstance", "vms", "vm1")
    assert [r["uid"] for r in cm["metadata"]["ownerReferences"]] == [vmi["metadata"]["uid"]]
    assert "stale" not in cm["data"]
    assert NIC1 in cm["data"]
    assert double.count("GET", "/namespaces/vms/configmaps/kvdev-vm1") >= 1
