"""The agent reads a kubelet ConfigMap volume: flat keys, one version at a time, swaps seen.

The volume is laid out and updated by kubelet's own code (``upstreamlab.publish_configmap``:
the configmap plugin's MakePayload and AtomicWriter, v1.37.2);
the streams are the bundled example's, under key names that say nothing (content names the
claim); the hints are at ``guest-hints.json``, the only key read as hints.
"""

import json
import select
import shutil
import threading
import time
from pathlib import Path

from kvdev.guest.adapters import files
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.core.observed import Link, NetState
from kvdev.guest.reconciler import Reconciler, converge
from kvdev.schema import check_file
from kvdev.schema.tree import CONFIGMAP_MAX_KEYS, Role
from netlinkdouble import MemoryNetlink
from upstreamlab import publish_configmap as publish

EXAMPLES = Path(__file__).resolve().parents[2] / "packaging" / "examples"
TREE = EXAMPLES / "dra-device-attributes"
MACS = {1: "02:00:00:3b:02:01", 2: "02:00:00:3b:02:02", 3: "0c:42:a1:5e:00:01"}


def example_keys() -> dict[str, bytes]:
    """The example tree as ConfigMap keys: the streams with meaningless names, the hints at
    ``guest-hints.json`` (as the controller writes them)."""
    streams = sorted(TREE.rglob("*-metadata.json"))
    keys = {f"key-{i}": p.read_bytes() for i, p in enumerate(streams)}
    return {**keys, "guest-hints.json": (TREE / "kvdev/guest-hints.json").read_bytes()}


def generations(raws) -> set[int]:
    out = set()
    for raw in raws:
        result = check_file(raw.source, raw.role, raw.data)
        if raw.role is Role.DEVICE_METADATA:
            out.add(result.document.generation)
    return out


def test_every_key_is_read_by_its_name_from_the_version_in_force(tmp_path):
    root = tmp_path / "volume"
    publish(root, example_keys())
    raws, complete = files.read_sources(root, root / "kvdev/guest-hints.json")
    assert complete
    roles = sorted((Path(r.source).name, r.role.value) for r in raws)
    assert [role for _, role in roles].count("DeviceMetadata") == 4
    assert [role for _, role in roles].count("GuestHints") == 1
    assert all(r.relpath is None for r in raws)  # no tree place: the content names the claim
    hints = [Path(r.source).name for r in raws if r.role is Role.GUEST_HINTS]
    assert hints == ["guest-hints.json"]
    assert all(r.stream_key for r in raws if r.role is Role.DEVICE_METADATA)
    assert {Path(r.source).parent for r in raws} == {root}  # named by the key, not the version


def test_a_swap_is_read_whole_and_never_mixed_with_the_version_before(tmp_path):
    root = tmp_path / "volume"

    def version(gen: int) -> dict[str, bytes]:
        out = {}
        for key, data in example_keys().items():
            text = data.decode()
            out[key] = (
                text.replace('"generation": 2', f'"generation": {gen}')
                .replace('"generation": 1', f'"generation": {gen}')
                .encode()
            )
        return out

    publish(root, version(1))
    stop = threading.Event()

    def swapping():
        gen = 1
        while not stop.is_set():
            gen = 3 - gen
            publish(root, version(gen))

    writer = threading.Thread(target=swapping)
    writer.start()
    try:
        seen = [generations(files.read_sources(root)[0]) for _ in range(200)]
    finally:
        stop.set()
        writer.join()
    assert all(len(gens) == 1 for gens in seen), [g for g in seen if len(g) != 1][:3]
    assert {g for gens in seen for g in gens} == {1, 2}  # both versions were seen, each whole


def test_a_data_link_pointing_out_of_the_volume_reads_nothing_and_is_incomplete(tmp_path):
    root = tmp_path / "volume"
    publish(root, example_keys())
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(next(root.glob("..2*")), elsewhere)
    (root / "..data").unlink()
    (root / "..data").symlink_to(elsewhere)
    raws, complete = files.read_sources(root)
    assert (raws, complete) == ([], False)  # the last good content stays in force


def test_only_regular_files_of_the_version_count(tmp_path):
    root = tmp_path / "volume"
    version = publish(root, {"a": (TREE / "kvdev/guest-hints.json").read_bytes()})
    (version / "sub").mkdir()
    (version / "sub" / "b").write_text("{}")
    (version / "c").symlink_to("/etc/hostname")
    raws, complete = files.read_sources(root)
    assert complete
    assert [Path(r.source).name for r in raws] == ["a"]


def woken(watcher, timeout=60.0) -> bool:  # a liveness bound: a wake, however slow
    return bool(select.select([watcher], [], [], timeout)[0])


def test_a_swap_wakes_the_watcher_through_inotify_and_through_the_stat_poll(tmp_path):
    for poll in (0.0, 0.05):  # inotify alone; the poll alone sees it too (virtiofs has no inotify)
        root = tmp_path / f"volume-{poll}"
        publish(root, example_keys())
        with files.Watcher(root, poll=poll) as watcher:
            while woken(watcher, 0.3):
                watcher.drain()
            publish(root, {**example_keys(), "extra": b"{}"})
            assert woken(watcher), poll
            watcher.drain()


def test_the_agent_configures_the_example_from_a_configmap_volume(tmp_path):
    root = tmp_path / "volume"
    publish(root, example_keys())
    links = tuple(
        Link(ifindex=i, ifname=f"eth{i}", mac=mac, kind="veth") for i, mac in MACS.items()
    )
    kernel = MemoryNetlink(NetState(links))
    cfg = AgentConfig(
        metadata_root=root,
        state_dir=tmp_path / "state",
        link_dir=tmp_path / "network",
        match_kinds=("veth",),
    )
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    names = {lk.ifindex: lk.ifname for lk in kernel.state.links}
    assert names == {1: "data0", 2: "data1", 3: "fast0"}  # as from the tree: hints applied
    sources = {c.source for c in outcome.status.claims}
    assert sources == {
        str(root / k) for k in example_keys() if b"DeviceMetadata" in example_keys()[k]
    }
    hints = json.loads((TREE / "kvdev/guest-hints.json").read_text())
    hints["devices"][0]["network"]["mtu"] = 4000
    publish(root, {**example_keys(), "guest-hints.json": (json.dumps(hints) + "\n").encode()})
    converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert kernel.state.link(1).mtu == 4000


def test_more_keys_than_the_agent_reads_is_a_cut_said_in_status_and_by_validate(tmp_path):
    """was: past 256 keys the rest were dropped silently (and known ones taken for removed)."""
    root = tmp_path / "volume"
    keys = example_keys()
    junk = {f"a-{n:03d}": b"{}" for n in range(CONFIGMAP_MAX_KEYS)}  # sorted before key-*
    publish(root, {**keys, **junk})
    limits = []
    raws, complete = files.read_sources(root, on_limit=limits.append)
    assert not complete  # so no key known before is taken for removed
    assert len([r for r in raws if Path(r.source).parent == root]) == CONFIGMAP_MAX_KEYS
    said = (
        f"ConfigMap volume {root}: {CONFIGMAP_MAX_KEYS + len(keys)} keys, only the first "
        f"{CONFIGMAP_MAX_KEYS} by name are read; the last good content of the others stays in "
        "force"
    )
    assert [p.message for p in limits] == [said]
    cfg = AgentConfig(metadata_root=root, state_dir=tmp_path / "state", link_dir=tmp_path / "net")
    status = Reconciler(cfg, MemoryNetlink(NetState()), scan_devices=tuple).reconcile().status
    assert [c.type for c in status.conditions] == ["MetadataTruncated"]
    assert not status.converged


def test_keys_that_are_no_json_are_read_once_each_never_paused_for(tmp_path):
    """was: each non-JSON key was re-read 3 times with a pause: 251 junk keys, 16 s a pass."""
    root = tmp_path / "volume"
    junk = {f"junk-{n:03d}": b"not json at all" for n in range(251)}
    publish(root, {**example_keys(), **junk})
    pauses = []
    settle = files.Settle(pause=pauses.append)
    started = time.monotonic()
    raws, complete = files.read_sources(root, root / "kvdev/guest-hints.json", settle=settle)
    took = time.monotonic() - started
    assert complete
    assert pauses == []  # a ConfigMap version never changes: nothing to wait for
    assert len(raws) == len(example_keys()) + len(junk)
    print(f"a ConfigMap volume of {len(raws)} keys, {len(junk)} of them no JSON: {took:.3f} s")


def test_hints_under_a_stream_key_are_an_error_on_that_key_and_never_hints(tmp_path):
    """was: a key's role came from its content, so a GuestHints document under a stream key
    (a driver's file, relayed from the node) was read as hints, and outranked the controller's
    own (its key sorts first): it renamed a NIC and added routes with ``network.primary``."""
    root = tmp_path / "volume"
    keys = example_keys()
    hints = json.loads(keys["guest-hints.json"])
    evil = {**hints, "devices": [{**hints["devices"][0], "network": {"mtu": 4000}}]}
    key = "a-claim.nic.evil.example.com-metadata.json"
    publish(root, {**keys, key: (json.dumps(evil) + "\n").encode()})
    links = tuple(
        Link(ifindex=i, ifname=f"eth{i}", mac=mac, kind="veth") for i, mac in MACS.items()
    )
    kernel = MemoryNetlink(NetState(links))
    cfg = AgentConfig(
        metadata_root=root,
        state_dir=tmp_path / "state",
        link_dir=tmp_path / "network",
        match_kinds=("veth",),
    )
    status = converge(Reconciler(cfg, kernel, scan_devices=tuple)).status
    (problem,) = status.file_errors
    assert (problem.source, problem.index, problem.path) == (str(root / key), 0, "apiVersion")
    assert problem.message.startswith("a GuestHints object in a stream key: on a ConfigMap")
    assert kernel.state.link(1).mtu == 9000  # the controller's hints, from guest-hints.json
    assert {lk.ifname for lk in kernel.state.links} == {"data0", "data1", "fast0"}
