"""The kubelet DRA plugin through a real gRPC client over its Unix sockets.

Real files (the writer writes them), real sockets, real gRPC; claims come from a directory of
YAML files (``FileClaimSource``).
"""

import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
import yaml

from hostlab import DRIVER, uid_of
from hostlab import allocated_claim as claim_doc
from hostlab import vf_slice as slice_doc
from kvdev.errors import PermanentError, UsageError
from kvdev.host.plugin.claimsource import FileClaimSource
from kvdev.host.plugin.server import PluginServer, Sockets
from kvdev.host.plugin.service import ClaimRef, Plugin, _KeyedLocks
from kvdev.host.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from kvdev.host.publish import writer

VERSIONS = {
    "v1": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}


class Env:
    """A plugin serving claims ``claim-0`` .. ``claim-<n-1>`` from files, and its directories."""

    def __init__(self, root: Path, claims: int = 4) -> None:
        self.root = root
        self.claims_dir = root / "claims"
        self.claims_dir.mkdir(parents=True)
        (self.claims_dir / "slices.yaml").write_text(yaml.safe_dump(slice_doc(max(claims, 1))))
        (self.claims_dir / "claims.yaml").write_text(
            yaml.safe_dump_all([claim_doc(i) for i in range(claims)])
        )
        self.layout = writer.Layout(DRIVER, root / "plugin", root / "cdi")
        self.plugin = Plugin(self.layout, FileClaimSource(self.claims_dir, DRIVER))
        self.sockets = Sockets.default(DRIVER, self.layout.plugin_data_dir, root / "registry")
        self.server = PluginServer(self.plugin, self.sockets, driver=DRIVER, workers=16)

    def files(self) -> dict[str, bytes]:
        found = {}
        for base in (self.layout.plugin_data_dir, self.layout.cdi_dir):
            for path in sorted(base.rglob("*")) if base.exists() else []:
                if path.is_file() and not path.name.endswith(".sock"):
                    # Specs name host paths: make them comparable across roots.
                    data = path.read_bytes().replace(os.fsencode(self.root), b"<root>")
                    found[str(path.relative_to(self.root))] = data
        return found


@pytest.fixture
def short_dir():
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="kvdev-plugin-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(short_dir):
    env = Env(short_dir)
    env.server.start()
    yield env
    env.server.stop(grace=1)


def dra_stub(env: Env, version: str = "v1"):
    channel = grpc.insecure_channel(f"unix:{env.sockets.dra}")
    return channel, VERSIONS[version][1].DRAPluginStub(channel)


def claims_msg(version: str, *refs: tuple[str, str]) -> list:
    pb2 = VERSIONS[version][0]
    return [pb2.Claim(namespace="vms", name=name, uid=uid) for name, uid in refs]


def prepare(env: Env, *refs: tuple[str, str], version: str = "v1"):
    pb2 = VERSIONS[version][0]
    channel, stub = dra_stub(env, version)
    with channel:
        return stub.NodePrepareResources(
            pb2.NodePrepareResourcesRequest(claims=claims_msg(version, *refs)), timeout=30
        )


def unprepare(env: Env, *refs: tuple[str, str], version: str = "v1"):
    pb2 = VERSIONS[version][0]
    channel, stub = dra_stub(env, version)
    with channel:
        return stub.NodeUnprepareResources(
            pb2.NodeUnprepareResourcesRequest(claims=claims_msg(version, *refs)), timeout=30
        )


def ref(i: int) -> tuple[str, str]:
    return (f"claim-{i}", uid_of(i))


# --------------------------------------------------------------------------- registration


def test_registration_get_info_then_notify(env):
    with grpc.insecure_channel(f"unix:{env.sockets.registration}") as channel:
        stub = registration_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=10)
        assert info.type == "DRAPlugin"
        assert info.name == DRIVER
        assert info.endpoint == str(env.root / "plugin" / "dra.sock")
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        assert not env.server.registration.registered.is_set()

        stub.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=True), timeout=10
        )
        assert env.server.registration.registered.is_set()
        stub.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=False, error="version skew"),
            timeout=10,
        )
        assert not env.server.registration.registered.is_set()
        assert env.server.registration.error == "version skew"


def test_the_endpoint_kubelet_is_given_serves_the_dra_service(env):
    with grpc.insecure_channel(f"unix:{env.sockets.registration}") as channel:
        info = registration_pb2_grpc.RegistrationStub(channel).GetInfo(
            registration_pb2.InfoRequest(), timeout=10
        )
    with grpc.insecure_channel(f"unix:{info.endpoint}") as channel:
        response = dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=claims_msg("v1", ref(0))), timeout=30
        )
    assert response.claims[uid_of(0)].error == ""


def test_the_registration_socket_does_not_serve_dra(env):
    with grpc.insecure_channel(f"unix:{env.sockets.registration}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --------------------------------------------------------------------------- prepare / unprepare


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_returns_cdi_ids_of_specs_it_wrote(env, version):
    response = prepare(env, ref(1), version=version)

    assert set(response.claims) == {uid_of(1)}
    result = response.claims[uid_of(1)]
    assert result.error == ""
    [device] = result.devices
    assert list(device.request_names) == ["nic"]
    assert (device.pool_name, device.device_name) == ("node-a", "vf-1")
    assert list(device.cdi_device_ids) == [f"{DRIVER}/metadata={uid_of(1)}_nic"]
    # The ID resolves: a CDI spec of that kind declares a device of that name ...
    kind, _, name = device.cdi_device_ids[0].partition("=")
    specs = [json.loads(p.read_text()) for p in (env.root / "cdi").glob("*.json")]
    [spec] = [s for s in specs if s["kind"] == kind]
    [cdi_device] = [d for d in spec["devices"] if d["name"] == name]
    # ... that mounts the claim's metadata file, which exists.
    mounts = cdi_device["containerEdits"]["mounts"]
    assert mounts
    for mount in mounts:
        host_path = Path(mount["hostPath"])
        assert host_path.is_file()
        assert host_path.is_relative_to(env.root / "plugin")
        assert b"0000:3b:02.1" in host_path.read_bytes()


def test_prepare_again_is_identical_and_rewrites_nothing(env):
    first = prepare(env, ref(0), ref(2))
    files = env.files()
    mtimes = {p: (env.root / p).stat().st_mtime_ns for p in files}
    again = prepare(env, ref(0), ref(2), version="v1beta1")

    assert first.SerializeToString(deterministic=True) == dra_v1_pb2.NodePrepareResourcesResponse(
        claims={
            k: dra_v1_pb2.NodePrepareResourceResponse.FromString(v.SerializeToString())
            for k, v in again.claims.items()
        }
    ).SerializeToString(deterministic=True)
    assert env.files() == files
    assert {p: (env.root / p).stat().st_mtime_ns for p in files} == mtimes


def test_unprepare_removes_the_files_and_again_succeeds(env):
    prepare(env, ref(0), ref(1))
    before = env.files()
    assert any(uid_of(0) in p for p in before)

    response = unprepare(env, ref(0))
    assert set(response.claims) == {uid_of(0)}
    assert response.claims[uid_of(0)].error == ""
    after = env.files()
    assert not any(uid_of(0) in p or "claim-0" in p for p in after)
    assert {p for p in before if uid_of(1) in p or "claim-1" in p} <= set(after)

    again = unprepare(env, ref(0), version="v1beta1")
    assert again.claims[uid_of(0)].error == ""
    assert env.files() == after


def test_bad_claims_fail_alone_and_the_others_succeed(env):
    missing = ("claim-77", uid_of(77))
    wrong_uid = ("claim-2", uid_of(99))
    traversal = ("../../etc", uid_of(55))
    response = prepare(env, ref(0), missing, wrong_uid, traversal, ref(3))

    assert set(response.claims) == {uid_of(i) for i in (0, 77, 99, 55, 3)}
    assert response.claims[uid_of(0)].error == ""
    assert response.claims[uid_of(3)].error == ""
    assert "claim-77 not found" in response.claims[uid_of(77)].error
    mismatch = response.claims[uid_of(99)].error
    assert f"has uid {uid_of(2)}" in mismatch
    assert "vms/claim-2" in mismatch
    assert response.claims[uid_of(55)].error
    assert not response.claims[uid_of(55)].devices
    written = env.files()
    assert not any(uid_of(2) in p or "claim-2" in p for p in written)
    assert not any("etc" in p for p in written)
    assert any(uid_of(3) in p for p in written)


def test_a_request_without_uid_gets_an_error_for_that_claim(env):
    response = prepare(env, ("claim-1", ""), ref(0))
    assert "namespace, name and uid are all required" in response.claims[""].error
    assert response.claims[uid_of(0)].error == ""


def test_invalid_claim_file_is_reported_with_its_name(env):
    (env.claims_dir / "broken.yaml").write_text("kind: [unclosed\n")
    response = prepare(env, ref(0))
    error = response.claims[uid_of(0)].error
    assert "broken.yaml" in error
    assert "invalid YAML" in error
    assert env.files() == {}


def test_claims_directory_is_read_again_on_every_call(env):
    assert "not found" in prepare(env, ("late", uid_of(40))).claims[uid_of(40)].error
    late = claim_doc(3, name="late", uid=uid_of(40))
    (env.claims_dir / "late.json").write_text(json.dumps(late))
    assert prepare(env, ("late", uid_of(40))).claims[uid_of(40)].error == ""


# --------------------------------------------------------------------------- concurrency


def test_sixteen_concurrent_prepares_of_the_same_and_different_claims(env):
    refs = [ref(i % 4) for i in range(16)]  # four callers for each of four claims
    with ThreadPoolExecutor(max_workers=16) as pool:
        responses = list(pool.map(lambda r: prepare(env, r), refs))

    by_claim: dict[str, set[bytes]] = {}
    for (_, uid), response in zip(refs, responses, strict=True):
        assert response.claims[uid].error == ""
        by_claim.setdefault(uid, set()).add(response.claims[uid].SerializeToString())
    assert all(len(answers) == 1 for answers in by_claim.values())
    concurrent_files = env.files()

    # The same claims prepared one at a time, elsewhere, give the same bytes.
    with tempfile.TemporaryDirectory(dir="/tmp") as other:
        serial = Env(Path(other))
        for i in range(4):
            assert not serial.plugin.prepare(ClaimRef("vms", *ref(i))).error
        assert serial.files() == concurrent_files
    assert len(env.plugin._locks) == 0


def test_a_hundred_concurrent_prepares_of_different_claims(short_dir):
    env = Env(short_dir, claims=100)
    env.server.start()
    try:
        with ThreadPoolExecutor(max_workers=32) as pool:
            started = time.monotonic()
            responses = list(pool.map(lambda i: prepare(env, ref(i)), range(100)))
            elapsed = time.monotonic() - started
        unprepared = list(pool_map(lambda i: unprepare(env, ref(i)), range(100)))
    finally:
        env.server.stop(grace=1)
    for i, response in enumerate(responses):
        assert response.claims[uid_of(i)].error == ""
        [device] = response.claims[uid_of(i)].devices
        assert device.device_name == f"vf-{i}"
    assert all(not r.claims[uid_of(i)].error for i, r in enumerate(unprepared))
    assert env.files() == {}
    print(f"100 concurrent NodePrepareResources: {elapsed:.2f}s")


def pool_map(fn, items):
    with ThreadPoolExecutor(max_workers=32) as pool:
        return list(pool.map(fn, items))


def test_keyed_locks_serialize_one_key_only():
    locks = _KeyedLocks()
    inside: list[str] = []
    overlap = threading.Event()

    def hold(key: str) -> None:
        with locks.hold(key):
            inside.append(key)
            if len(inside) > 1 and inside.count(key) == 1:
                overlap.set()
            time.sleep(0.05)
            inside.remove(key)

    threads = [threading.Thread(target=hold, args=(k,)) for k in ("a", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap.is_set()  # "b" ran while an "a" held its lock
    assert len(locks) == 0


# --------------------------------------------------------------------------- sockets


def test_sockets_are_private_and_removed_on_stop(short_dir):
    env = Env(short_dir)
    env.server.start()
    for path in (env.sockets.dra, env.sockets.registration):
        info = path.lstat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o750
    env.server.stop(grace=1)
    assert not env.sockets.dra.exists()
    assert not env.sockets.registration.exists()


def test_stop_leaves_a_socket_another_plugin_put_in_its_place(short_dir):
    env = Env(short_dir)
    env.server.start()
    assert [p.name for p in env.sockets.dra.parent.iterdir()] == ["dra.sock"]  # no temporary
    successor = []
    for path in (env.sockets.dra, env.sockets.registration):
        path.unlink()  # a new plugin instance took the paths over (its own sockets)
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.listen()
        successor.append(s)
    try:
        env.server.stop(grace=1)  # gRPC shuts down, and so do we: neither removes theirs
        assert stat.S_ISSOCK(env.sockets.dra.lstat().st_mode)
        assert stat.S_ISSOCK(env.sockets.registration.lstat().st_mode)
    finally:
        for s in successor:
            s.close()


def test_a_stale_socket_is_replaced(short_dir):
    env = Env(short_dir)
    env.sockets.dra.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(env.sockets.dra))  # bound, never listening: what a crash leaves
    assert stat.S_IMODE(env.sockets.dra.lstat().st_mode) != 0o600
    with env.server:
        assert stat.S_IMODE(env.sockets.dra.lstat().st_mode) == 0o600
        assert prepare(env, ref(0)).claims[uid_of(0)].error == ""


def test_a_live_socket_or_a_file_is_not_taken_over(short_dir):
    first = Env(short_dir / "a")
    with first.server:
        second = Env(short_dir / "b")
        second.sockets = first.sockets
        second.server = PluginServer(second.plugin, first.sockets, driver=DRIVER)
        with pytest.raises(PermanentError, match="another server is listening"):
            second.server.start()
        assert prepare(first, ref(0)).claims[uid_of(0)].error == ""
    (short_dir / "registry").mkdir()
    not_a_socket = short_dir / "registry" / f"{DRIVER}-reg.sock"
    not_a_socket.write_text("keep me")
    third = Env(short_dir / "c")
    third.server = PluginServer(
        third.plugin, Sockets(third.sockets.dra, not_a_socket), driver=DRIVER
    )
    with pytest.raises(PermanentError, match="is not a socket"):
        third.server.start()
    assert not_a_socket.read_text() == "keep me"
    assert not third.sockets.dra.exists()  # the DRA server it had started is gone again


def test_a_socket_path_too_long_is_a_usage_error(short_dir):
    env = Env(short_dir)
    deep = short_dir / ("d" * 100)
    server = PluginServer(env.plugin, Sockets(deep / "dra.sock", deep / "r.sock"), driver=DRIVER)
    with pytest.raises(UsageError, match="at most 107 bytes"):
        server.start()
    assert not deep.exists()


def test_a_claim_file_edited_in_place_is_seen_by_the_next_call(env):
    assert prepare(env, ref(1)).claims[uid_of(1)].error == ""
    path = env.claims_dir / "claims.yaml"
    replaced = [claim_doc(i, uid=uid_of(50 + i)) for i in range(4)]
    with path.open("w") as f:  # same inode, rewritten
        yaml.safe_dump_all(replaced, f)
    assert f"has uid {uid_of(51)}" in prepare(env, ref(1)).claims[uid_of(1)].error
    assert prepare(env, ("claim-1", uid_of(51))).claims[uid_of(51)].error == ""


def test_the_same_claim_in_two_files_is_an_error_naming_both(env):
    (env.claims_dir / "copy.yaml").write_text(yaml.safe_dump(claim_doc(0)))
    error = prepare(env, ref(0)).claims[uid_of(0)].error
    assert "claims.yaml" in error
    assert "copy.yaml" in error
    assert env.files() == {}


class SlowSource:
    """A ClaimSource that holds each fetch until released (to catch a call in flight)."""

    def __init__(self, inner: FileClaimSource) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def fetch(self, namespace: str, name: str):
        self.entered.set()
        assert self.release.wait(10)
        return self.inner.fetch(namespace, name)


def test_stop_lets_a_call_in_flight_finish(short_dir):
    env = Env(short_dir)
    slow = SlowSource(FileClaimSource(env.claims_dir, DRIVER))
    server = PluginServer(Plugin(env.layout, slow), env.sockets, driver=DRIVER)
    server.start()
    with ThreadPoolExecutor(max_workers=2) as pool:
        call = pool.submit(prepare, env, ref(0))
        assert slow.entered.wait(10)
        stopping = pool.submit(server.stop, 5)
        time.sleep(0.2)
        assert not env.sockets.registration.exists()  # kubelet stops seeing us first
        assert not stopping.done()
        slow.release.set()
        response = call.result(timeout=10)
        stopping.result(timeout=10)
    assert response.claims[uid_of(0)].error == ""
    assert not env.sockets.dra.exists()


def test_the_prepare_log_record_names_the_claim(env, caplog):
    """Its ``extra``: the JSON line's kind, namespace, name and uid (``kvdev.host.logs``)."""
    with caplog.at_level("INFO", logger="kvdev.host.plugin.service"):
        prepare(env, ref(1))
    [record] = [r for r in caplog.records if "ok" in r.getMessage()]
    assert record.k8s_object == {
        "kind": "ResourceClaim",
        "namespace": "vms",
        "name": "claim-1",
        "uid": uid_of(1),
    }
