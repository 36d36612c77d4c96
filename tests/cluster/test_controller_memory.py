"""The controller's memory under a tenant's flood, on the real API server, as a process.

Any tenant may create ConfigMaps labelled as the node relay's records, or as the controller's
own. The controller reads records only in the relay's namespace, so a flood of them elsewhere
(100 of ~900 KiB) costs its peak RSS (``VmHWM``) a small fraction of the flood; it caches no
data of a ConfigMap with its own label that is not of its shape and lists ConfigMaps a page of
``CONFIGMAP_PAGE_MAX`` at a time, so a flood with its label costs it a few pages' worth, not the
flood. The figures are printed; the bounds are in bytes, never in time.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from clusterlab import SYSTEM, kvdev_host, wait_for
from kubernetes import client

from kvdev.host.contract import configmap_name
from kvdev.host.controller.live import CONFIGMAP_PAGE_MAX

FLOOD = 100
SIZE = 900 * 1024


def peak_rss(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def peak_after_sync(controller_config, world, log: Path, vmi: str) -> int:
    """A fresh controller's peak RSS once it has listed everything and written a new VMI's."""
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": f"ctl-memory-{vmi}"}
    args = ("controller", "--kubeconfig", str(controller_config))
    with kvdev_host(log, *args, env=env) as ctl:
        wait_for("caches synced", lambda: "caches synced" in ctl.text() or not ctl.alive())
        world.vmi(vmi)

        def written():
            assert ctl.alive(), ctl.text()
            return world.configmap(configmap_name(vmi))

        wait_for(f"{configmap_name(vmi)} written", written)
        return peak_rss(ctl.proc.pid)


@pytest.mark.parametrize("manager", ["kvdev-host-relay", "kvdev-host-controller"])
def test_a_tenants_flood_of_labelled_configmaps_costs_the_controller_little(
    kube, world, controller_config, tmp_path, manager
):
    core = client.CoreV1Api(kube)
    before = peak_after_sync(controller_config, world, tmp_path / "before.log", "vm-before")
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": tenant}})
    try:
        filler = "x" * SIZE
        for n in range(FLOOD):
            body = {
                "metadata": {
                    "name": f"flood-{n}",
                    "labels": {
                        "app.kubernetes.io/managed-by": manager,
                        "kvdev.io/claim-uid": f"00000000-0000-4000-8000-{n:012d}",
                        "kvdev.io/relay-node": world.node,
                    },
                    "annotations": {"kvdev.io/node": world.node},
                },
                "data": {"x.sriov.example.com-metadata.json": filler},
            }
            core.create_namespaced_config_map(tenant, body)
        after = peak_after_sync(controller_config, world, tmp_path / "after.log", "vm-after")
    finally:
        core.delete_namespace(tenant)
    flood = FLOOD * SIZE
    grew = after - before
    print(
        f"controller peak RSS (VmHWM): {before / 2**20:.1f} MiB before, {after / 2**20:.1f} MiB "
        f"with {FLOOD} ConfigMaps labelled {manager} of {SIZE // 1024} KiB "
        f"({flood / 2**20:.0f} MiB) in another namespace: {grew / 2**20:+.1f} MiB"
    )
    if manager == "kvdev-host-relay":
        assert grew < flood // 10  # never read
    else:
        assert grew < 6 * CONFIGMAP_PAGE_MAX * SIZE  # one page at a time, none of it kept
