"""The page "Try the operator path locally" (docs/quickstart/local-operator.md), run as written.

Every command of the page (the ``$ `` lines of its ``console`` blocks, with their ``\\``
continuation lines) runs in order in one bash shell at the checkout's root, as in a reader's
terminal, from ``make cluster`` to ``make cluster-down``. Three substitutions keep the walk off
a developer's own cluster and ports: ``build/cluster`` is a temporary directory (``make
cluster`` honours ``CLUSTER_DIR``), ``dist/`` another, and the controller's 127.0.0.1:8080 a free
one. The line ``make cluster`` prints after ``next:`` is run too, and must reach the cluster it
just started.

An output the page shows whole (no ``...`` cut, no AGE column, no path of the reader's clone)
must be what the command printed, but for the random suffix of a generated name.

No wall-clock bound: before a ``kubectl wait`` runs, the same command with ``--timeout=0s``
(one check of the API server) is polled a bounded number of times until it succeeds, so the
page's own timeout is never what passes the test. The page's server-side dry run of the VMI is
polled the same way until the wiring policy acts (the API server loads a new policy
asynchronously; the page says to run it again).

Then the outcomes, read from the API server before the teardown: the VMI wired by the chart's
policy, ``kvdev-vm1`` owned by it with the claim's stream and the hints, ``kvdev.io/sources``
saying the stream was reconstructed, and no RBAC refusal in the controller's log; after the
teardown, the controller and the control plane stopped. The transcript is printed (``-s``).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from chartlab import helm_binary
from clusterlab import refusals
from controlplane import ClusterError, build, free_port

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "quickstart" / "local-operator.md"
TEARDOWN = "Tear down"
# A failure guard for one command (make cluster starts the control plane: seconds, or
# minutes on a busy machine); never a speed claim.
COMMAND_GUARD = 900.0
POLLS = 1200  # checks of the API server before a wait or a dry run is given up


@dataclass
class Command:
    section: str
    text: str
    shown: list[str] = field(default_factory=list)  # the output the page shows under it


def commands(page: str) -> list[Command]:
    """The ``$ `` commands of the page's console blocks, in order, with their section."""
    out: list[Command] = []
    section, block, pending = "", False, None
    for line in page.splitlines():
        if not block and line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("```"):
            block = line.strip() == "```console" if not block else False
        elif block and pending is not None:
            pending += "\n" + line
            if not line.endswith("\\"):
                out.append(Command(section, pending))
                pending = None
        elif block and line.startswith("$ "):
            if line.endswith("\\"):
                pending = line[2:]
            else:
                out.append(Command(section, line[2:]))
        elif block and out:
            out[-1].shown.append(line)
    return out


class Shell:
    """One ``bash`` read from a pipe: each ``run`` returns the command's exit status and output."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.run("exec 2>&1")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # end of output: bash exited

    def run(self, command: str) -> tuple[int, str]:
        assert self.proc.stdin is not None
        marker = f"__walk_{uuid.uuid4().hex}__"
        self.proc.stdin.write(f"{command}\nprintf '\\n{marker} %s\\n' $?\n")
        self.proc.stdin.flush()
        out: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=COMMAND_GUARD)
            except queue.Empty:
                pytest.fail(f"{command!r}: no end after {COMMAND_GUARD:.0f} s:\n{''.join(out)}")
            if line == "":
                pytest.fail(f"{command!r}: the shell exited:\n{''.join(out)}")
            if line.startswith(marker):
                text = "".join(out)
                return int(line.split()[1]), text.removesuffix("\n").removesuffix("\n")
            out.append(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def poll(shell: Shell, command: str, done: Any, what: str) -> str:
    """Run ``command`` until ``done(status, output)``; at most POLLS times."""
    for _ in range(POLLS):
        status, output = shell.run(command)
        if done(status, output):
            return output
        time.sleep(0.1)  # the pace of the polls, not a synchronisation
    pytest.fail(f"{what}: not after {POLLS} polls; last output:\n{output}")


@pytest.fixture
def walk_dirs(tmp_path: Path) -> Iterator[dict[str, Path]]:
    dirs = {"cluster": tmp_path / "cluster", "dist": tmp_path / "dist"}
    yield dirs
    # whatever the walk left running (a failed step skips the teardown)
    subprocess.run(
        ["make", "-s", "cluster-down", f"CLUSTER_DIR={dirs['cluster']}"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )


def test_the_page_lists_the_walk_in_order():
    texts = [c.text for c in commands(PAGE.read_text())]
    assert texts[0] == "make cluster"
    assert texts[-2:] == ["make cluster-down", "rm -rf build/cluster"]
    assert any(t.startswith("helm install kvdev dist/kvdev-") for t in texts)
    assert "kubectl label namespace vms kvdev.io/wire-vmis=true" in texts


# The parts of an output that differ from run to run: a generated name's random suffix, and
# a ReplicaSet's pod-template hash (it changes with any value of the chart's Deployment).
RANDOM = re.compile(r"-[bcdfghjklmnpqrstvwxz2-9]{5}\b|-[bcdfghjklmnpqrstvwxz2-9]{9,10}(?=-)")


def stable(shown: list[str]) -> bool:
    """Whether the page shows this output whole and the same every run (no cut, no age, no
    path of the reader's clone)."""
    text = "\n".join(shown)
    volatile = r"\bAGE\b|LAST SEEN|LAST DEPLOYED|/home/you|\(pid \d+\)"
    cut = any(line.strip() == "..." for line in shown)
    return not cut and not re.search(volatile, text)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is no zombie (an orphan waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[-1][0] != "Z"


def ready_for(shell: Shell, text: str) -> None:
    """Before the page's ``text`` runs: poll until it cannot fail for being early."""
    if text.startswith("kubectl") and " wait " in text:
        once = re.sub(r"--timeout=\S+", "--timeout=0s", text)
        poll(shell, once, lambda status, _: status == 0, f"{text!r}")
    elif "--dry-run=server" in text:
        poll(shell, text, lambda _, out: "kvdev-metadata" in out, "the wiring policy")
    elif "launcher.yaml" in text:  # a pod needs its namespace's default ServiceAccount
        account = "kubectl -n vms get serviceaccount default"
        poll(shell, account, lambda status, _: status == 0, account)


def swapped(text: str, swaps: list[tuple[str, str]]) -> str:
    for old, new in swaps:
        text = text.replace(old, new)
    return text


def step(shell: Shell, command: Command, swaps: list[tuple[str, str]], log: list[str]) -> str:
    """Run one of the page's commands (its paths swapped); fail unless it succeeds, or unless
    it prints what the page shows when the page shows it whole."""
    text = swapped(command.text, swaps)
    ready_for(shell, text)
    status, output = shell.run(text)
    log.append(f"$ {command.text}\n{output}")
    if not text.startswith("kubectl auth can-i"):  # exit 1 is its "no"
        assert status == 0, f"{command.section}: {text!r} exited {status}:\n{output}"
    if stable(command.shown):
        shown = swapped("\n".join(command.shown), swaps)
        assert RANDOM.sub("-x", output) == RANDOM.sub("-x", shown), text
    return output


def the_printed_next_step_works(shell: Shell, printed: str) -> None:
    """The line ``make cluster`` printed after ``next:`` reaches the cluster it started."""
    lines = [line for line in printed.splitlines() if line.startswith("next: ")]
    assert lines, printed
    status, answer = shell.run(lines[0].removeprefix("next: "))
    assert status == 0, answer
    assert shell.run("kubectl get --raw=/readyz") == (0, "ok")


def test_the_local_operator_walk_works_as_written(walk_dirs):
    if shutil.which("go") is None:
        pytest.skip("the real control plane is built from source and needs Go (1.26) on PATH")
    try:
        build()  # cached; the walk's make cluster then only starts it
    except ClusterError as e:
        pytest.fail(str(e))
    helm_binary()  # the page's PATH includes build/helm/bin (make helm)
    cluster, dist = walk_dirs["cluster"], walk_dirs["dist"]
    swaps = [
        ("$PWD/build/cluster", str(cluster)),
        ("build/cluster", str(cluster)),
        ("dist/", f"{dist}/"),
        ("127.0.0.1:8080", f"127.0.0.1:{free_port()}"),
    ]
    env = {k: v for k, v in os.environ.items() if k not in {"KUBECONFIG", "MAKEFLAGS"}}
    shell = Shell(REPO, {**env, "CLUSTER_DIR": str(cluster)})
    steps = commands(PAGE.read_text())
    log: list[str] = []
    began = time.monotonic()
    try:
        for command in [c for c in steps if c.section != TEARDOWN]:
            output = step(shell, command, swaps, log)
            if command.text == "make cluster":
                the_printed_next_step_works(shell, output)
        outcomes(cluster)
        status, pid = shell.run("echo $CONTROLLER")
        assert status == 0
        assert pid.isdigit(), pid
        pids = [int(pid), *json.loads((cluster / "state.json").read_text())["pids"].values()]
        for command in [c for c in steps if c.section == TEARDOWN]:
            step(shell, command, swaps, log)
        shell.run(f"wait {pid}")  # reaped: the controller exits on SIGTERM
        assert [p for p in pids if running(p)] == []
        assert not cluster.exists()
        took = time.monotonic() - began
        print(f"\nthe walk: {len(steps)} commands in {took:.1f} s (the build cached)")
    finally:
        shell.close()
        print("\n" + "\n".join(log))


def outcomes(cluster: Path) -> None:
    """What the walk made, read back as the admin."""
    from kubernetes import client, config  # noqa: PLC0415

    kube = config.new_client_from_config(str(cluster / "kubeconfig"))
    custom = client.CustomObjectsApi(kube)
    vmi = custom.get_namespaced_custom_object(
        "kubevirt.io", "v1", "vms", "virtualmachineinstances", "vm1"
    )
    assert {"name": "kvdev-metadata", "configMap": {"name": "kvdev-vm1", "optional": True}} in (
        vmi["spec"]["volumes"]
    )
    cm = client.CoreV1Api(kube).read_namespaced_config_map("kvdev-vm1", "vms")
    stream = "vm1-devices.nic-1.sriov.example.com-metadata.json"
    assert set(cm.data) == {stream, "guest-hints.json"}
    assert json.loads(cm.metadata.annotations["kvdev.io/sources"]) == {stream: "reconstructed"}
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == (
        "VirtualMachineInstance",
        "vm1",
        vmi["metadata"]["uid"],
    )
    assert "0000:3b:02." in cm.data[stream]
    assert "02:00:00:3b:02:01" in cm.data["guest-hints.json"]
    log = (cluster / "kvdev-controller.log").read_text(errors="replace")
    assert not refusals(log), log
