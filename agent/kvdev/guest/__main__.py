"""``kvdev-agent``: the guest daemon's entry point and composition root.

Builds the configuration (defaults < ``/etc/kvdev/agent.toml`` < its drop-ins
``agent.toml.d/*.toml`` < ``KVDEV_AGENT_<KEY>`` < flags; ``--dump-config`` prints it), the adapters
(netlink, udev, file watcher) and the reconcile loop, then either runs one converging pass
(``--once``, for image builds, scripts and tests) or serves until SIGTERM. Exit codes:
0 converged (or stopped cleanly), 1 ``--once`` left devices not configured (``--dry-run``
too: it configures nothing, and writes nothing), 2 usage or configuration error.

Start-up: ``main`` turns the cyclic garbage collector off before it imports the agent
(its modules' objects are never garbage, and the collector's passes over them cost import
time, measured in tests/bench); the loop
collects once, freezes what start-up made and turns it back on when it first has nothing to do
after READY=1 (``--once``: when ``main`` returns).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdev import __version__
from kvdev.errors import UsageError
from kvdev.guest.adapters import config as config_module

if TYPE_CHECKING:
    from kvdev.guest.adapters.deadline import Deadline
    from kvdev.guest.api.bridge import Bridge
    from kvdev.guest.api.server import Server

EPILOG = """\
examples:
  kvdev-agent                              # serve (systemd starts it as kvdev-agent.service)
  kvdev-agent --once                       # converge once, print the status table, exit
  kvdev-agent --once --dry-run --json      # what would change, as JSON; writes nothing
  kvdev-agent --metadata-root ./tree --once
  kvdev-agent --dump-config                # the configuration in force, each value's origin

configuration: /etc/kvdev/agent.toml (every key, its default and meaning, in comments), then
/etc/kvdev/agent.toml.d/*.toml in name order, then KVDEV_AGENT_<KEY> (e.g.
KVDEV_AGENT_LOG_LEVEL=debug), then the flags; a bad configuration exits 2 (the unit does not
restart it: RestartPreventExitStatus=2).

exit status: 0 converged / stopped cleanly, 1 --once left devices not configured,
2 usage or configuration error. --dry-run configures nothing and writes nothing (no status,
journal, mark or link wish): with --once it exits 1 when a device is not configured yet, so 0
says there is nothing to do.

The manual: kvdev-agent(8), kvdev-agent.toml(5) (man kvdev-agent).
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``kvdev-agent`` parser (the docs' CLI reference is rendered from it)."""
    p = argparse.ArgumentParser(
        prog="kvdev-agent",
        description="The kvdev guest agent: matches the devices DRA metadata describes to this "
        "VM's devices and configures their network interfaces (names, altnames, MTU, addresses, "
        "routes, link state). Event-driven; never touches an interface nobody describes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"kvdev-agent {__version__}")
    d = config_module.DEFAULTS
    p.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help=f"config file (default {config_module.DEFAULT_CONFIG})",
    )
    p.add_argument(
        "--metadata-root",
        type=Path,
        metavar="PATH",
        help=f"metadata tree (default {d.metadata_root})",
    )
    p.add_argument(
        "--hints",
        type=Path,
        metavar="PATH",
        help=f"guest hints file (default <metadata-root>/{config_module.HINTS_PATH})",
    )
    p.add_argument(
        "--config-drive",
        type=Path,
        metavar="PATH",
        help="a config drive's openstack/latest/meta_data.json (default none)",
    )
    p.add_argument(
        "--socket", type=Path, metavar="PATH", help=f"local API socket (default {d.socket})"
    )
    p.add_argument(
        "--state-dir", type=Path, metavar="PATH", help=f"state directory (default {d.state_dir})"
    )
    p.add_argument(
        "--link-dir",
        type=Path,
        metavar="PATH",
        help=f"where link wishes go (default {d.link_dir}, which kvdev-udev-marks reads)",
    )
    p.add_argument(
        "--config-root",
        type=Path,
        metavar="PATH",
        help="where the guest's own network configuration is: <root>/etc/netplan, "
        "etc/NetworkManager ... (default /); the NICs it names are never configured; also "
        "where its resolver files (etc/resolv.conf, run/systemd/resolve) and NetworkManager's "
        "runtime state (run/NetworkManager) are read",
    )
    p.add_argument(
        "--no-altnames",
        dest="altnames",
        action="store_false",
        default=None,
        help="do not add altnames, and remove those kvdev added (default: add them)",
    )
    p.add_argument(
        "--match-kind",
        dest="match_kinds",
        action="append",
        metavar="KIND",
        help="also match software links of this kind (e.g. veth: tests and demos in a network "
        "namespace); repeatable (default: none, only hardware)",
    )
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help=f"the agent's log level (default {d.log_level})",
    )
    p.add_argument(
        "--poll-interval",
        metavar="SECONDS",
        help="also poll the metadata files every SECONDS (0: never); default auto: every "
        "2 s on 9p, virtiofs/FUSE, NFS, CIFS ... (inotify misses the host's writes), else never",
    )
    p.add_argument(
        "--read-deadline",
        metavar="SECONDS",
        help="how long a pass waits for its read of the metadata (a share that stops "
        "answering: the pass goes on with the last good state, MetadataUnavailable); default 15",
    )
    p.add_argument("--once", action="store_true", help="converge once, print the status, exit")
    p.add_argument(
        "--dry-run", action="store_true", help="plan and report; change and write nothing"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="with --once: print the status as JSON; with --dump-config: the configuration",
    )
    p.add_argument(
        "--dump-config",
        action="store_true",
        help="print the effective configuration (TOML) and where each value came from "
        "(default, file, drop-in, environment, command line), then exit",
    )
    return p


def load_config(args: argparse.Namespace) -> config_module.AgentConfig:
    """Defaults, the config file, its drop-ins, the environment, then the flags given."""
    return replace(layers_of(args).config, once=args.once, dry_run=args.dry_run)


def layers_of(args: argparse.Namespace) -> config_module.Layered:
    """The configuration and where each value came from (``--dump-config``)."""
    path = args.config or config_module.DEFAULT_CONFIG
    flags: dict[str, Any] = {
        key: getattr(args, key)
        for key in (*config_module.PATH_KEYS, "altnames", "match_kinds", "log_level")
        if getattr(args, key) is not None
    }
    if "match_kinds" in flags:
        flags["match_kinds"] = tuple(flags["match_kinds"])
    if args.poll_interval is not None:
        flags["poll_interval"] = config_module.parse_poll_interval(
            args.poll_interval, "--poll-interval"
        )
    if args.read_deadline is not None:
        flags["read_deadline"] = config_module.parse_read_deadline(
            args.read_deadline, "--read-deadline"
        )
    return config_module.layered(
        path, required=args.config is not None, env=os.environ, flags=flags
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev-agent`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.dump_config:
            layers = layers_of(args)
            if args.json:
                json.dump(config_module.as_json(layers), sys.stdout, indent=2)
                sys.stdout.write("\n")
            else:
                sys.stdout.write(config_module.dump(layers))
            return 0
        cfg = load_config(args)
    except UsageError as e:
        sys.stderr.write(f"kvdev-agent: {e}\n")
        return 2
    enabled = gc.isenabled()
    gc.disable()  # see the module docstring; loop.serve turns it on again after READY=1
    try:
        return _run(args, cfg)
    finally:
        if enabled:
            gc.enable()


def _run(args: argparse.Namespace, cfg: config_module.AgentConfig) -> int:
    """Import the agent (the collector is off), then ``--once`` or serve."""
    # Imported here, not above, so that the collector is off while they load (see main).
    from kvdev.guest import loop  # noqa: PLC0415
    from kvdev.guest.adapters import files, systemd, udev  # noqa: PLC0415
    from kvdev.guest.adapters.deadline import Deadline  # noqa: PLC0415
    from kvdev.guest.adapters.devicecache import DeviceCache  # noqa: PLC0415
    from kvdev.guest.adapters.netlink import LinkEvents, Netlink  # noqa: PLC0415
    from kvdev.guest.api.bridge import Bridge  # noqa: PLC0415
    from kvdev.guest.reconciler import Reconciler, converge  # noqa: PLC0415
    from kvdev.guest.views import encode, tables  # noqa: PLC0415

    logging.basicConfig(level=logging.WARNING, handlers=[systemd.log_handler()])
    logging.getLogger("kvdev").setLevel(cfg.log_level.upper())  # libraries stay at WARNING
    _warn_if_absent(cfg, Deadline(cfg.read_deadline))
    with ExitStack() as stack:
        net = stack.enter_context(Netlink())
        reconciler = Reconciler(cfg, net, udev.scan)
        reconciler.reads = Deadline(cfg.read_deadline)  # a hung share blocks no pass
        if cfg.once:
            outcome = converge(reconciler)
            if args.json:
                json.dump(encode.status_json(outcome.status), sys.stdout, indent=2)
                sys.stdout.write("\n")
            else:
                sys.stdout.write(tables.pass_text(encode.status_json(outcome.status)))
            return 0 if outcome.status.converged else 1  # a dry run too: see EPILOG
        watcher = stack.enter_context(
            files.Watcher(
                cfg.metadata_root,
                cfg.hints_path,
                cfg.config_drive,
                poll=cfg.poll_interval,
                deferred=True,  # armed by the read job, where a hung share blocks no one
            )
        )
        monitor = stack.enter_context(udev.UdevMonitor())
        devices = DeviceCache(monitor)  # a pass after link events reads only those links
        reconciler.scan_devices = devices.devices
        events = stack.enter_context(LinkEvents())
        reconciler.before_pass = watcher.rearm
        reconciler.reads = Deadline(cfg.read_deadline, wake=watcher.wake)  # a late read wakes
        reconciler.watch_problem = lambda: watcher.degraded
        bridge = Bridge()
        stack.callback(bridge.close)
        fds = systemd.listen_fds()

        def start_api() -> None:
            server = _server(cfg, bridge, fds)
            server.start()
            stack.callback(server.stop)

        if not fds:  # our own socket: bound and answering by READY=1
            start_api()
        return loop.serve(
            reconciler,
            file_events=watcher,
            udev_events=devices,
            link_events=events,
            bridge=bridge,
            after_ready=start_api if fds else lambda: None,
        )


def _warn_if_absent(cfg: config_module.AgentConfig, reads: Deadline[str | None]) -> None:
    """Say so when the metadata tree is not there: nothing described is not converged work.

    The look goes through ``reads`` (a deadline): a share that hangs blocks no start; the passes
    report it (``MetadataUnavailable``).
    """

    def look() -> str | None:
        root = cfg.metadata_root
        if root.is_dir():
            return None
        return "does not exist" if not root.exists() else "is not a directory"

    from kvdev.guest.adapters.deadline import Late  # noqa: PLC0415 - as _run's imports

    what = reads.run(look)
    if what is None or isinstance(what, Late):
        return
    then = (
        "this pass configures nothing (no device is described)"
        if cfg.once
        else "nothing is configured until it appears (the agent watches for it)"
    )
    logging.getLogger("kvdev.agent").warning(
        "metadata root %s %s: %s; see --metadata-root or metadata-root in %s",
        cfg.metadata_root,
        what,
        then,
        config_module.DEFAULT_CONFIG,
    )


def _server(cfg: config_module.AgentConfig, bridge: Bridge, fds: Sequence[int]) -> Server:
    """The local API on the socket systemd passed (``fds``), or on ``--socket`` bound by us.

    Its modules (h11, the routes, psutil's adapter) are imported here: on systemd's socket
    this runs after READY=1 (``serve``'s ``after_ready``), so the first pass does not wait for
    them, and a client that connects meanwhile waits in the socket's backlog.
    """
    from kvdev.guest.api.routes import Api  # noqa: PLC0415 - see main and above
    from kvdev.guest.api.server import Server  # noqa: PLC0415

    handler = Api(bridge).handle
    if fds:
        return Server(handler, listen_fd=fds[0])
    return Server(handler, path=cfg.socket)


if __name__ == "__main__":
    sys.exit(main())
