"""What every e2e boot shares: the run's record, the phase protocol, shutdown and the summary.

A ``Run`` is one boot: the host asks the guest to judge a list of checks (a phase) by writing
``ctl/phase-<n>.json`` on the 9p share, and reads the verdicts from ``out/phase-<n>.json``
(tests/e2e/guest/guest_check.py judges inside the guest). ``shutdown`` lets the guest save its
journal and power off; ``summarize`` prints the timings, and on failure the guest's tails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import e2e_host
import pytest
from e2e_qemu import Guest, Nic, Vm, tail

BOOT_TIMEOUT = 420.0  # QEMU start to the first report, TCG on 2 busy cores
PHASE_TIMEOUT = 120.0  # how long the guest keeps looking for a phase's state


@dataclass(repr=False)
class Run:
    """One boot of the guest and what the phases reported."""

    vm: Vm
    share: Path
    artifacts: Path
    host: e2e_host.HostSide | None  # the 9p bundle's writer; None on the KubeVirt path
    package: str
    times: dict[str, float] = field(default_factory=dict)
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed: bool = False

    def __repr__(self) -> str:  # pytest shows it in tracebacks: keep the reports out
        return f"Run({self.artifacts}, phases reported: {sorted(self.reports)})"

    def wait_booted(self) -> float:
        """Seconds from QEMU's start until the guest's runner reported in."""
        try:
            return self.vm.wait_for(self.share / "out" / "booted.json", BOOT_TIMEOUT, "boot")
        except (TimeoutError, RuntimeError):
            self.failed = True
            raise

    def require_guest(self, what: str) -> None:
        """Fail at once when the guest has stopped judging (an earlier phase failed)."""
        __tracebackhide__ = True
        if self.failed:
            pytest.fail(f"{what}: not run, an earlier phase failed and the guest stopped")

    def phase(
        self,
        name: str,
        checks: list[dict[str, Any]],
        *,
        final: bool = False,
        timeout: float = PHASE_TIMEOUT,
        actions: Sequence[Sequence[str]] = (),
    ) -> dict[str, Any]:
        """Ask the guest to judge ``checks``; its report. Fails the test when one does not hold.

        ``actions``: commands the guest runs first, in order (a manager's restart, a link flap);
        one that exits non-zero fails the phase.
        """
        __tracebackhide__ = True
        n = len(self.reports) + 1  # the guest expects phases 1, 2, ... (-k may leave some out)
        self.require_guest(name)
        spec = {
            "name": name,
            "checks": checks,
            "timeoutSeconds": timeout,
            "final": final,
            "actions": [list(a) for a in actions],
        }
        ctl = self.share / "ctl" / f"phase-{n}.json"
        ctl.with_suffix(".tmp").write_text(json.dumps(spec))
        ctl.with_suffix(".tmp").rename(ctl)
        report_path = self.share / "out" / f"phase-{n}.json"
        try:
            self.vm.wait_for(report_path, BOOT_TIMEOUT if n == 1 else timeout + 60, name)
        except (TimeoutError, RuntimeError):
            self.failed = True
            raise
        report = json.loads(report_path.read_text())
        self.reports[n] = report
        bad = [v for v in report["verdicts"] if not v["ok"]]
        if bad:
            self.failed = True  # the guest stops after a failed phase
            lines = [
                f"{v['check']['kind']} {_label(v['check'])}: {'; '.join(v['problems'])}"
                for v in bad
            ]
            pytest.fail(f"phase {n} ({name}), judged in the guest:\n  " + "\n  ".join(lines))
        return report


def _label(check: dict[str, Any]) -> str:
    label = check.get("device") or check.get("mac") or check.get("package") or check.get("argv")
    return str(label or check.get("manager") or check.get("unit") or "")


def shutdown(r: Run) -> None:
    """Let the guest save its journal and power off; kill QEMU if it does not."""
    done = r.reports and r.reports[max(r.reports)]["final"]
    if not done:
        (r.share / "ctl" / "abort").touch()
    r.vm.wait_exit(120)
    r.vm.stop()  # kills it if it is still there; closes the QMP socket either way


def summarize(r: Run, out: list[str], rows: Sequence[tuple[str, str]]) -> None:
    """Timings (``rows``: label, key of ``r.times``); on failure, the guest's tails."""
    t = r.times
    out.extend(
        f"{name:46} {'-' if t.get(key) is None else f'{t[key]:6.1f} s'}" for name, key in rows
    )
    (r.artifacts / "timings.json").write_text(json.dumps(t, indent=1))
    out.extend(agent_rss(r))
    if r.reports:  # the agent's own view at the last phase, also when all went well
        status = r.reports[max(r.reports)]["snapshot"]["status"]
        (r.artifacts / "agent-status.json").write_text(json.dumps(status, indent=1))
    if r.failed or not r.reports or not r.reports[max(r.reports)]["final"]:
        journal = r.share / "out" / "journal.txt"
        agent = [ln for ln in tail(journal, 100_000).splitlines() if "kvdev-agent" in ln]
        out.append(f"--- guest journal: kvdev-agent, last 40 lines ({journal}) ---")
        out.extend(agent[-40:] or ["(no journal: the guest did not save one)"])
        out.append("--- guest journal, last 20 lines ---")
        out.append(tail(journal, 20))
        out.append(f"--- console, last 30 lines ({r.vm.console}) ---")
        out.append(tail(r.vm.console, 30))
        if r.reports:
            out.append(f"--- agent status at phase {max(r.reports)} (agent-status.json) ---")
            out.extend(status_lines(r.reports[max(r.reports)]["snapshot"]))


def agent_rss(r: Run) -> list[str]:
    """The agent's resident memory in the guest (``VmRSS`` of its main pid) when each phase held,
    and its start -> READY=1 by systemd's own timestamps (the main process's exec to the unit
    becoming active, which a Type=notify unit does at READY=1).

    Figures for the docs, not bounds: the agent is idle when a phase holds but for the guest
    check's ``kvdev status`` once a second, and READY depends on how busy the host is.
    """
    out = []
    for n, report in sorted(r.reports.items()):
        rss = report["snapshot"]["service"].get("proc", {}).get("VmRSS")
        out.append(f"{f'agent RSS in the guest, phase {n} held':46} {rss or '-'}")
    if r.reports:
        ready = ready_ms(r.reports[min(r.reports)]["snapshot"]["service"]["properties"])
        out.append(f"{'agent start -> READY=1 (systemd timestamps)':46} {ready or '-'}")
    return out


def ready_ms(props: dict[str, str]) -> str | None:
    """``ActiveEnter - ExecMainStart`` (monotonic microseconds) as milliseconds; None if unknown."""
    try:
        start = int(props["ExecMainStartTimestampMonotonic"])
        active = int(props["ActiveEnterTimestampMonotonic"])
    except (KeyError, ValueError):
        return None
    if not start or active < start:  # restarted since it became active, or never started
        return None
    return f"{(active - start) / 1000:.1f} ms"


def status_lines(snap: dict[str, Any]) -> list[str]:
    """The agent's status in a few lines: per device its phase and why; errors; generations."""
    st = snap["status"]
    if "error" in st:
        return [st["error"]]
    lines = [f"summary: {st.get('summary')}; converged: {st.get('converged')}"]
    lines.extend(
        f"  {d['ref']}: {d['phase']} {d.get('interface') or '-'} {d.get('reason') or ''}"
        for d in st.get("devices", [])
    )
    lines.append(f"unmanaged: {st.get('unmanaged')}; last error: {st.get('lastError')}")
    lines.append(f"metadata errors: {st.get('metadataErrors')}")
    lines.extend(
        f"claim {c['claim']}: observed generation {c['observedGeneration']} from {c['source']}"
        for c in st.get("claims", [])
    )
    lines.append(f"metadata root in the guest: {snap.get('metadataRoot')}")
    return lines


def artifacts_dir(suffix: str = "") -> Path:
    """A new ``<KVDEV_E2E_ARTIFACTS or build/e2e>/<UTC time><suffix>`` for one boot's files."""
    root = Path(os.environ.get("KVDEV_E2E_ARTIFACTS", e2e_host.REPO / "build" / "e2e"))
    where = root / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}{suffix}"
    where.mkdir(parents=True)
    return where


def make_share(artifacts: Path) -> Path:
    """The boot's 9p share: guest/ (with guest_check.py), ctl/ (the host's), out/ (the guest's)."""
    share = artifacts / "share"
    for sub in ("guest", "ctl", "out"):
        (share / sub).mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "guest" / "guest_check.py", share / "guest")
    return share


@contextlib.contextmanager
def scratch_disk() -> Iterator[Path]:
    """Where one boot's root disk goes (under /var/tmp, removed afterwards)."""
    scratch = Path(tempfile.mkdtemp(prefix="kvdev-e2e-", dir="/var/tmp"))
    try:
        yield scratch / "root.img"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def running(r: Run, t0: float, out: list[str], rows: Sequence[tuple[str, str]]) -> Iterator[Run]:
    """``r`` while its tests run; then its shutdown, its times and the summary."""
    try:
        yield r
    finally:
        shutdown(r)
        r.times["vm"] = time.monotonic() - r.vm.started
        r.times["total"] = time.monotonic() - t0
        summarize(r, out, rows)


@contextlib.contextmanager
def bundle_boot(
    out: list[str],
    rows: Sequence[tuple[str, str]],
    nics: Sequence[Nic],
    *,
    suite: str = "trixie",
    label: str = "",
) -> Iterator[Run]:
    """One boot of a Debian ``suite`` guest with the fresh .deb and the 9p bundle (plan.yaml).

    The image is built or reused, the run's disk made with the .deb, the bundle published with
    kvdev-host, QEMU started with ``nics``; the run is yielded, then shut down and summarized
    (``rows``; lines prefixed with ``label``).
    """
    t0 = time.monotonic()
    artifacts = artifacts_dir(f"-{suite}" if suite != "trixie" else "")
    share = make_share(artifacts)
    out.append(f"{label}artifacts: {artifacts}")
    base = e2e_host.base_image(suite)
    times = {"image": base.seconds}
    out.append(
        f"{label}image: {'built' if base.built else 'cached'} in {base.seconds:.1f} s ({base.path})"
    )
    deb = e2e_host.find_deb()
    host = e2e_host.HostSide(artifacts, share / "bundle")
    host.prepare("plan.yaml")
    with scratch_disk() as disk:
        t = time.monotonic()
        installed = e2e_host.run_disk(base, deb, disk, e2e_host.GUEST_SHARE / "bundle" / "current")
        times["disk"] = time.monotonic() - t
        out.append(f"{label}package: {deb.name} installed in the guest as '{installed}'")
        guest = Guest(
            kernel=base.kernel,
            initrd=base.initrd,
            disk=disk,
            nics=list(nics),
            share=share,
            workdir=artifacts,
        )
        vm = Vm(guest)
        out.append(f"{label}accelerator: {vm.accel}")
        r = Run(vm, share, artifacts, host, e2e_host.package_name(deb), times)
        with running(r, t0, out, rows):
            yield r
