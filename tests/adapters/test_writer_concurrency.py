"""kvdev.host.publish.writer under contention and crashes: threads, processes, SIGKILL.

A reader polls the files all along: it must never see a partial CDI spec (replaced by rename),
nor a partial metadata file that it reads twice the same (rewritten in place, as a bind mount
needs: one read during the one write may see a mix, which a second read tells).
"""

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kvdev.errors import SchemaError
from kvdev.host.k8s import load
from kvdev.host.publish import writer
from kvdev.schema import DEVICE_METADATA, decode_stream

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "packaging" / "examples" / "host"
UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
DRIVER = "sriov.example.com"
OPS = 25

# One process's work: random prepare / update / unprepare of the same claim, then exit 0.
WORKER = """
import random, sys
from pathlib import Path
from kvdev.host.publish import writer
from kvdev.host.k8s import ResourceClaim, load
examples, plugins, cdi, ops, seed, claims = sys.argv[1:7]
objs = load(Path(claims).read_text(), "c")
claim = next(o for o in objs if o.metadata.name == "vm1-devices")
slices = load(Path(examples, "slices.yaml").read_text(), "s")
lay = writer.Layout("sriov.example.com", Path(plugins), Path(cdi))
rng = random.Random(int(seed))
print("ready", flush=True)
for _ in range(int(ops)):
    op = rng.choice(["prepare", "update", "unprepare"])
    if op == "unprepare":
        writer.unprepare("vms", "vm1-devices", claim.metadata.uid, lay)
    else:
        getattr(writer, op)(claim, slices, lay)
"""


TWO_VFS = REPO / "tests" / "data" / "host-prepare" / "claims-two-vfs.yaml"  # "nics": 2 VFs


def objects():
    claim = next(c for c in load(TWO_VFS.read_text(), "c") if c.metadata.name == "vm1-devices")
    return claim, list(load((EXAMPLES / "slices.yaml").read_text(), "s"))


def worker(tmp_path, ops, seed):
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            WORKER,
            str(EXAMPLES),
            str(tmp_path / "p"),
            str(tmp_path / "cdi"),
            str(ops),
            str(seed),
            str(TWO_VFS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Reader(threading.Thread):
    """Reads the claim's files in a loop; records anything partial or invalid."""

    def __init__(self, lay):
        super().__init__(daemon=True)
        self.meta = lay.metadata_root / "vms_vm1-devices" / "nics" / "metadata.json"
        self.spec = lay.cdi_dir / f"{DRIVER}_metadata_{UID}_nics.json"
        self.stop = threading.Event()
        self.bad: list[str] = []
        self.seen = 0
        self.torn = 0  # reads of a metadata file during its in-place write

    def run(self):
        while not self.stop.is_set():
            for path, check in ((self.meta, self._meta), (self.spec, json.loads)):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                try:
                    check(data)
                    self.seen += 1
                except (SchemaError, ValueError, AssertionError) as e:
                    if path == self.meta and self._read_again(path) != data:
                        self.torn += 1  # read during the in-place write: the next read tells
                        continue
                    self.bad.append(f"{path.name}: {e}")

    @staticmethod
    def _read_again(path):
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    @staticmethod
    def _meta(data):
        doc = decode_stream(data, DEVICE_METADATA)
        assert not doc.warnings, doc.warnings
        if doc.document.metadata.generation < 1:
            raise ValueError("generation below 1")


def consistent(lay):
    """The on-disk state is either fully prepared or fully gone, and nothing is half-written."""
    claim_dir = lay.metadata_root / "vms_vm1-devices"
    spec = lay.cdi_dir / f"{DRIVER}_metadata_{UID}_nics.json"
    meta = claim_dir / "nics" / "metadata.json"
    record = claim_dir / writer.RECORD_FILE
    if record.exists():
        listed = {Path(p) for p in json.loads(record.read_text())["files"]}
        assert listed == {meta, spec}
        assert meta.exists()
        assert spec.exists()
        decode_stream(meta.read_bytes(), DEVICE_METADATA)
    else:
        assert not claim_dir.exists()
        assert not spec.exists()


def test_threads_and_processes_on_one_claim(tmp_path):
    claim, slices = objects()
    lay = writer.Layout(DRIVER, tmp_path / "p", tmp_path / "cdi")
    reader = Reader(lay)
    reader.start()
    errors: list[BaseException] = []

    def loop(seed):
        rng = random.Random(seed)  # noqa: S311 - test data, not secrets
        try:
            for _ in range(OPS):
                op = rng.choice(["prepare", "update", "unprepare"])
                if op == "unprepare":
                    writer.unprepare("vms", "vm1-devices", UID, lay)
                else:
                    getattr(writer, op)(claim, slices, lay)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    procs = [worker(tmp_path, OPS, seed) for seed in (101, 102)]
    threads = [threading.Thread(target=loop, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    outputs = [p.communicate(timeout=120) for p in procs]
    reader.stop.set()
    reader.join(timeout=10)
    assert errors == []
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert reader.bad == []
    assert reader.seen > 0
    assert list(tmp_path.rglob("*.tmp")) == []
    consistent(lay)
    writer.prepare(claim, slices, lay)
    consistent(lay)
    writer.unprepare("vms", "vm1-devices", UID, lay)
    assert sorted(p.name for p in lay.metadata_root.iterdir()) == []
    assert list(lay.cdi_dir.iterdir()) == []


def test_a_writer_killed_at_any_point_leaves_no_partial_file(tmp_path):
    _claim, _slices = objects()
    lay = writer.Layout(DRIVER, tmp_path / "p", tmp_path / "cdi")
    reader = Reader(lay)
    reader.start()
    rng = random.Random(7)  # noqa: S311 - test data, not secrets
    prepared = 0
    for _ in range(12):
        proc = worker(tmp_path, 10_000, rng.randrange(1000))
        assert proc.stdout.readline() == "ready\n"
        time.sleep(rng.random() * 0.05)  # a few operations in, at a random point
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        meta = lay.metadata_root / "vms_vm1-devices" / "nics" / "metadata.json"
        if meta.exists():
            decode_stream(meta.read_bytes(), DEVICE_METADATA)  # complete, never torn
            prepared += 1
        record = lay.metadata_root / "vms_vm1-devices" / writer.RECORD_FILE
        listed = set(json.loads(record.read_text())["files"]) if record.exists() else set()
        on_disk = {str(p) for p in (meta, lay.cdi_dir / f"{DRIVER}_metadata_{UID}_nics.json")}
        assert {p for p in on_disk if Path(p).exists()} <= listed  # unprepare knows them all
    reader.stop.set()
    reader.join(timeout=10)
    assert reader.bad == []
    assert prepared > 0  # the kills did land while the claim was prepared
    writer.unprepare("vms", "vm1-devices", UID, lay)  # also clears temp files of killed writers
    assert [p.name for p in lay.metadata_root.iterdir()] == []
    assert list(lay.cdi_dir.iterdir()) == []
