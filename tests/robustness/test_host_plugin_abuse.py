"""The real ``kvdev-host serve`` under abuse, over gRPC on its Unix socket (issue 8, item 4).

One plugin process serves claims from a directory; its CDI directory is a small tmpfs. In turn:
a storm of concurrent NodePrepare/NodeUnprepare calls (v1 and v1beta1) on the same and on
different claims, mixed with claims that cannot be prepared (missing, wrong UID); SIGKILL of
the server while it writes, then a restart on the stale socket; the CDI tmpfs filled up; the
CDI tmpfs remounted read-only. A reader polls every file all along. Asserted: every claim
gets its own answer (errors name the claim and, for I/O, the path and the cause), no file at
a final path is ever partial, and the next call after each fault recovers: prepare succeeds
and unprepare leaves nothing behind (temporary files of killed writers included). The unit
tests (tests/unit/host/test_plugin.py, tests/adapters/test_writer*.py) cover the same pieces
in process; this suite is the process as kubelet sees it.
"""

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import psutil
import pytest
import yaml

import hostlab
from hostlab import DRIVER, allocated_claim, fill, vf_slice
from kvdev.host.proto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from kvdev.schema import DEVICE_METADATA, decode_stream

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs"),
]

CLAIMS = 8
VERSIONS = {"v1": (dra_v1_pb2, dra_v1_pb2_grpc), "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)}
RSS_BOUND = 300 * 2**20


def uid_of(i):
    return hostlab.uid_of(i, base=0xAB05E)


def objects():
    return vf_slice(CLAIMS), [allocated_claim(i, uid=uid_of(i)) for i in range(CLAIMS)]


class Host:
    """Directories, the CDI tmpfs and the serving process."""

    def __init__(self, root):
        self.root = root
        self.claims_dir = root / "claims"
        self.plugin_dir = root / "plugin"
        self.cdi_dir = root / "cdi"
        self.registry = root / "registry"
        self.claims_dir.mkdir()
        slice_, claims = objects()
        (self.claims_dir / "slices.yaml").write_text(yaml.safe_dump(slice_))
        (self.claims_dir / "claims.yaml").write_text(yaml.safe_dump_all(claims))
        self.cdi_dir.mkdir()
        mount = ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(self.cdi_dir)]
        done = subprocess.run(mount, capture_output=True, text=True, check=False)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
        self.proc = None
        self.process = None
        self.log = root / "serve.log"

    def start(self):
        cmd = [sys.executable, "-m", "kvdev.host", "serve", "--driver", DRIVER]
        cmd += ["--claims-dir", str(self.claims_dir), "--plugin-data-dir", str(self.plugin_dir)]
        cmd += ["--cdi-dir", str(self.cdi_dir), "--registry-dir", str(self.registry)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        line = self.proc.stdout.readline().decode()
        assert line.startswith("serving"), (line, self.log.read_text()[-2000:])
        self.process = psutil.Process(self.proc.pid)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=15) == 0, self.log.read_text()[-2000:]
            self.proc.stdout.close()

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        subprocess.run(["umount", "-l", str(self.cdi_dir)], capture_output=True, check=False)

    def call(self, verb, refs, version="v1", timeout=30):
        """{uid: error} of one NodePrepare/NodeUnprepareResources call."""
        pb2, grpc_mod = VERSIONS[version]
        claims = [pb2.Claim(namespace="vms", name=name, uid=uid) for name, uid in refs]
        with grpc.insecure_channel(f"unix:{self.plugin_dir / 'dra.sock'}") as channel:
            stub = grpc_mod.DRAPluginStub(channel)
            if verb == "prepare":
                reply = stub.NodePrepareResources(
                    pb2.NodePrepareResourcesRequest(claims=claims), timeout=timeout
                )
            else:
                reply = stub.NodeUnprepareResources(
                    pb2.NodeUnprepareResourcesRequest(claims=claims), timeout=timeout
                )
        return {uid: reply.claims[uid].error for uid in reply.claims}

    def files(self):
        found = []
        for base in (self.plugin_dir, self.cdi_dir):
            for top, _, names in os.walk(base):  # tolerates directories removed meanwhile
                found += [Path(top, n) for n in names if not n.endswith(".sock")]
        return found

    def partial_files(self):
        """Files at a final path whose content is not complete (temporary files excluded)."""
        bad = []
        for path in self.files():
            if not path.name.endswith(".json"):
                continue  # temporary files, locks, the disk-full filler
            try:
                data = path.read_bytes()
                if path.name == "metadata.json":
                    decode_stream(data, DEVICE_METADATA)
                else:
                    json.loads(data)
            except FileNotFoundError:
                continue  # removed between listing and reading
            except Exception as e:  # noqa: BLE001 - any failure to parse is the finding
                bad.append(f"{path}: {e!r}")
        return bad

    def leftovers(self):
        """What remains once every claim is unprepared (locks are kept by design)."""
        return sorted(str(p) for p in self.files() if not p.name.endswith(".lock"))


def ref(i):
    return (f"claim-{i}", uid_of(i))


class Reader(threading.Thread):
    """Reads every file until stopped; keeps what was partial."""

    def __init__(self, host):
        super().__init__(daemon=True)
        self.host, self.stop, self.bad, self.reads = host, threading.Event(), [], 0

    def run(self):
        while not self.stop.is_set():
            self.bad += self.host.partial_files()
            self.reads += 1


@pytest.fixture
def host():
    root = Path(tempfile.mkdtemp(prefix="kvdev-pa-", dir="/tmp"))  # socket paths stay short
    host = Host(root)
    try:
        yield host
    finally:
        host.close()
        shutil.rmtree(root, ignore_errors=True)


def storm(host, row, rng, calls):
    """Concurrent random prepare/unprepare of the same and different claims, good and bad."""
    missing, wrong_uid = ("claim-404", uid_of(404)), ("claim-1", uid_of(999))

    def one(seed):
        local = random.Random(seed)  # noqa: S311 - test data
        refs = [ref(local.randrange(CLAIMS)) for _ in range(local.randrange(1, 4))]
        refs = list(dict.fromkeys(refs))
        bad = local.random() < 0.2
        verb = local.choice(["prepare", "prepare", "unprepare"])
        answer = host.call(
            verb, [*refs, missing, wrong_uid] if bad else refs, local.choice(list(VERSIONS))
        )
        return verb, refs, bad, answer

    problems = []
    with ThreadPoolExecutor(max_workers=16) as pool:
        for verb, refs, bad, answer in pool.map(one, [rng.randrange(10**9) for _ in range(calls)]):
            row.inputs += len(refs) + (2 if bad else 0)
            for _, uid in refs:
                if answer.get(uid) != "":
                    problems.append(f"{verb} {uid}: {answer.get(uid)!r}")
            if bad and verb == "prepare":
                if "claim-404 not found" not in answer[uid_of(404)]:
                    problems.append(f"missing claim: {answer[uid_of(404)]!r}")
                if f"has uid {uid_of(1)}" not in answer[uid_of(999)]:
                    problems.append(f"wrong uid: {answer[uid_of(999)]!r}")
            problems += [f"{u}: {e}" for u, e in answer.items() if "internal error" in e]
    return problems


def all_refs():
    return [ref(i) for i in range(CLAIMS)]


def test_serve_under_concurrency_kills_disk_full_and_read_only(host, long_run, report):
    row = report("host-plugin-abuse (long)" if long_run else "host-plugin-abuse")
    rng = random.Random(4)  # noqa: S311 - test data
    host.start()
    reader = Reader(host)
    reader.start()
    try:
        max_rss = concurrency(host, row, rng, 400 if long_run else 120)
        max_rss = max(max_rss, kills(host, row, rng, 12 if long_run else 4))
        disk_full(host, row)
        read_only(host, row)
        assert host.call("unprepare", all_refs()) == {uid_of(i): "" for i in range(CLAIMS)}
        assert host.leftovers() == []
        max_rss = max(max_rss, host.process.memory_info().rss)
        row.max_rss_mb = round(max_rss / 2**20, 1)
        assert max_rss < RSS_BOUND
        host.stop()
    finally:
        reader.stop.set()
        reader.join(timeout=30)
        row.unintended = len(reader.bad)
        row.crashes = host.log.read_text().count("Traceback")
    assert reader.bad == [], reader.bad[:10]
    assert reader.reads > 0
    assert row.crashes == 0, host.log.read_text()[-3000:]


def concurrency(host, row, rng, calls):
    """The storm; fds and RSS of the server around it. Returns the RSS seen."""
    assert host.call("prepare", all_refs()) == {uid_of(i): "" for i in range(CLAIMS)}
    row.fds_before = host.process.num_fds()
    problems = storm(host, row, rng, calls)
    rss = host.process.memory_info().rss
    assert problems == [], problems[:10]
    assert host.call("prepare", all_refs()) == {uid_of(i): "" for i in range(CLAIMS)}
    row.fds_after = host.process.num_fds()
    assert row.fds_after <= row.fds_before + 2, (row.fds_before, row.fds_after)
    assert host.call("unprepare", all_refs()) == {uid_of(i): "" for i in range(CLAIMS)}
    assert host.leftovers() == []
    return rss


def kills(host, row, rng, rounds):
    """SIGKILL the server while it writes, restart it on the stale socket, recover."""
    rss, landed = 0, 0
    for _ in range(rounds):
        hammer = threading.Thread(target=_hammer, args=(host,), daemon=True)
        hammer.start()
        time.sleep(0.2 + rng.random() * 0.4)
        rss = max(rss, host.process.memory_info().rss)
        host.kill()
        hammer.join(timeout=30)
        row.inputs += 1
        landed += any(p.name == "metadata.json" for p in host.files())
        assert host.partial_files() == []
        host.start()
        assert host.call("prepare", all_refs()) == {uid_of(i): "" for i in range(CLAIMS)}
        assert host.call("unprepare", all_refs()) == {uid_of(i): "" for i in range(CLAIMS)}
        assert host.leftovers() == [], "a killed writer's files outlived unprepare"
    assert landed > 0  # some kills did land while claims were prepared
    return rss


def disk_full(host, row):
    """A full CDI file system: the claims that need a write fail alone, then recover."""
    assert host.call("prepare", [ref(0)]) == {uid_of(0): ""}
    filler = host.cdi_dir / "filler"
    assert fill(filler) == errno.ENOSPC
    answer = host.call("prepare", [ref(0), ref(1), ref(2)])
    row.inputs += 3
    assert answer[uid_of(0)] == ""  # prepared before and unchanged: nothing to write
    for i in (1, 2):
        assert f"vms/claim-{i}" in answer[uid_of(i)]
        assert "No space left on device" in answer[uid_of(i)]
        assert str(host.cdi_dir) in answer[uid_of(i)]
    assert host.partial_files() == []
    assert not list(host.cdi_dir.glob("*.tmp"))
    filler.unlink()
    assert host.call("prepare", [ref(1), ref(2)]) == {uid_of(1): "", uid_of(2): ""}


def read_only(host, row):
    """A read-only CDI directory: writes and removals fail naming it, then recover."""
    subprocess.run(["mount", "-o", "remount,ro", str(host.cdi_dir)], check=True)
    try:
        answer = host.call("prepare", [ref(3), ref(0)])
        gone = host.call("unprepare", [ref(1)])
        row.inputs += 3
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(host.cdi_dir)], check=True)
    assert answer[uid_of(0)] == ""
    assert "vms/claim-3" in answer[uid_of(3)]
    assert "Read-only file system" in answer[uid_of(3)]
    assert str(host.cdi_dir) in answer[uid_of(3)]
    assert "vms/claim-1" in gone[uid_of(1)]
    assert "Read-only file system" in gone[uid_of(1)]
    assert host.partial_files() == []
    assert host.call("prepare", [ref(3)]) == {uid_of(3): ""}
    assert host.call("unprepare", [ref(1)]) == {uid_of(1): ""}


def _hammer(host):
    """Prepare and unprepare every claim in a loop until the server goes away."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        for k in range(1000):
            verb = "prepare" if k % 2 == 0 else "unprepare"
            try:
                list(pool.map(lambda r, v=verb: host.call(v, [r], timeout=5), all_refs()))
            except grpc.RpcError:
                return  # killed
