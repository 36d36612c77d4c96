"""The host side of the e2e test: the guest disk and the guest bundle, made with kvdev's tools.

Owns: building/reusing the cached base image (packaging/vm/build-image.sh), making one run's
disk with the freshly built .deb (packaging/vm/make-run-image.sh), and publishing the metadata
the guest reads: with ``kvdev-host prepare``/``update`` + ``bundle`` from the test inputs in
tests/e2e/inputs (``HostSide``, the 9p bundle), or as a KubeVirt cluster does it, with
``kvdev-host controller --once`` rendering a VMI's ConfigMap from tests/e2e/inputs/kubevirt
and kubelet's atomic writer laying it out as a ConfigMap volume (``ClusterSide``, the
directory virtiofsd serves), with what a DRA driver wrote on the node (``DriverNode``:
upstream's kubelet-plugin writer, the ``metadatawriter`` oracle) carried in by
``kvdev-host relay --once``. Must not write metadata files itself: that is what is under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdev.schema.metadata import WRITTEN
from upstreamlab import JsonLines, publish_configmap  # the writer oracle; kubelet's AtomicWriter

REPO = Path(__file__).resolve().parents[2]
VM = REPO / "packaging" / "vm"
INPUTS = Path(__file__).resolve().parent / "inputs"
DRIVER = "nic.e2e.kvdev.io"
NODE = "node-a"  # the KubeVirt path's node: the VMI's and its launcher pod's
RELAY_NAMESPACE = "kvdev-system"  # where the node relay keeps its records
GUEST_SHARE = Path("/mnt/e2e")  # where packaging/vm's mnt-e2e.mount puts the share


@dataclass(frozen=True)
class BaseImage:
    """The cached guest: kernel, initrd, root tree; how long getting it took, and whether built."""

    path: Path
    seconds: float
    built: bool

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.img"


def base_image(suite: str = "trixie") -> BaseImage:
    """Build the base guest image of Debian ``suite``, or reuse the cached one (same recipe)."""
    start = time.monotonic()
    done = subprocess.run(
        [str(VM / "build-image.sh"), "--suite", suite], capture_output=True, text=True, check=False
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"packaging/vm/build-image.sh failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    path = Path(done.stdout.strip().splitlines()[-1])
    return BaseImage(path, seconds, built="cached" not in done.stderr)


def find_deb() -> Path:
    """The guest package: ``$KVDEV_E2E_DEB``, else the newest ``dist/kvdev_*.deb``."""
    given = os.environ.get("KVDEV_E2E_DEB")
    if given:
        return Path(given)
    debs = sorted((REPO / "dist").glob("kvdev_*_all.deb"), key=lambda p: p.stat().st_mtime)
    if not debs:
        raise FileNotFoundError(f"no {REPO}/dist/kvdev_*_all.deb: run `make deb` first")
    return debs[-1]


def package_name(deb: Path) -> str:
    """The binary package's name, as dpkg will know it."""
    return subprocess.run(
        ["dpkg-deb", "--field", str(deb), "Package"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def run_disk(
    base: BaseImage,
    deb: Path,
    out: Path,
    metadata_root: Path | None,
    files: Mapping[str, str | Secret | Symlink] | None = None,
) -> str:
    """One run's root disk: base + ``deb`` (dpkg -i) + an agent.toml + ``files``.

    With ``metadata_root`` the agent reads that (the bundle on the 9p share); without, its
    default root, where the package mounts a VMI's kvdev ConfigMap shared over virtiofs.
    ``files``: absolute guest path -> content (0644), a ``Secret`` (0600: NetworkManager wants
    its keyfiles so) or a ``Symlink`` (how a boot enables a unit the base image has disabled).
    Returns the installed package and version as dpkg reports them.
    """
    extra = out.parent / "extra"
    (extra / "etc" / "kvdev").mkdir(parents=True, exist_ok=True)
    for where, what in (files or {}).items():
        path = extra / where.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, Symlink):
            path.symlink_to(what.target)
        elif isinstance(what, Secret):
            path.write_text(what.text)
            path.chmod(0o600)
        else:
            path.write_text(what)
            path.chmod(0o644)
    root = (
        "# e2e: the guest bundle lives on the host share (kvdev-host bundle --out)\n"
        f'metadata-root = "{metadata_root}"\n'
        if metadata_root is not None
        else "# e2e: the default metadata root (the package mounts the virtiofs share there)\n"
    )
    (extra / "etc" / "kvdev" / "agent.toml").write_text(root + 'log-level = "debug"\n')
    done = subprocess.run(
        [str(VM / "make-run-image.sh"), str(base.path), str(deb), str(out), str(extra)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"make-run-image.sh failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class Secret:
    """A file only root may read, to put in the guest's root (``run_disk``'s ``files``)."""

    text: str


@dataclass(frozen=True)
class Symlink:
    """A symbolic link to put in the guest's root (``run_disk``'s ``files``)."""

    target: str


def kvdev_host(log: Path, *args: str, ok: tuple[int, ...] = (0,)) -> str:
    """Run ``kvdev-host`` (this venv's) with ``args``, logged; its stdout. Fails on an exit
    status not in ``ok``."""
    exe = shutil.which("kvdev-host", path=str(Path(sys.executable).parent)) or "kvdev-host"
    argv = [exe, *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}exit {done.returncode}\n")
    if done.returncode not in ok:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


class HostSide:
    """The node's view: a plugin data dir and CDI dir (prepare), and the bundle (the share)."""

    def __init__(self, work: Path, bundle: Path) -> None:
        self.plugin = work / "plugin"
        self.cdi = work / "cdi"
        self.bundle = bundle
        self.log = work / "kvdev-host.log"

    def _host(self, *args: str) -> None:
        kvdev_host(self.log, *args)

    def _objects(self) -> list[str]:
        return ["-f", str(INPUTS / "claims.yaml"), "-f", str(INPUTS / "slices.yaml")]

    def _dirs(self) -> list[str]:
        return [
            "--driver",
            DRIVER,
            "--plugin-data-dir",
            str(self.plugin),
            "--cdi-dir",
            str(self.cdi),
        ]

    def prepare(self, plan: str) -> None:
        """What kubelet's NodePrepareResources + the VM launcher do before the VM starts."""
        self._host("prepare", *self._objects(), *self._dirs())
        self.publish(plan)

    def update(self, network_data: str, plan: str) -> None:
        """Late network data from the driver (generation + 1), and a changed guest plan."""
        self._host(
            "update", *self._objects(), *self._dirs(), "--network-data", str(INPUTS / network_data)
        )
        self.publish(plan)

    def publish(self, plan: str) -> None:
        """Rebuild the guest bundle from the CDI specs and swap it in atomically."""
        self._host(
            "bundle",
            "--from-cdi",
            str(self.cdi),
            "--host-dir",
            str(self.plugin),
            "--guest-plan",
            str(INPUTS / plan),
            "--out",
            str(self.bundle),
        )


class ClusterSide:
    """A KubeVirt cluster's path: the VMI's ConfigMap as the controller renders it, and the
    ConfigMap volume kubelet keeps of it (the directory virtiofsd shares with the guest).

    ``render`` runs ``kvdev-host controller --once`` on the VMI, its claims and the slices,
    with the ConfigMap stored by the previous render (so generations continue as they do in
    a cluster); ``publish`` swaps a ConfigMap's data into the volume as kubelet does.
    """

    def __init__(self, work: Path, volume: Path) -> None:
        self.inputs = INPUTS / "kubevirt"
        self.volume = volume
        self.stored = work / "configmap.json"
        self.records = work / "relay-records.json"
        self.log = work / "kvdev-host.log"

    def relay(self, cdi: Path) -> None:
        """``kvdev-host relay --once`` on the node's CDI directory (the files beneath the
        ``plugins`` directory beside it): the relay records the controller reads next (each
        driver file's bytes, unchanged)."""
        out = kvdev_host(
            self.log,
            *("relay", "--once", "--node-name", NODE, "--namespace", RELAY_NAMESPACE),
            *("--cdi-dir", str(cdi), "--host-dir", str(cdi.parent / "plugins"), "-o", "json"),
        )
        self.records.write_text(out)

    def render(self, claims: str) -> dict[str, str]:
        """The ConfigMap's data for the VMI with claims ``claims`` and the last relay
        records (if any); stored for the next.

        ``controller --once -o json`` prints a List of the ConfigMaps it would create or
        update: none when the stored one is already right (its data is then kept).
        """
        files = [self.inputs / "vmi.yaml", self.inputs / claims, self.inputs / "slices.yaml"]
        if self.records.exists():
            files.append(self.records)
        if self.stored.exists():
            files.append(self.stored)
        args = [a for f in files for a in ("-f", str(f))]
        argv = ["controller", "--once", "--relay-namespace", RELAY_NAMESPACE, *args, "-o", "json"]
        items = json.loads(kvdev_host(self.log, *argv))
        configmaps = [o for o in items["items"] if o.get("kind") == "ConfigMap"]
        if len(configmaps) > 1:
            raise RuntimeError(f"controller --once rendered {len(configmaps)} ConfigMaps, not 1")
        if configmaps:
            self.stored.write_text(json.dumps(configmaps[0], indent=1))
        stored = json.loads(self.stored.read_text())
        data: dict[str, str] = stored["data"]
        return data

    def publish(self, data: dict[str, str]) -> None:
        """Make ``data`` the ConfigMap volume's content (kubelet's ``..data`` swap)."""
        publish_configmap(self.volume, {k: v.encode() for k, v in data.items()})


class DriverNode:
    """The node's DRA driver, as upstream's kubelet-plugin helper writes for it (v0.37.2).

    Each ``write`` is one state of the node: the ``metadatawriter`` oracle prepares the claim
    (NodePrepareResources over the helper's own socket) and applies the driver's metadata
    updates (``UpdateRequestMetadata``, each one generation + 1) into a fresh plugin data
    directory and CDI directory under ``work/<state>``. The CDI specs and the metadata files
    are upstream's bytes; ``files`` gives each by the ConfigMap key it must land under.
    """

    def __init__(
        self,
        work: Path,
        driver: str,
        claim: dict[str, Any],
        versions: tuple[str, ...] = WRITTEN,
    ) -> None:
        self.work = work
        self.driver = driver
        self.claim = claim
        self.versions = versions  # the helper requires v1beta1 among them (v0.37.2)

    def write(
        self, state: str, devices: list[dict[str, Any]], updates: list[dict[str, Any]]
    ) -> Path:
        """Prepare with ``devices``, then apply ``updates``; the state's CDI directory."""
        top = self.work / state
        oracle = JsonLines("metadatawriter")
        try:
            out = oracle.ask(
                {
                    "driver": self.driver,
                    "pluginDataDir": str(top / "plugins" / self.driver),
                    "cdiDir": str(top / "cdi"),
                    "versions": list(self.versions),
                    "claim": self.claim,
                    "devices": devices,
                    "updates": updates,
                }
            )
        finally:
            oracle.close()
        if out.get("fatal") or out.get("error") or any(out.get("updateErrors") or []):
            raise RuntimeError(f"upstream's metadata writer failed for {state}: {out}")
        return top / "cdi"

    @staticmethod
    def files(cdi: Path) -> dict[str, bytes]:
        """Each file a metadata CDI spec mounts, by its key (``<claim>.<request>.<name>``)."""
        out = {}
        for spec_path in sorted(cdi.glob("*.json")):
            spec = json.loads(spec_path.read_text())
            for dev in spec["devices"]:
                for mount in dev["containerEdits"].get("mounts", []):
                    _, directory, request, name = mount["containerPath"].rsplit("/", 3)
                    out[f"{directory}.{request}.{name}"] = Path(mount["hostPath"]).read_bytes()
        return out
