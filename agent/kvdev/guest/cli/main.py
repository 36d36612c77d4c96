"""``kvdev``: the guest's command-line tool.

It owns the command line: the parser (global options, every command's help, examples and exit
codes) and the entry point. The commands that ask the running agent over its socket (status,
devices, explain, plan, wait, reconcile, metrics) are in ``commands``, their socket client is
``client`` and their renderings ``kvdev.guest.views.tables``; ``metadata validate`` (offline,
no agent) is ``validate``; ``collect`` (a support tarball) is ``collect``. Exit codes are
a contract: 0 success, 1 not converged / not found / timed out, 2 usage error, invalid input,
or the agent unreachable or answering an error.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

from kvdev import __version__
from kvdev.guest.cli import collect, commands, validate
from kvdev.guest.cli.client import DEFAULT_SOCKET, SOCKET_ENV, default_socket
from kvdev.guest.cli.commands import OUTPUTS

EXIT_OK = 0

_EXIT_CODES = """\
exit status:
  0  success
  1  not converged, device not found, or wait timed out
  2  usage error, invalid metadata, agent not reachable, or an error answered by the agent
"""

_MAIN_EPILOG = f"""\
The agent commands ask kvdev-agent over its local socket (default {DEFAULT_SOCKET},
${SOCKET_ENV} overrides it); reading needs root or membership of the socket's group (kvdev).
Global options may come before or after the command.

examples:
  kvdev status                                  # converged? exit 0 if so, 1 if not
  kvdev devices                                 # one row per described device (100 columns)
  kvdev devices -o wide                         # ... with every column
  kvdev explain eth1                            # why eth1's device matched, what is left
  kvdev explain vm1-devices/nic-1/vf-1           # by claim/request/device
  kvdev wait --timeout 120 && start-workload    # boot ordering
  kvdev -o json devices | jq -r '.items[] | select(.phase != "Configured") | .ref'
  kvdev devices -o name                         # one full ref per line, for scripts
  kvdev metadata validate ./tree                # offline, no agent needed
  sudo kvdev collect                            # one support tarball for a bug report
  kvdev metrics                                 # the agent's counters, Prometheus text

{_EXIT_CODES}
Run 'kvdev COMMAND --help' for a command's options and examples.
"""

_COMMAND_HELP = {
    "status": (
        "the agent's state: converged, counts by phase, errors, claims",
        (
            "Show whether the agent has converged (every described device configured, no "
            "metadata error), since when, devices by phase, metadata errors, the last error, the "
            "generation of each claim it acted on, and its own pid, memory and CPU."
        ),
        """\
examples:
  kvdev status
  kvdev status --json | jq .counts
  until kvdev status >/dev/null; do sleep 5; done   # prefer 'kvdev wait'

exit status: 0 converged, 1 not converged (or no first pass yet), 2 agent not reachable.
""",
    ),
    "devices": (
        "a table of the described devices and their guest interfaces",
        (
            "One row per described device: its short ref (claim/request/device, the full ref "
            "when two devices share one), phase, interface, guest PCI address, MAC and "
            "addresses, fitting 100 columns; -o wide adds the full ref, kernel driver, NUMA "
            "node, RX/TX bytes and link speed."
        ),
        """\
examples:
  kvdev devices
  kvdev devices -o wide
  kvdev devices -o name                # full refs, one per line
  kvdev devices -o json | jq -r '.items[] | [.ref, .phase] | @tsv'
  kvdev devices -o yaml

exit status: 0 listed, 2 agent not reachable or not ready.
""",
    ),
    "explain": (
        "why one device matched or did not, and what is left to do",
        (
            "Explain one described device: its phase, the evidence it was matched by, the "
            "candidates considered, the reason, desired against observed state (interface, MTU, "
            "addresses, up) and the steps still pending; the driver's MTU (its mtu attribute) "
            "and notes on its metadata (a stream KubeVirt up to v1.9 cannot read: no v1alpha1); "
            "its device taints and the toleration that lets its claim keep it, as the "
            "controller found them."
        ),
        """\
DEVICE is one of:
  CLAIM/REQUEST/DEVICE             e.g. vm1-devices/nic-1/vf-1 (REQUEST may be nic/rdma);
                                   CLAIM is the ResourceClaim or the pod's claim name
  CLAIM/REQUEST/DRIVER/POOL/DEVICE the full ref, as 'kvdev devices' shows it
  an interface name or altname     e.g. eth1, data0, vm1-devices.nic-1.vf-1
  a MAC address                    e.g. 02:00:00:3b:02:01
  a guest PCI address              e.g. 0000:07:00.0 or 07:00.0
  a device name                    e.g. vf-1 (when no other claim has a device of that name)

examples:
  kvdev explain eth1
  kvdev explain vf-1
  kvdev explain vm1-devices/nic-1/sriov.example.com/node-a/vf-1
  kvdev explain --json 02:00:00:3b:02:01 | jq .evidence

exit status: 0 found, 1 no such device, 2 agent not reachable or DEVICE names several
(the message lists their full refs).
""",
    ),
    "plan": (
        "the steps a reconcile pass would apply now (changes nothing)",
        (
            "Ask the agent to observe afresh and plan, without applying: the steps grouped by "
            "device, and what is blocked (and why)."
        ),
        """\
examples:
  kvdev plan
  kvdev plan --json | jq '.steps | length'

exit status: 0 planned, 2 agent not reachable or the plan failed.
""",
    ),
    "wait": (
        "wait until the agent has converged (or is ready); for boot ordering and scripts",
        (
            "Wait until the agent reports converged (default) or ready (its first pass done). It "
            "long-polls the agent's events and re-reads the status after each batch; while the "
            "socket does not exist yet it keeps trying, since the agent may still be starting."
        ),
        f"""\
examples:
  kvdev wait                                  # converged, at most 60 s
  kvdev wait --for ready --timeout 300
  kvdev --timeout 2 wait --timeout 30         # 2 s per HTTP call, 30 s in all
  # a systemd unit: ExecStartPre=/usr/bin/kvdev wait --timeout 120

exit status: 0 reached, 1 not reached within --timeout (including: no socket appeared),
2 the agent is not reachable (a socket nobody listens on, permission denied) or errs.
(The global --timeout, before 'wait', bounds each HTTP call; default 5 s; ${SOCKET_ENV} and
--socket name the socket.)
""",
    ),
    "reconcile": (
        "run a full reconcile pass now (root only)",
        "Ask the agent for a full pass now, with fresh observations, and show its outcome.",
        """\
examples:
  sudo kvdev reconcile
  sudo kvdev reconcile --json | jq .devices

exit status: 0 converged after the pass, 1 not converged, 2 not root, agent not reachable,
or the pass failed.
""",
    ),
    "metrics": (
        "the agent's counters in Prometheus's text format (passes, steps, errors, durations)",
        (
            "Print the agent's counters as GET /v1/metrics answers them (Prometheus text "
            "exposition format 0.0.4): passes by trigger and result, steps applied and failed "
            "by kind, drift restored, metadata errors by kind, the pass duration histogram, "
            "devices by phase, the time of the last ok pass and the build."
        ),
        """\
examples:
  kvdev metrics
  kvdev metrics | grep '^kvdev_agent_steps_applied_total'

  # a node exporter's textfile collector (--collector.textfile.directory): write a
  # temporary file in the same directory, then rename it into place, so the collector
  # never reads half a file (it reads only *.prom); from cron or a systemd timer:
  dir=/var/lib/prometheus/node-exporter
  kvdev metrics > "$dir/kvdev.prom.$$" && mv "$dir/kvdev.prom.$$" "$dir/kvdev.prom"

exit status: 0 printed, 2 the agent is not reachable, or -o was given (text only).
""",
    ),
}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _global_options(*, with_timeout: bool, suppress: bool) -> argparse.ArgumentParser:
    """The options every command takes; ``suppress``: no defaults (the main parser's apply)."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("global options")
    g.add_argument(
        "--socket",
        metavar="PATH",
        default=default(default_socket()),
        help=f"the agent's socket (default: ${SOCKET_ENV}, else {DEFAULT_SOCKET})",
    )
    g.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=default(None),
        help="json or yaml: the agent's answer as it came; wide: every column (devices); "
        "name: one ref per line (devices, explain); default: a table that fits 100 columns",
    )
    g.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const="json",
        default=argparse.SUPPRESS,
        help="the same as -o json",
    )
    g.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=default("auto"),
        help="colour (auto: only on a terminal, and not when NO_COLOR is set)",
    )
    if with_timeout:
        g.add_argument(
            "--timeout",
            type=_seconds,
            metavar="SECONDS",
            default=default(None),
            help="wait this long for each answer (default 5; plan and reconcile: 35)",
        )
    return p


_MANUAL = "The manual: kvdev(1) (man kvdev)."


def _name_the_manual(parser: argparse.ArgumentParser) -> None:
    """End this parser's help, and each subcommand's, by naming the man page."""
    parser.epilog = f"{parser.epilog.rstrip()}\n\n{_MANUAL}\n" if parser.epilog else _MANUAL
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                _name_the_manual(sub)


def build_parser() -> argparse.ArgumentParser:
    """The ``kvdev`` parser with every command (the docs' CLI reference is rendered from it)."""
    parser = argparse.ArgumentParser(
        prog="kvdev",
        description="Know and check the devices Kubernetes DRA gave this VM.",
        epilog=_MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(with_timeout=True, suppress=False)],
    )
    parser.add_argument("--version", action="version", version=f"kvdev {__version__}")
    commands_ = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _global_options(with_timeout=True, suppress=True)
    no_timeout = _global_options(with_timeout=False, suppress=True)
    for name, (summary, description, epilog) in _COMMAND_HELP.items():
        sub = commands_.add_parser(
            name,
            help=summary,
            description=textwrap.fill(description, 88),
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[no_timeout if name == "wait" else common],
        )
        sub.set_defaults(func=_agent)
        if name == "explain":
            sub.add_argument("device", metavar="DEVICE", help="the device (see below)")
        if name == "wait":
            sub.add_argument(
                "--for",
                dest="target",
                choices=("converged", "ready"),
                default="converged",
                help="what to wait for (default: converged)",
            )
            sub.add_argument(
                "--timeout",
                dest="wait_timeout",
                type=_seconds,
                default=60.0,
                metavar="SECONDS",
                help="give up after this long, exit 1 (default: 60)",
            )
    collect.add_parser(
        commands_,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands_.choices["collect"].set_defaults(func=_collect)
    meta = commands_.add_parser(
        "metadata",
        help="work with DRA device metadata files offline",
        description=("Work with DRA device metadata files (KEP-5304) without the agent."),
    )
    validate.add_parser(meta, _validate)
    _name_the_manual(parser)
    return parser


def _use_color(choice: str, stream: TextIO) -> bool:
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and "NO_COLOR" not in os.environ


def _agent(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return commands.run(args, out, err, color=_use_color(args.color, out))


def _collect(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return collect.run(args, out, err)


def _validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return validate.run(args, out, err, color=_use_color(args.color, out))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev`` console script."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args, sys.stdout, sys.stderr)
    except BrokenPipeError:
        # `kvdev ... | head`: the reader left; that is not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
