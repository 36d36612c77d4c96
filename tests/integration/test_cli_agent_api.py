"""`kvdev` status/devices/explain/plan/wait/reconcile against the real local API.

A real `Server` serves a real `Api` over a `Bridge`; the tests `publish()` real `Status` values
built from the pure core's value types, and answer the bridge's asks from a thread as the
agent's loop would. The CLI runs as the installed console script (exit codes) or `cli.main`.
"""

import grp
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from kvdev.guest.api.bridge import Bridge
from kvdev.guest.api.routes import Api
from kvdev.guest.api.server import Server
from kvdev.guest.cli import main as cli
from kvdev.guest.cli.client import LOOK
from kvdev.guest.core import steps as s
from kvdev.guest.core.matching import Binding, Evidence, Matching, MatchState
from kvdev.guest.core.observed import Address, GuestDevice, Link, NetState, Nic, Route
from kvdev.guest.core.planning import Blocked, Desired, DesiredRoute, Plan
from kvdev.guest.core.status import ClaimStatus, MetadataState, summarize
from kvdev.guest.views import encode
from kvdev.guest.views.tables import WIDE_COLUMNS
from kvdev.schema.described import DescribedDevice

KVDEV = shutil.which("kvdev") or str(Path(sys.executable).parent / "kvdev")
REF = "vm1-devices/nics/sriov.example.com/node-a/vf-1"
RDMA_REF = "vm1-devices/nics/rdma/rdma.example.com/node-a/mlx-0"
MAC = "02:00:00:3b:02:01"
NOBODY = [  # uid/gid 65534 by number: no passwd or group entry needed
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
]
STATS = {"eth1": {"rxBytes": 1536, "txBytes": 200, "speedMbps": 25000}}
STEPS = (
    s.Rename(11, "eth1", REF, "the hints ask for this name", "data0"),
    s.SetMtu(11, "eth1", REF, "the hints ask for it", 9000),
)
PLAN = Plan(STEPS, (), (Blocked(RDMA_REF, "eth2", "name 'data0' is held by eth2"),))


def described(request, driver, name):
    return DescribedDevice("vm1-devices", "vms", None, request, driver, "node-a", name, 3)


V1BETA1 = "metadata.resource.k8s.io/v1beta1"


def status(*, converged=True, pending=False, claims=None, routes=(), seen_routes=(), twin=False):
    nic = GuestDevice("0000:07:00.0", "15b3", "101e", "020000", "mlx5_core", 0)
    nic = replace(nic, nics=(Nic("eth1", 11, MAC),))
    vf = described("nics", "sriov.example.com", "vf-1")
    vf = Binding(vf, MatchState.BOUND, nic, (Evidence("mac", f"{MAC} on eth1"),))
    rdma = described("nics/rdma", "rdma.example.com", "mlx-0")
    why = "no guest NIC has MAC 0c:42:a1:5e:00:01"
    rdma = Binding(rdma, MatchState.MISSING, candidates=("0000:08:00.0",), reason=why)
    mtu, steps = (9000, STEPS) if pending else (None, ())
    want = Desired(REF, 11, "eth1", "vm1-devices.nics.vf-1", mtu, ("10.1.0.5/24",), routes)
    link = Link(11, "eth1", MAC, mtu=1500, up=True, altnames=("vm1-devices.nics.vf-1",))
    claims = claims or (ClaimStatus("vm1-devices", "vms", None, 3, "/run/dra/nics.json", V1BETA1),)
    bindings = (vf,) if converged else (vf, rdma)
    if twin:  # a second claim with a device of the same name
        other = DescribedDevice(
            "vm1-more", "vms", None, "nics", "sriov.example.com", "node-b", "vf-1", 1
        )
        bindings += (Binding(other, MatchState.MISSING, reason="no guest NIC has its MAC"),)
    return summarize(
        Matching(bindings, ()),
        Plan(steps, (want,), ()),
        [],
        MetadataState(claims=claims),
        reconcile=7,
        dry_run=pending,
        state=NetState((link,), (Address(11, "10.1.0.5/24"),), seen_routes),
    )


class Agent:
    """A real server and API over a bridge; ``answering()`` plays the loop's part."""

    def __init__(self, path):
        self.path, self.bridge, self.asked = path, Bridge(), []
        # A group no host has: the socket keeps our own group, whatever groups this host has.
        api = Api(self.bridge, interface_stats=lambda _names: STATS)
        self.server = Server(api.handle, path=path, group="kvdev-test-no-such-group")

    @contextmanager
    def answering(self):
        done = threading.Event()

        def loop():
            while not done.is_set():
                if select.select([self.bridge.fileno()], [], [], 0.05)[0]:
                    for ask in self.bridge.drain():
                        self.asked.append(ask.kind)
                        snap = encode.status_json(self.bridge.snapshot().status)
                        ask.answer.set_result(
                            encode.plan_json(PLAN) if ask.kind == "plan" else snap
                        )

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        yield
        done.set()
        thread.join()


@pytest.fixture
def sockdir():
    path = Path(tempfile.mkdtemp(prefix="kvdev-cli-"))
    path.chmod(0o755)  # `nobody` must reach the socket for the permission test
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def agent(sockdir):
    a = Agent(sockdir / "agent.sock")
    a.server.start()
    yield a
    a.server.stop()
    a.bridge.close()


def run(sock, *args, env=None, nobody=False):
    cmd = [*(NOBODY if nobody else []), KVDEV, *(["--socket", str(sock)] if sock else []), *args]
    environ = {k: v for k, v in os.environ.items() if k != "KVDEV_SOCKET"} | (env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=environ, check=False)


def main(capsys, *args):
    code = cli.main(list(args))
    return (code, *capsys.readouterr())


def later(seconds, func, *args):
    t = threading.Timer(seconds, func, args)
    t.start()
    return t


def test_status_converged_exits_0_and_summarizes(agent):
    agent.bridge.publish(status())
    done = run(agent.path, "status")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("converged:       yes, since 20")
    assert "devices:         1 Configured" in lines
    assert "metadata errors: none" in lines
    assert "reconcile:       pass #7" in lines
    assert any(line.startswith(f"agent:           pid {os.getpid()}, RSS ") for line in lines)
    header = lines.index("claims:") + 1
    assert lines[header] == "  CLAIM        NAMESPACE  POD CLAIM  OBSERVED GEN  READ AS  SOURCE"
    assert lines[header + 1] == (
        "  vm1-devices  vms        -          3             v1beta1  /run/dra/nics.json"
    )


def test_status_says_when_a_newer_version_was_unusable(agent):
    fell_back = ClaimStatus(
        "vm1-devices",
        "vms",
        None,
        3,
        "/run/dra/nics.json",
        "metadata.resource.k8s.io/v1alpha1",
        "stream[0]: metadata.generation: Input should be a valid integer",
    )
    agent.bridge.publish(status(claims=(fell_back,)))
    lines = run(agent.path, "status").stdout.splitlines()
    header = lines.index("claims:") + 1
    assert lines[header + 1].split()[4] == "v1alpha1*"
    assert lines[header + 2] == (
        "  vm1-devices: read as v1alpha1*: a newer version is unusable: "
        "stream[0]: metadata.generation: Input should be a valid integer"
    )


def test_status_not_converged_exits_1_and_json_is_the_agents(agent, capsys):
    agent.bridge.publish(status(converged=False))
    assert run(agent.path, "status").returncode == 1
    code, out, _ = main(capsys, "status", "--json", "--socket", str(agent.path))
    body = json.loads(out)
    assert code == 1
    assert out.startswith('{\n  "apiVersion": "kvdev.io/v1alpha1",\n  "kind": "AgentStatus"')
    assert (body["converged"], body["counts"]) == (False, {"Configured": 1, "Missing": 1})
    assert body["claims"][0]["observedGeneration"] == 3


def test_status_before_the_first_pass_is_not_converged(agent, capsys):
    code, out, _ = main(capsys, "--socket", str(agent.path), "status")
    assert (code, out) == (1, "ready: no (the agent has not finished its first pass yet)\n")


def test_devices_table_has_the_header_and_aligned_columns(agent):
    agent.bridge.publish(status(converged=False))
    done = run(None, "devices", "-o", "wide", env={"KVDEV_SOCKET": str(agent.path)})
    assert done.returncode == 0, done.stderr
    header, vf, rdma = done.stdout.splitlines()
    assert header == (
        "DEVICE                                               PHASE       INTERFACE  GUEST PCI     "
        "DRIVER     NUMA  MAC                ADDRESSES    RX/TX        SPEED"
    )
    starts = [header.index(h) for h in WIDE_COLUMNS]
    cells = [REF, "Configured", "eth1", "0000:07:00.0", "mlx5_core", "0", MAC, "10.1.0.5/24"]
    cells += ["1.5KiB/200B", "25Gb/s"]
    assert [vf[at : at + len(c)] for at, c in zip(starts, cells, strict=True)] == cells
    assert rdma.split() == [RDMA_REF, "Missing", *["-"] * 8]


def test_devices_by_default_fit_100_columns_with_short_refs_explain_takes(agent, capsys):
    agent.bridge.publish(status(converged=False))
    code, out, _ = main(capsys, "devices", "--socket", str(agent.path))
    assert code == 0
    assert out.splitlines() == [
        (
            "DEVICE                       PHASE       INTERFACE  GUEST PCI     MAC                "
            "ADDRESSES"
        ),
        (
            "vm1-devices/nics/vf-1        Configured  eth1       0000:07:00.0  02:00:00:3b:02:01  "
            "10.1.0.5/24"
        ),
        "vm1-devices/nics/rdma/mlx-0  Missing     -          -             -                  -",
    ]
    assert max(map(len, out.splitlines())) <= 100
    short = out.splitlines()[2].split()[0]
    assert main(capsys, "explain", short, "--socket", str(agent.path))[0] == 0


def test_devices_whose_short_refs_collide_keep_their_full_refs(agent, capsys):
    agent.bridge.publish(status(twin=True))
    code, out, _ = main(capsys, "devices", "--socket", str(agent.path))
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert names == ["vm1-devices/nics/vf-1", "vm1-more/nics/vf-1"]


@pytest.mark.parametrize("flag", [["-o", "json"], ["--json"], ["-o", "yaml"]])
def test_devices_as_data_is_the_agents_answer(agent, capsys, flag):
    agent.bridge.publish(status(converged=False))
    code, out, _ = main(capsys, "devices", *flag, "--socket", str(agent.path))
    _, js, _ = main(capsys, "--json", "devices", "--socket", str(agent.path))
    yaml = pytest.importorskip("yaml")
    assert code == 0
    assert (json.loads(out) if "yaml" not in flag else yaml.safe_load(out)) == json.loads(js)


def test_devices_and_explain_by_name_print_full_refs(agent, capsys):
    agent.bridge.publish(status(converged=False))
    code, out, _ = main(capsys, "devices", "-o", "name", "--socket", str(agent.path))
    assert (code, out) == (0, f"{REF}\n{RDMA_REF}\n")
    code, out, _ = main(capsys, "-o", "name", "explain", "eth1", "--socket", str(agent.path))
    assert (code, out) == (0, f"{REF}\n")


@pytest.mark.parametrize(("output", "command"), [("wide", "status"), ("name", "plan")])
def test_an_output_a_command_does_not_take_is_a_usage_error(agent, capsys, output, command):
    code, out, err = main(capsys, command, "-o", output, "--socket", str(agent.path))
    assert (code, out) == (2, "")
    assert err.startswith(f"kvdev: -o {output} is for devices")
    assert err.endswith(f"; {command} takes -o json or yaml\n")


def test_devices_and_explain_json_are_the_agents(agent, capsys):
    agent.bridge.publish(status())
    code, out, _ = main(capsys, "devices", "--json", "--socket", str(agent.path))
    body = json.loads(out)
    assert (code, body["kind"], len(body["items"])) == (0, "DeviceList", 1)
    assert body["items"][0]["interfaceStats"] == STATS["eth1"]
    code, out, _ = main(capsys, "explain", "--json", "eth1", "--socket", str(agent.path))
    assert (code, json.loads(out)) == (0, body["items"][0])


def test_color_only_when_asked(agent, capsys):
    agent.bridge.publish(status())
    assert main(capsys, "devices", "--socket", str(agent.path))[1].count("\x1b[") == 0
    _, out, _ = main(capsys, "--color", "always", "devices", "--socket", str(agent.path))
    assert "\x1b[32mConfigured\x1b[0m" in out


@pytest.mark.parametrize(
    "key",
    ["vm1-devices/nics/vf-1", REF, "eth1", "vm1-devices.nics.vf-1", MAC.upper(), "07:00.0", "vf-1"],
)
def test_explain_finds_by_short_ref_full_ref_interface_altname_mac_or_pci(agent, capsys, key):
    agent.bridge.publish(status())
    code, out, _ = main(capsys, "--socket", str(agent.path), "explain", key)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == REF
    assert "  phase:        Configured: matched, and nothing is left to do" in lines
    assert f"  evidence:     mac: {MAC} on eth1" in lines
    assert "             DESIRED                OBSERVED" in lines
    assert "  addresses  10.1.0.5/24            10.1.0.5/24" in lines
    assert lines[-1] == "  pending steps: none"


def test_explain_missing_device_says_why_with_a_subrequest(agent):
    agent.bridge.publish(status(converged=False))
    done = run(agent.path, "explain", "vm1-devices/nics/rdma/mlx-0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:7] == [
        RDMA_REF,
        "  phase:      Missing: no guest device matches it",
        "  claim:      vm1-devices (pod claim -), request nics/rdma, generation 3",
        "  device:     rdma.example.com / node-a / mlx-0",
        "  evidence:   none: nothing matched it",
        "  candidates: 0000:08:00.0",
        "  reason:     no guest NIC has MAC 0c:42:a1:5e:00:01",
    ]


def test_explain_by_a_device_name_two_claims_share_lists_both_and_exits_2(agent):
    agent.bridge.publish(status(twin=True))
    done = run(agent.path, "explain", "vf-1")
    assert (done.returncode, done.stdout) == (2, "")
    twin = "vm1-more/nics/sriov.example.com/node-b/vf-1"
    assert done.stderr == f"kvdev: 2 devices match vf-1: {REF}, {twin}; name one by its full ref\n"


@pytest.mark.parametrize(
    ("seen", "row"),
    [
        (
            (Route(11, "10.3.0.0/16", "10.1.0.1", 0, 42),),
            ["10.3.0.0/16 via 10.1.0.1", "10.3.0.0/16 via 10.1.0.1"],
        ),
        ((), ["10.3.0.0/16 via 10.1.0.1", "-", "differs"]),
        (
            (Route(11, "10.3.0.0/16", "10.1.0.1", 0, 42), Route(11, "10.9.0.0/16", None, 0, 3)),
            ["10.3.0.0/16 via 10.1.0.1", "10.3.0.0/16 via 10.1.0.1,10.9.0.0/16"],
        ),
    ],
)
def test_explain_shows_the_observed_routes_beside_the_wanted(agent, capsys, seen, row):
    wanted = (DesiredRoute("10.3.0.0/16", "10.1.0.1"),)
    agent.bridge.publish(status(routes=wanted, seen_routes=(*seen, Route(12, "10.7.0.0/16"))))
    code, out, _ = main(capsys, "explain", "vf-1", "--socket", str(agent.path))
    assert code == 0
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]
    assert ["routes", *row] in rows
    _, js, _ = main(capsys, "explain", "--json", "vf-1", "--socket", str(agent.path))
    routes = json.loads(js)["observed"]["routes"]  # only those through the bound NIC (ifindex 11)
    assert [r["destination"] for r in routes] == [r.destination for r in seen]


@pytest.mark.parametrize("key", ["vm1-devices/nics/vf-9", "eth9", "vm1/a/b/c/d"])
def test_explain_unknown_device_exits_1_and_lists_the_known(agent, key):
    agent.bridge.publish(status())
    done = run(agent.path, "explain", key)
    assert done.returncode == 1
    assert done.stderr.startswith(f"kvdev: no described device matches '{key}'")
    assert f"  {REF}\n" in done.stderr


def test_explain_shows_desired_against_observed_and_the_pending_steps(agent, capsys):
    agent.bridge.publish(status(pending=True))
    code, out, _ = main(capsys, "explain", "eth1", "--socket", str(agent.path))
    assert code == 0
    assert out.splitlines()[9:] == [
        "             DESIRED                OBSERVED",
        "  interface  eth1                   eth1",
        "  altname    vm1-devices.nics.vf-1  vm1-devices.nics.vf-1",
        "  mtu        9000                   1500                   differs",
        "  addresses  10.1.0.5/24            10.1.0.5/24",
        "  routes     -                      -",
        "  up         yes                    yes",
        "  pending steps: 2",
        "    Rename  eth1  -> data0  the hints ask for this name",
        "    SetMtu  eth1  mtu 9000  the hints ask for it",
    ]


def test_plan_groups_steps_by_device_and_lists_what_is_blocked(agent, capsys):
    agent.bridge.publish(status())
    with agent.answering():
        code, out, _ = main(capsys, "plan", "--socket", str(agent.path))
        _, js, _ = main(capsys, "plan", "--json", "--socket", str(agent.path))
    assert code == 0
    assert out.splitlines() == [
        REF,
        "  Rename  eth1  -> data0  the hints ask for this name",
        "  SetMtu  eth1  mtu 9000  the hints ask for it",
        "blocked:",
        f"  {RDMA_REF}  eth2  name 'data0' is held by eth2",
        "2 step(s) for 1 device(s), 1 blocked",
    ]
    assert json.loads(js)["kind"] == "Plan"
    assert agent.asked == ["plan", "plan"]


def test_plan_that_nobody_answers_times_out_with_exit_2(agent):
    done = run(agent.path, "--timeout", "0.5", "plan")
    late = f"kvdev: agent at {agent.path} did not answer within 0.5 s\n"
    assert (done.returncode, done.stderr) == (2, late)


def test_reconcile_as_root_reaches_the_loop(agent):
    if os.geteuid() != 0:
        pytest.skip("reconcile needs root")
    agent.bridge.publish(status())
    with agent.answering():
        done = run(agent.path, "reconcile")
    assert (done.returncode, agent.asked) == (0, ["reconcile"]), done.stderr
    assert done.stdout.startswith("reconciled: pass #7 in ")


def test_wait_returns_when_a_converged_status_is_published_later(agent):
    agent.bridge.publish(status(converged=False))
    timer = later(0.5, agent.bridge.publish, status())
    started = time.monotonic()
    done = run(agent.path, "wait", "--timeout", "20")
    timer.join()
    assert done.returncode == 0, done.stderr  # exit 1 had it waited out its --timeout
    assert time.monotonic() - started > 0.4  # it waited for the converged status
    assert done.stdout.startswith("converged after ")


def test_wait_for_ready_returns_on_the_first_pass(agent):
    timer = later(0.5, agent.bridge.publish, status(converged=False))
    done = run(agent.path, "wait", "--for", "ready", "--timeout", "20")
    timer.join()
    assert done.returncode == 0, done.stderr


def test_wait_times_out_with_exit_1(agent):
    agent.bridge.publish(status(converged=False))
    started = time.monotonic()
    done = run(agent.path, "wait", "--timeout", "1")
    assert time.monotonic() - started >= 1
    assert done.returncode == 1
    assert done.stderr == "kvdev: not converged after 1 s: 1 configured, 1 missing\n"


def test_wait_waits_for_the_socket_to_appear(sockdir):
    a = Agent(sockdir / "agent.sock")
    a.bridge.publish(status())
    timer = later(0.5, a.server.start)
    try:
        done = run(a.path, "wait", "--timeout", "20")
    finally:
        timer.join()
        a.server.stop()
    assert done.returncode == 0, done.stderr


def test_wait_without_a_socket_waits_then_exits_1(sockdir):
    started = time.monotonic()
    done = run(sockdir / "agent.sock", "wait", "--timeout", "1")
    assert time.monotonic() - started >= 1
    assert done.returncode == 1
    assert done.stderr == (
        "kvdev: not converged after 1 s: agent not running: "
        f"no socket at {sockdir}/agent.sock{LOOK}\n"
    )


@pytest.mark.parametrize("args", ["status", "devices", "plan", "explain eth1", "reconcile"])
def test_other_commands_without_a_socket_exit_2(sockdir, args):
    done = run(sockdir / "agent.sock", *args.split())
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"kvdev: agent not running: no socket at {sockdir}/agent.sock{LOOK}\n"
    assert LOOK == "; look: systemctl status kvdev-agent, journalctl -u kvdev-agent"


def test_wait_on_a_socket_nobody_listens_on_exits_2_at_once(sockdir):
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(sockdir / "agent.sock"))
        done = run(sockdir / "agent.sock", "wait", "--timeout", "20")
    refused = f"agent not running: nothing listens on {sockdir}/agent.sock (a stale socket?){LOOK}"
    assert (done.returncode, done.stderr) == (2, f"kvdev: {refused}\n")


@pytest.fixture
def as_nobody():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the CLI as nobody")
    # A pyenv Python under /root with a shared libpython (test-compat's 3.13 legs) cannot run
    # as nobody: its RUNPATH is in a directory nobody may not enter. The dev venv runs these.
    done = subprocess.run(
        [*NOBODY, KVDEV, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"{KVDEV} cannot run as nobody: {done.stderr.strip()}")


def test_permission_denied_on_the_socket_exits_2(agent, as_nobody):
    agent.path.chmod(0o600)
    group = grp.getgrgid(agent.path.stat().st_gid).gr_name
    readers = "only root" if group == "root" else f"members of group {group} and root"
    done = run(agent.path, "status", nobody=True)
    assert (done.returncode, done.stderr) == (
        2,
        f"kvdev: permission denied on {agent.path} ({readers} may read)\n",
    )


def test_reconcile_by_another_user_is_refused_with_exit_2(agent, as_nobody):
    agent.path.chmod(0o666)
    agent.bridge.publish(status())
    done = run(agent.path, "reconcile", nobody=True)
    refused = "kvdev: only root may ask the agent to reconcile (try: sudo kvdev reconcile)\n"
    assert (done.returncode, done.stderr) == (2, refused)
    assert agent.bridge.drain() == []  # never reached the loop


@pytest.mark.parametrize(
    "command",
    ["", "status", "devices", "explain", "plan", "wait", "reconcile", "metrics", "collect"],
)
def test_help_shows_examples_and_exit_codes(capsys, command):
    with pytest.raises(SystemExit) as exited:
        cli.main([*command.split(), "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert re.search(r"examples:\n  (sudo )?kvdev ", out)
    assert "exit status:" in out
    assert "--socket PATH" in out


def members(path):
    import tarfile  # noqa: PLC0415

    with tarfile.open(path) as tar:
        top = tar.getnames()[0].split("/")[0]
        return {
            m.name.removeprefix(top + "/"): tar.extractfile(m).read().decode()
            for m in tar.getmembers()
        }


@pytest.fixture
def trees(tmp_path):
    meta, state = tmp_path / "meta", tmp_path / "state"
    (meta / "resourceclaims/vm1").mkdir(parents=True)
    (meta / "resourceclaims/vm1/nic.json").write_text('{"secret": "10.1.0.5"}')
    (meta / "..data").symlink_to("resourceclaims")
    (state / "marks").mkdir(parents=True)
    (state / "status.json").write_text('{"kind": "AgentStatus"}\n')
    (state / "marks/mac-02:00:00:3b:02:01").write_text("")
    return meta, state


def test_collect_writes_one_tarball_of_the_agents_answers_and_the_trees(agent, capsys, trees):
    meta, state = trees
    agent.bridge.publish(status())
    tarball = meta.parent / "support.tar.gz"
    args = ["--socket", str(agent.path), "--tarfile", str(tarball)]
    args += ["--metadata-root", str(meta), "--state-dir", str(state)]
    with agent.answering():
        code, out, _ = main(capsys, "collect", *args)
    assert (code, out) == (0, f"{tarball}\n")
    got = members(tarball)
    assert json.loads(got["status.json"])["body"]["kind"] == "AgentStatus"
    assert json.loads(got["devices.json"])["body"]["items"][0]["ref"] == REF
    assert json.loads(got["plan.json"])["body"]["kind"] == "Plan"
    listing = json.loads(got["metadata-listing.json"])["entries"]
    assert {e["path"]: e.get("target") for e in listing} == {
        "..data": "resourceclaims",
        "resourceclaims": None,
        "resourceclaims/vm1": None,
        "resourceclaims/vm1/nic.json": None,
    }
    assert not any(name.startswith("metadata/") for name in got)  # names only, by default
    assert got["state/status.json"] == '{"kind": "AgentStatus"}\n'
    assert "state/marks/mac-02:00:00:3b:02:01" in got
    parts = json.loads(got["collect.json"])["parts"]
    assert set(parts.values()) <= {"ok"} | {p for p in parts.values() if "journal" in p}
    with agent.answering():
        main(capsys, "collect", *args, "--with-metadata")
    assert members(tarball)["metadata/resourceclaims/vm1/nic.json"] == '{"secret": "10.1.0.5"}'


def test_collect_without_an_agent_records_why_and_still_writes_the_rest(sockdir, capsys, trees):
    meta, _ = trees
    tarball = meta.parent / "support.tar.gz"
    args = ["--socket", str(sockdir / "agent.sock"), "--tarfile", str(tarball)]
    code, out, err = main(capsys, "collect", *args, "--metadata-root", str(meta / "nope"))
    assert (code, out) == (0, f"{tarball}\n")
    got = members(tarball)
    assert got["status.json.error"].startswith("NotRunningError: agent not running: no socket at ")
    assert (
        got["metadata-listing.json.error"] == f"FileNotFoundError: {meta}/nope: no such directory\n"
    )
    parts = json.loads(got["collect.json"])["parts"]
    assert parts["status.json"].startswith("NotRunningError")
    assert err.startswith("kvdev: collect: not collected (see collect.json): devices.json, ")


def test_collect_that_cannot_write_its_tarball_exits_2(sockdir, capsys):
    code, out, err = main(
        capsys, "collect", "--socket", str(sockdir / "s"), "--tarfile", str(sockdir / "no/x.tgz")
    )
    assert (code, out) == (2, "")
    assert err.startswith(f"kvdev: collect: cannot write {sockdir}/no/x.tgz: ")


def test_yaml_output_without_pyyaml_says_what_to_install(agent, capsys, monkeypatch):
    agent.bridge.publish(status())
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    code, out, err = main(capsys, "devices", "-o", "yaml", "--socket", str(agent.path))
    assert (code, out) == (2, "")
    assert err == (
        "kvdev: -o yaml needs PyYAML (python3-yaml, which the package suggests); "
        "-o json is the same\n"
    )


HEAD_TARGETS = [
    ("/v1/status", 200),
    ("/v1/devices", 200),
    ("/v1/devices/vm1-devices/nics/vf-1", 200),
    ("/v1/devices/vm1-devices/nics/vf-9", 404),
    ("/v1/plan", 200),
    ("/v1/events?since=0&wait=1", 200),
    ("/v1/events?wait=1", 200),
    ("/v1/nothing", 404),
]


def test_head_of_every_endpoint_is_its_status_and_headers_without_a_body(agent):
    # Regression (issue 23 §5): HEAD /v1/plan and HEAD /v1/events?wait=1 (deferred answers)
    # closed the connection without a status line.
    agent.bridge.publish(status())
    got = []
    with agent.answering(), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(agent.path))
        for target, _ in HEAD_TARGETS:  # all on one connection: each answer is framed
            sock.sendall(f"HEAD {target} HTTP/1.1\r\nHost: kvdev\r\n\r\n".encode())
            answer = b""
            while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
                answer += chunk
            head, _, rest = answer.partition(b"\r\n\r\n")
            got.append((target, int(head.split()[1]) if head else 0, rest))
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: kvdev\r\nConnection: close\r\n\r\n")
        tail = b""
        while chunk := sock.recv(65536):
            tail += chunk
    assert [(t, code, body) for t, code, body in got] == [(t, c, b"") for t, c in HEAD_TARGETS]
    assert tail.startswith(b"HTTP/1.1 200 ")  # no body of a HEAD was left on the connection


def test_devices_reads_only_the_described_interfaces_at_most_once_a_second():
    # Regression (issue 23 §2, "thousands of links"): every GET /v1/devices read the counters
    # and speed of every interface of the guest in the API thread (psutil), so one client
    # looping on it made root's /v1/status wait. Now: only the interfaces of the published
    # status, shared by every request for STATS_FRESH seconds (the clock is given).
    from kvdev.guest.api.routes import STATS_FRESH  # noqa: PLC0415
    from kvdev.guest.api.server import Peer, Request  # noqa: PLC0415

    reads, now = [], [100.0]
    bridge = Bridge()
    api = Api(
        bridge,
        interface_stats=lambda names: reads.append(list(names)) or STATS,
        clock=lambda: now[0],
    )
    bridge.publish(status())
    peer = Peer(1000, 1000, 1, frozenset({1000}))
    get = Request("GET", "/v1/devices", {}, peer, b"")
    one = Request("GET", "/v1/devices/vm1-devices/nics/vf-1", {}, peer, b"")
    try:
        answers = [api.handle(get if i % 2 else one) for i in range(100)]
        assert reads == [["eth1"]]  # one read, of the one described interface
        assert all(a.status == 200 for a in answers)
        assert answers[1].body["items"][0]["interfaceStats"] == STATS["eth1"]
        now[0] += STATS_FRESH
        api.handle(get)
        bridge.publish(status())  # a new status: its interfaces are read afresh
        api.handle(get)
        assert reads == [["eth1"]] * 3
    finally:
        bridge.close()


# A name from a metadata file that would retitle the window (OSC 0), clear the screen (CSI 2J),
# write the clipboard (OSC 52), and read backwards (RLO).
HOSTILE = {
    "claim": "vm1\x1b]0;pwned\x07",
    "request": "nics\x1b[2J",
    "driver": "sriov\u202eexample.com",
    "pool": "node\x9b31m-a",
    "name": "vf\x1b]52;c;cHduZWQ=\x07",
}
TERMINAL_CONTROLS = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def hostile_status():
    h = HOSTILE
    device = DescribedDevice(
        h["claim"], "vms", None, h["request"], h["driver"], h["pool"], h["name"], 3
    )
    nic = replace(
        GuestDevice("0000:07:00.0", "15b3", "101e", "020000", "mlx5_core", 0),
        nics=(Nic("eth1", 11, MAC),),
    )
    bound = Binding(device, MatchState.BOUND, nic, (Evidence("mac", f"{MAC} on eth1"),))
    claims = (ClaimStatus(h["claim"], "vms", None, 3, "/run/dra/nics.json", V1BETA1),)
    want = Desired(bound.device.ref, 11, "eth1", None, None, ("10.1.0.5/24",), ())
    return summarize(
        Matching((bound,), ()),
        Plan((), (want,), ()),
        [],
        MetadataState(claims=claims),
        reconcile=1,
        state=NetState((Link(11, "eth1", MAC, mtu=1500, up=True),), (), ()),
    )


@pytest.mark.parametrize(
    "args",
    [("status",), ("devices",), ("devices", "-o", "wide"), ("devices", "-o", "name"), ("explain",)],
    ids=["status", "devices", "wide", "name", "explain"],
)
def test_names_from_metadata_reach_the_terminal_escaped(agent, capsys, args):
    agent.bridge.publish(hostile_status())
    ref = hostile_status().devices[0].ref
    extra = (ref,) if args == ("explain",) else ()
    with agent.answering():
        code, out, err = main(
            capsys, *args, *extra, "--socket", str(agent.path), "--color", "never"
        )
    assert code in {0, 1}, err
    assert TERMINAL_CONTROLS.findall(out + err) == []
    assert "vm1\\x1b]0;pwned\\x07" in out  # visible, not acted on
    if args[0] != "status":
        assert "vf\\x1b]52;c;cHduZWQ=\\x07" in out


def test_colour_is_the_only_escape_sequence_a_table_carries(agent, capsys):
    agent.bridge.publish(hostile_status())
    with agent.answering():
        _, out, _ = main(
            capsys, "devices", "-o", "wide", "--socket", str(agent.path), "--color", "always"
        )
    assert TERMINAL_CONTROLS.findall(re.sub(r"\x1b\[[0-9;]*m", "", out)) == []


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_keep_names_exact(agent, capsys, fmt):
    pytest.importorskip("yaml")
    import yaml  # noqa: PLC0415

    agent.bridge.publish(hostile_status())
    with agent.answering():
        code, out, _ = main(capsys, "devices", "-o", fmt, "--socket", str(agent.path))
    assert code == 0
    item = (json.loads(out) if fmt == "json" else yaml.safe_load(out))["items"][0]
    assert {k: item[k] for k in ("request", "driver", "pool")} == {
        k: HOSTILE[k] for k in ("request", "driver", "pool")
    }
    assert item["claim"] == HOSTILE["claim"]
    assert item["device"] == HOSTILE["name"]


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_the_cli_never_asks_a_socket_the_name_was_re_pointed_to(sockdir, capsys, kind):
    """The socket's directory may be the agent's own and kvdev often runs as root: a name
    re-pointed to another service's socket (a link) is refused before anything connects."""
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    impostor.bind(str(sockdir / "other-service.sock"))
    impostor.listen(8)
    name = sockdir / "agent.sock"
    if kind == "symlink":
        name.symlink_to(sockdir / "other-service.sock")
    else:
        os.link(sockdir / "other-service.sock", name)
    try:
        code, out, err = main(capsys, "status", "--socket", str(name))
        impostor.settimeout(0)  # non-blocking: accept() answers at once
        with pytest.raises(BlockingIOError):
            impostor.accept()  # nobody connected
    finally:
        impostor.close()
    assert (code, out) == (2, "")
    assert f"cannot connect to the agent at {name}" in err
