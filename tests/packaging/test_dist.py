"""What make dist leaves in dist/ (packaging/pkg/dist.sh): every file a user installs, each in
SHA256SUMS, and the kvdev-host image run from its own archive.

These read a finished dist/, named by ``KVDEV_DIST`` (make dist sets it); without it every test
here skips, so a plain ``pytest`` never judges a stale artifact. The image test unpacks the OCI
archive as a runtime would (index.json -> manifest -> config and layers, each blob checked
against its digest, whiteouts applied), never the build's own root file system, and runs the
image's entrypoint in a chroot as the image's user: needs root.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from kvdev import __version__

DIST = os.environ.get("KVDEV_DIST")
pytestmark = pytest.mark.skipif(not DIST, reason="KVDEV_DIST is not set (make dist sets it)")

V = __version__
ARTIFACTS = [
    f"kvdev_{V}_all.deb",
    f"kvdev-{V}-1.noarch.rpm",
    f"el9/kvdev-{V}-1.noarch.rpm",
    f"kvdev-{V}-py3-none-any.whl",
    f"kvdev-{V}.tar.gz",
    f"kvdev-{V}.tgz",
    f"kvdev-host_{V}.oci.tar",
]
# at most this many bytes are read from the archive for one JSON blob (index, manifest, config)
JSON_BOUND = 1 << 20


def dist() -> Path:
    assert DIST
    return Path(DIST)


def test_sha256sums_lists_every_artifact_with_its_hash():
    lines = (dist() / "SHA256SUMS").read_text().splitlines()
    listed = {}
    for line in lines:
        digest, name = line.split("  ", 1)
        listed[name] = digest
    assert sorted(listed) == sorted(ARTIFACTS)
    for name, digest in listed.items():
        assert hashlib.sha256((dist() / name).read_bytes()).hexdigest() == digest, name


def test_the_chart_package_carries_kvdevs_version_and_names_the_image():
    with tarfile.open(dist() / f"kvdev-{V}.tgz") as tar:
        chart = yaml.safe_load(tar.extractfile("kvdev/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(tar.extractfile("kvdev/values.yaml").read())  # type: ignore[union-attr]
    assert chart["version"] == chart["appVersion"] == V
    # tag "" is the appVersion: the image below, by the name its archive gives it
    assert (values["image"]["repository"], values["image"]["tag"]) == ("kvdev-host", "")


def test_the_wheel_and_sdist_are_kvdevs_version_with_the_host_extra():
    with zipfile.ZipFile(dist() / f"kvdev-{V}-py3-none-any.whl") as whl:
        meta = whl.read(f"kvdev-{V}.dist-info/METADATA").decode()
        assert "kvdev/host/__main__.py" in whl.namelist()
    assert f"Version: {V}" in meta
    assert "Provides-Extra: host" in meta
    with tarfile.open(dist() / f"kvdev-{V}.tar.gz") as tar:
        assert f"kvdev-{V}/pyproject.toml" in tar.getnames()


class Archive:
    """An OCI image layout in one tar: blobs read by digest, each checked."""

    def __init__(self, path: Path) -> None:
        self.tar = tarfile.open(path)  # noqa: SIM115 - closed by the test
        self.names = {m.name.removeprefix("./"): m for m in self.tar.getmembers()}

    def read(self, name: str, bound: int | None = None) -> bytes:
        member = self.names[name]
        assert bound is None or member.size <= bound, (name, member.size)
        f = self.tar.extractfile(member)
        assert f is not None, name
        return f.read()

    def blob(self, descriptor: dict[str, object], bound: int | None = None) -> bytes:
        algorithm, _, hexdigest = str(descriptor["digest"]).partition(":")
        assert algorithm == "sha256"
        data = self.read(f"blobs/sha256/{hexdigest}", bound)
        assert hashlib.sha256(data).hexdigest() == hexdigest
        assert len(data) == descriptor["size"]
        return data


def unpack(archive: Archive, root: Path) -> tuple[dict, dict, dict]:
    """The image's root file system under ``root``; its index entry, manifest and config."""
    layout = json.loads(archive.read("oci-layout", JSON_BOUND))
    assert layout["imageLayoutVersion"] == "1.0.0"
    index = json.loads(archive.read("index.json", JSON_BOUND))
    (entry,) = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    manifest = json.loads(archive.blob(entry, JSON_BOUND))
    config = json.loads(archive.blob(manifest["config"], JSON_BOUND))
    root.mkdir()
    for layer in manifest["layers"]:
        data = archive.blob(layer)
        if layer["mediaType"].endswith("+gzip"):
            data = gzip.decompress(data)
        else:
            assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                path = Path(member.name)
                if path.name == ".wh..wh..opq":  # opaque: the lower layers' entries go
                    for child in (root / path.parent).glob("*"):
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
                elif path.name.startswith(".wh."):
                    gone = root / path.parent / path.name.removeprefix(".wh.")
                    shutil.rmtree(gone) if gone.is_dir() else gone.unlink(missing_ok=True)
        # GNU tar as root: owners, modes, device nodes and links, as a runtime lays them out
        subprocess.run(
            ["tar", "-C", str(root), "-xpf", "-", "--numeric-owner", "--exclude=*/.wh.*"],
            input=data,
            check=True,
        )
    return entry, manifest, config


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
def test_the_image_runs_its_entrypoint_as_its_non_root_user(tmp_path):
    archive = Archive(dist() / f"kvdev-host_{V}.oci.tar")
    try:
        entry, manifest, config = unpack(archive, tmp_path / "rootfs")
    finally:
        archive.tar.close()
    # named kvdev-host:<version>: the chart's default image
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == V
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == V
    assert labels["org.opencontainers.image.source"] == "https://github.com/kvdev/kvdev"
    assert manifest["annotations"]["org.opencontainers.image.version"] == V
    assert config["config"]["Entrypoint"] == ["kvdev-host"]
    user = config["config"]["User"]
    uid, _, gid = user.partition(":")
    assert int(uid) != 0
    assert int(gid) != 0
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    root = tmp_path / "rootfs"
    assert not (root / "tmp" / "kvdev-wheels").exists()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "chroot",
                f"--userspec={user}",
                str(root),
                "/usr/bin/env",
                "-i",
                f"PATH={env['PATH']}",
                "HOME=/nonexistent",
                *config["config"]["Entrypoint"],
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    version = run("--version")
    assert version.returncode == 0, version.stderr
    assert V in version.stdout
    for command, flag in (("controller", "--leader-elect"), ("serve", "--driver")):
        helped = run(command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert flag in helped.stdout
    whoami = subprocess.run(
        ["chroot", f"--userspec={user}", str(root), "/usr/bin/id", "-un"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert whoami.stdout.strip() == "kvdev"
    print(
        f"image: {len(manifest['layers'])} layer(s), "
        f"{sum(int(layer['size']) for layer in manifest['layers']) / 1e6:.1f} MB compressed"
    )
