"""Upstream's own Go code as the tests' judge: the binaries ``tests/upstream/build.sh`` builds.

``upstream_bin(name)`` runs build.sh (cached by go.mod, go.sum and sources) once per test
session under a file lock, so parallel sessions and helpers do not build twice at once, and
returns ``build/upstream/bin/<name>``. Go missing or a failed build fails the test with the
build's own output: nothing is skipped silently.

``publish_configmap(root, data)`` makes ``data`` the version in force of the ConfigMap volume
at ``root`` with kubelet's own code (``build/upstream/bin/configmapvolume``: the configmap
plugin's MakePayload and pkg/volume/util's AtomicWriter at v1.37.2), so a test's volume swaps
``..data`` exactly as a node does.

``KubeletDRA(registry, state)`` runs kubelet's own DRA client (``build/upstream/bin/kubeletdra``:
pkg/kubelet/pluginmanager and pkg/kubelet/cm/dra at v1.37.2) as a process a test scripts, to
drive ``kvdev-host serve`` as a node's kubelet does.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Self

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "tests" / "upstream" / "build.sh"
BIN = ROOT / "build" / "upstream" / "bin"


@functools.cache
def _built() -> Path:
    if shutil.which("go") is None:
        pytest.fail("the upstream oracles need Go (1.26) on PATH: tests/upstream/build.sh")
    BIN.mkdir(parents=True, exist_ok=True)
    with (BIN.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run([str(BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"tests/upstream/build.sh failed:\n{done.stdout}{done.stderr}")
    return BIN


def upstream_bin(name: str) -> Path:
    """``build/upstream/bin/<name>``, built first if go.mod, go.sum or a source changed."""
    path = _built() / name
    if not path.is_file():
        pytest.fail(f"tests/upstream/build.sh built no {name} in {path.parent}")
    return path


def publish_configmap(root: Path, data: dict[str, bytes]) -> Path:
    """Make ``data`` (key -> bytes) the ConfigMap volume's content at ``root``; its version dir.

    A value that is UTF-8 goes in the ConfigMap's ``data``, any other in ``binaryData``, as the
    API server keeps them; kubelet writes both the same way.
    """
    text: dict[str, str] = {}
    binary: dict[str, str] = {}
    for key, value in data.items():
        try:
            text[key] = value.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(value).decode("ascii")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": root.name}}
    configmap.update({"data": text, "binaryData": binary})
    done = subprocess.run(
        [str(upstream_bin("configmapvolume")), "--dir", str(root)],
        input=json.dumps(configmap),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubelet's atomic writer refused the volume {root}: {done.stderr}")
    return root / json.loads(done.stdout)["version"]


class KubeletDRA:
    """Kubelet's own DRA client (``build/upstream/bin/kubeletdra``) as a process to script.

    Its plugin manager watches ``registry`` and registers the DRA plugins that appear there
    with its DRA manager (claim info checkpointed in ``state``); ``call`` sends one command
    (see tests/upstream/cmd/kubeletdra/main.go) and returns the answer. ``offer`` narrows the
    gRPC services a plugin advertises before kubelet's handler sees them. Use ``with``.
    """

    def __init__(self, registry: Path, state: Path, offer: tuple[str, ...] = ()) -> None:
        args = [str(upstream_bin("kubeletdra")), "--registry-dir", str(registry)]
        args += ["--state-dir", str(state), "-v", "3"]
        if offer:
            args += ["--offer", ",".join(offer)]
        self.log = state.parent / f"{state.name}.kubelet.log"
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
            )

    def call(self, op: str, *, check: bool = True, **fields: object) -> dict:
        """Send ``{"op": op, **fields}``; the answer (``check``: fail the test unless ok)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            pytest.fail(f"kubeletdra exited ({self.proc.wait()}):\n{self.log.read_text()}")
        answer: dict = json.loads(line)
        if check and not answer["ok"]:
            pytest.fail(f"kubelet: {op}: {answer['error']}\n{self.log.read_text()[-4000:]}")
        return answer

    def events(self, after: int = 0) -> list[dict]:
        """What kubelet did since event ``after`` (registrations, connections, wipes)."""
        events: list[dict] = self.call("events", after=after).get("events", [])
        return events

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)  # a failure guard: EOF stops it at once
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


class JsonLines:
    """One long-lived upstream judge speaking JSON lines: a request in, its answer out."""

    def __init__(self, name: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(upstream_bin(name)), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.name = name

    def ask(self, request: dict[str, object]) -> dict[str, object]:
        """Send ``request`` as one line; the answer line, parsed."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"{self.name} exited ({self.proc.poll()})"
        answer: dict[str, object] = json.loads(line)
        return answer

    def close(self) -> None:
        """End stdin; the judge must exit 0."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait()
        self.proc.stdout.close()
        assert code == 0, f"{self.name} exited {code}"
