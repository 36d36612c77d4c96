"""Booting the e2e guest with QEMU and talking to its monitor (QMP).

Owns: choosing the accelerator (KVM only where it really works; TCG on PVM hosts), the QEMU
command line (machine ``pc``, virtio-blk root, virtio-net NICs at fixed PCI slots and MACs
with no network behind them, a 9p share, a QMP socket), optionally a **virtiofs** share (a
``virtiofsd`` process serving a host directory to a ``vhost-user-fs-pci`` device, guest RAM a
shared memfd, as KubeVirt shares a ConfigMap volume with a VMI), optionally qemu-guest-agent's
channel (a virtio-serial port ``org.qemu.guest_agent.0`` on a host socket, as KubeVirt's domain
has it) with a minimal client of its protocol (``Qga``), the processes' lives, and a minimal QMP
client for hot-plug. A NIC of a KubeVirt VMI takes its MAC and pinned slot from KubeVirt's
recorded domain (``Nic.kubevirt``). Must not know what the guest checks: that is the share's
business.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubevirtlab

SHARE_TAG = "hostshare"  # packaging/vm/rootfs/etc/systemd/system/mnt-e2e.mount mounts it
# The filesystem a VMI shares kvdev's ConfigMap under, as KubeVirt's own code makes it for the
# e2e's VMI (tests/data/kubevirt, recorded by make record-kubevirt): the domain's virtiofs tag
# and queue size (virtwrap/converter), virtiofsd's options (the template service's container).
KUBEVIRT_VIRTIOFS = kubevirtlab.virtiofs("kvdev-metadata")
VIRTIOFS_TAG = KUBEVIRT_VIRTIOFS.tag
# The config drive's virtio-blk, clear of the NICs' slots (0x10-0x1d): ours, as KubeVirt's
# domain pins no address for the drive's disk (libvirt chooses one).
CONFIG_DRIVE_SLOT = 0x1E
SERIAL_SLOT = 0x1F  # the guest agent's virtio-serial controller
GUEST_AGENT_PORT = "org.qemu.guest_agent.0"  # the port name qemu-guest-agent's udev rule waits for
VIRTIOFSD = Path(__file__).resolve().parents[2] / "build" / "virtiofsd" / "bin" / "virtiofsd"


def virtiofsd() -> str:
    """The virtiofs daemon KubeVirt runs: the Rust one, built by ``make virtiofsd``.

    Not QEMU's C daemon (Debian 12's qemu-system-common): it has none of the options KubeVirt
    passes (``--sandbox=none``, ``--migration-*``).
    """
    if os.access(VIRTIOFSD, os.X_OK):
        return str(VIRTIOFSD)
    raise FileNotFoundError(f"no {VIRTIOFSD}: run make virtiofsd (tests/e2e/build-virtiofsd.sh)")


KERNEL_ARGS = "root=/dev/vda rw console=ttyS0 panic=-1 fsck.mode=skip quiet"

# Under TCG the guest kernel is told its TSC is unstable, so it never flips the sched_clock
# static key ("sched_clock: Marking stable", a late initcall, patched while the other vCPU runs).
# With QEMU's multi-threaded TCG (Debian 12's 7.2) that patch can leave the other vCPU running a
# stale translation with the int3 of text_poke_bp in it: "Oops: int3" in sched_clock_cpu, a
# panic 4 s into one boot in CI. The site is hot (every interrupt and tick), so it is the one
# such patch that loses the race; thread=single would close them all, at 1.4x the e2e's time.
TCG_KERNEL_ARGS = "tsc=unstable"


def accelerator() -> tuple[str, list[str], str]:
    """``("kvm", args, kernel args)`` where KVM really works, else ``("tcg", ...)``.

    ``/dev/kvm`` on a PVM host (``kvm_pvm`` loaded: the host is itself a lightweight VM)
    cannot boot a stock Debian kernel, so it counts as no KVM. ``KVDEV_E2E_ACCEL`` forces one.
    """
    forced = os.environ.get("KVDEV_E2E_ACCEL", "")
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK) and not Path("/sys/module/kvm_pvm").is_dir()
    if forced == "kvm" or (not forced and usable):
        return "kvm", ["-accel", "kvm", "-cpu", "host"], KERNEL_ARGS
    return "tcg", ["-accel", "tcg,thread=multi", "-cpu", "max"], f"{KERNEL_ARGS} {TCG_KERNEL_ARGS}"


@dataclass(frozen=True)
class Nic:
    """A virtio-net NIC at a fixed slot of bus pci.0 (guest PCI address 0000:00:<slot>.0)."""

    id: str
    slot: int
    mac: str

    @property
    def pci_address(self) -> str:
        return f"0000:00:{self.slot:02x}.0"

    @property
    def kernel_name(self) -> str:
        """The name udev gives it on machine ``pc``: ``ens<slot>``."""
        return f"ens{self.slot}"

    def device_args(self) -> dict[str, Any]:
        """The ``-device``/``device_add`` properties.

        No netdev: a NIC without a peer drops what it sends and never blocks. (A lone port on a
        QEMU hub never accepts a frame, so the guest's TX queue stalls and its NETDEV watchdog
        fires every few seconds.) Nothing leaves QEMU either way.
        """
        return {
            "driver": "virtio-net-pci",
            "id": self.id,
            "mac": self.mac,
            "bus": "pci.0",
            "addr": f"0x{self.slot:02x}",
            "romfile": "",
        }

    def command_line(self) -> list[str]:
        return ["-device", ",".join(f"{k}={v}" for k, v in self.device_args().items())]

    @classmethod
    def kubevirt(cls, recorded: kubevirtlab.DomainNic, slot: int | None = None) -> Nic:
        """The NIC KubeVirt's domain makes for a VMI interface: its MAC, and the slot of pci.0
        the domain pins; ``slot`` (ours) only where the domain pins none (libvirt's choice)."""
        if recorded.mac is None:
            raise ValueError(f"{recorded.name}: the recorded domain and VMI give it no MAC")
        if recorded.pci_address is None:
            if slot is None:
                raise ValueError(f"{recorded.name}: KubeVirt pins no address and we gave none")
            return cls(recorded.name, slot, recorded.mac)
        pinned = int(recorded.pci_address[8:10], 16)
        nic = cls(recorded.name, pinned, recorded.mac)
        if nic.pci_address != recorded.pci_address:
            raise ValueError(
                f"{recorded.name}: {recorded.pci_address} is not a slot of bus 0 (machine pc)"
            )
        return nic


class QmpError(RuntimeError):
    """QEMU answered a QMP command with an error, or not at all."""


class Qmp:
    """A QMP connection: greeting, capabilities negotiation, then commands; events are kept."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf = b""
        self.events: list[dict[str, Any]] = []
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(str(path))
            self._read()  # the greeting
            self.execute("qmp_capabilities")
        except BaseException:
            self._sock.close()
            raise

    def _read(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise QmpError("QEMU closed the QMP socket")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def execute(self, command: str, **arguments: Any) -> Any:
        msg: dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self._sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read()
            if "event" in reply:
                self.events.append(reply)
            elif "error" in reply:
                raise QmpError(f"{command} {arguments}: {reply['error']}")
            else:
                return reply.get("return")

    def close(self) -> None:
        self._sock.close()


@dataclass
class Guest:
    """What to boot: kernel, initrd, root disk, NICs present at boot, the shared folder."""

    kernel: Path
    initrd: Path
    disk: Path
    nics: list[Nic]
    share: Path
    workdir: Path  # QMP socket and console log
    memory_mib: int = 1024
    cpus: int = 2
    virtiofs: Path | None = None  # a host directory shared over virtiofs as VIRTIOFS_TAG
    config_drive: Path | None = None  # a host directory shown as a FAT disk labelled config-2
    guest_agent: bool = False  # qemu-guest-agent's virtio-serial channel, on ``qga.sock``


def virtiofsd_argv(sock: Path, source: Path) -> list[str]:
    """virtiofsd serving ``source`` on ``sock`` with the options KubeVirt's container has."""
    return [
        virtiofsd(),
        f"--socket-path={sock}",
        f"--shared-dir={source}",
        *KUBEVIRT_VIRTIOFS.options,
    ]


def virtiofs_device_args(sock: Path, memory_mib: int) -> list[str]:
    """QEMU's side of the share: shared guest RAM and the device, KubeVirt's tag and queue."""
    v = KUBEVIRT_VIRTIOFS
    return [
        "-object",
        f"memory-backend-memfd,id=mem,size={memory_mib}M,share=on",  # vhost-user needs shared RAM
        "-numa",
        "node,memdev=mem",
        "-chardev",
        f"socket,id=vfs0,path={sock}",
        "-device",
        f"vhost-user-fs-pci,chardev=vfs0,tag={v.tag},queue-size={v.queue_size}",
    ]


CONSOLE, QMP, QGA = "console.log", "qmp.sock", "qga.sock"  # under the guest's workdir


def qemu_argv(guest: Guest, accel_args: list[str], kernel_args: str) -> list[str]:
    """QEMU's command line for ``guest``, but the virtiofs share (its daemon must start first)."""
    argv = [
        "qemu-system-x86_64",
        "-machine",
        "pc",  # i440FX: ACPI hot-plug on pci.0 needs no root port
        *accel_args,
        "-m",
        str(guest.memory_mib),
        "-smp",
        str(guest.cpus),
        "-nographic",
        "-nodefaults",
        "-no-reboot",
        "-kernel",
        str(guest.kernel),
        "-initrd",
        str(guest.initrd),
        "-append",
        kernel_args,
        "-drive",
        f"file={guest.disk},if=virtio,format=raw,cache=unsafe",
        "-serial",
        f"file:{guest.workdir / CONSOLE}",
        "-virtfs",
        f"local,path={guest.share},mount_tag={SHARE_TAG},security_model=none",
        "-qmp",
        f"unix:{guest.workdir / QMP},server=on,wait=off",
    ]
    for nic in guest.nics:
        argv += nic.command_line()
    if guest.config_drive is not None:
        # KubeVirt's config drive is an ISO labelled config-2; cloud-init's ConfigDrive
        # source takes vfat or iso9660 by that label, and QEMU's vvfat makes one of a
        # directory without any image tool on the host.
        argv += [
            "-blockdev",
            (
                f"driver=vvfat,node-name=configdrive,dir={guest.config_drive},"
                "label=config-2,read-only=on"
            ),
            "-device",
            f"virtio-blk-pci,drive=configdrive,bus=pci.0,addr=0x{CONFIG_DRIVE_SLOT:02x}",
        ]
    if guest.guest_agent:
        argv += [
            "-device",
            f"virtio-serial-pci,id=vser0,bus=pci.0,addr=0x{SERIAL_SLOT:02x}",
            "-chardev",
            f"socket,id=qga0,path={guest.workdir / QGA},server=on,wait=off",
            "-device",
            f"virtserialport,bus=vser0.0,chardev=qga0,name={GUEST_AGENT_PORT}",
        ]
    return argv


class Vm:
    """A running QEMU; ``console`` collects the serial console, ``qmp`` the monitor."""

    def __init__(self, guest: Guest) -> None:
        self.guest = guest
        self.accel, accel_args, kernel_args = accelerator()
        self.console = guest.workdir / CONSOLE
        self.qmp_path = guest.workdir / QMP
        self.stderr = guest.workdir / "qemu.stderr"
        self.qga_path = guest.workdir / QGA
        argv = qemu_argv(guest, accel_args, kernel_args)
        self.virtiofsd: subprocess.Popen[bytes] | None = None
        if guest.virtiofs is not None:
            argv += self._start_virtiofsd(guest.virtiofs)
        self.argv = argv
        self.started = time.monotonic()
        with self.stderr.open("w") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        self._qmp: Qmp | None = None

    def _start_virtiofsd(self, source: Path) -> list[str]:
        """Serve ``source`` as KubeVirt serves a ConfigMap volume, with KubeVirt's options.

        virtiofsd's options are those of the virtiofs container KubeVirt's template service
        renders for the e2e's VMI, and the device's tag and queue size those of the domain its
        converter makes (``virtiofsd_argv``, ``virtiofs_device_args``).
        """
        sock = self.guest.workdir / "virtiofs.sock"
        log = self.guest.workdir / "virtiofsd.log"
        with log.open("w") as out:
            self.virtiofsd = subprocess.Popen(
                virtiofsd_argv(sock, source),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        deadline = time.monotonic() + 30
        while not sock.exists():
            if self.virtiofsd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"virtiofsd did not start:\n{tail(log, 20)}")
            time.sleep(0.05)
        return virtiofs_device_args(sock, self.guest.memory_mib)

    @property
    def qmp(self) -> Qmp:
        if self._qmp is None:
            deadline = time.monotonic() + 30
            while not self.qmp_path.exists():
                self.check_alive()
                if time.monotonic() > deadline:
                    raise QmpError(f"no QMP socket at {self.qmp_path} after 30 s")
                time.sleep(0.1)
            self._qmp = Qmp(self.qmp_path)
        return self._qmp

    def check_alive(self) -> None:
        """Raise if QEMU is gone (with its stderr and the console's tail)."""
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"QEMU exited with {self.proc.returncode}:\n{tail(self.stderr, 20)}\n"
                f"console:\n{tail(self.console, 40)}"
            )

    def wait_for(self, path: Path, timeout: float, what: str) -> float:
        """Wait until the guest writes ``path``; the seconds it took. Raises on QEMU's exit."""
        start = time.monotonic()
        while not path.exists():
            self.check_alive()
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{what}: no {path.name} after {timeout:.0f} s")
            time.sleep(0.2)
        return time.monotonic() - start

    def set_link(self, nic: Nic, *, up: bool) -> None:
        """The NIC's carrier, as a cable pulled and plugged back in would (QMP set_link)."""
        self.qmp.execute("set_link", name=nic.id, up=up)

    def hotplug(self, nic: Nic) -> None:
        """Add a NIC at its fixed slot of pci.0 while the guest runs (QMP device_add)."""
        self.qmp.execute("device_add", **nic.device_args())

    def wait_exit(self, timeout: float) -> bool:
        """Wait for the guest to power off; True when it did within ``timeout``."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> None:
        """Make sure QEMU is gone (quit through QMP, then kill)."""
        if self.proc.poll() is None and self._qmp is not None:
            with contextlib.suppress(OSError, QmpError):
                self._qmp.execute("quit")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._qmp is not None:
            self._qmp.close()
        if self.virtiofsd is not None and self.virtiofsd.poll() is None:
            self.virtiofsd.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.virtiofsd.wait(timeout=10)
            if self.virtiofsd.poll() is None:
                self.virtiofsd.kill()
                self.virtiofsd.wait()


class Qga:
    """qemu-guest-agent's protocol on the channel's host socket: one JSON object a line.

    A connection may find the agent's reply to an earlier client in the pipe, so each call
    first synchronises as libvirt does (``guest-sync`` with a fresh id, lines read until the
    reply carries it), then sends its command.
    """

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self._path, self._timeout = path, timeout
        self._id = int.from_bytes(os.urandom(4), "big")

    def execute(self, command: str, **arguments: Any) -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self._timeout)
            sock.connect(str(self._path))
            reader = sock.makefile("rb")
            self._id += 1
            sync = {"execute": "guest-sync", "arguments": {"id": self._id}}
            sock.sendall(json.dumps(sync).encode() + b"\n")
            while self._reply(reader) != self._id:
                pass
            msg: dict[str, Any] = {"execute": command}
            if arguments:
                msg["arguments"] = arguments
            sock.sendall(json.dumps(msg).encode() + b"\n")
            return self._reply(reader)

    @staticmethod
    def _reply(reader: Any) -> Any:
        line = reader.readline()
        if not line:
            raise QmpError("the guest agent's channel closed")
        try:
            reply = json.loads(line)
        except ValueError:
            return None  # a partial line left by an earlier client: the sync skips it
        if "error" in reply:
            raise QmpError(f"guest agent: {reply['error']}")
        return reply.get("return")

    def wait(self, command: str, timeout: float, **arguments: Any) -> tuple[Any, float]:
        """``command``'s answer once the agent answers (it starts with the guest); the wait."""
        start = time.monotonic()
        while True:
            try:
                return self.execute(command, **arguments), time.monotonic() - start
            except (OSError, QmpError):
                if time.monotonic() - start > timeout:
                    raise
                time.sleep(1.0)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
