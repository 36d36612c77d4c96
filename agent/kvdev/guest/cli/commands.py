"""``kvdev``'s agent commands: status, devices, explain, plan, wait, reconcile, metrics.

``metrics`` prints the agent's counters as it answers them (Prometheus text). The others
ask the running agent through ``client`` and print with ``tables``, or with ``-o json``
(``--json``) or ``-o yaml`` the agent's answer as it came; ``devices`` also takes ``-o wide``
and ``-o name`` (``explain``: ``-o name``). This module owns what those commands do with
the answers and their exit codes: 0 ok, 1 not converged / not found / timed out, 2 the agent
is unreachable or answered an error (one line on stderr, ``kvdev: ...``). The parser lives in
``cli``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO

from kvdev._records import compared
from kvdev.guest.cli.client import AgentError, ApiError, Client, NotRunningError, path_of
from kvdev.guest.views import tables
from kvdev.printable import escape

EXIT_OK: Final = 0
EXIT_NOT_READY: Final = 1
EXIT_ERROR: Final = 2
READ_TIMEOUT: Final = 5.0
ASK_TIMEOUT: Final = 35.0  # plan and reconcile wait for the loop; the agent gives up at 30 s
NO_SOCKET_RETRY: Final = 0.2  # wait: between tries while the socket does not exist yet
NOT_READY_POLL: Final = 1.0  # wait: long-poll bound before the first status (it may bring no event)
MAX_POLL: Final = 60.0  # the agent's own bound on ?wait=
OUTPUTS: Final = ("json", "yaml", "wide", "name")  # -o: one convention with kvdev-host's
_LISTS: Final = {"wide": {"devices"}, "name": {"devices", "explain"}}  # who takes which


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Context:
    """What every command needs: the client, the streams, the output choices."""

    client: Client
    out: TextIO
    err: TextIO
    output: str | None  # -o: None (the text), or one of OUTPUTS
    color: bool

    @property
    def json(self) -> bool:
        """The agent's answer as data (``-o json`` or ``-o yaml``), not a rendering."""
        return self.output in {"json", "yaml"}

    def dump(self, body: Mapping[str, Any]) -> None:
        """The agent's JSON, unchanged: 2-space indented JSON, or YAML (``-o yaml``)."""
        if self.output == "yaml":
            self.out.write(_yaml(body))
            return
        json.dump(body, self.out, indent=2)
        self.out.write("\n")

    def fail(self, message: str, code: int = EXIT_ERROR) -> int:
        """One ``kvdev: ...`` line on stderr; ``code``."""
        self.err.write(f"kvdev: {escape(message)}\n")
        return code


def run(args: argparse.Namespace, out: TextIO, err: TextIO, *, color: bool) -> int:
    """Run ``args.command``; connection and agent errors print one line and return 2."""
    command = _COMMANDS[args.command]
    default = ASK_TIMEOUT if args.command in {"plan", "reconcile"} else READ_TIMEOUT
    timeout = args.timeout if args.timeout is not None else default
    output = getattr(args, "output", None)
    if output is not None and args.command == "metrics":
        err.write(f"kvdev: metrics prints Prometheus's text format only; drop -o {output}\n")
        return EXIT_ERROR
    if output in _LISTS and args.command not in _LISTS[output]:
        takes = " and ".join(sorted(_LISTS[output]))
        err.write(f"kvdev: -o {output} is for {takes}; {args.command} takes -o json or yaml\n")
        return EXIT_ERROR
    ctx = Context(Client(args.socket, timeout), out, err, output, color)
    try:
        return command(ctx, args)
    except AgentError as e:
        return ctx.fail(str(e))


def _status(ctx: Context, _args: argparse.Namespace) -> int:
    answer = ctx.client.request("GET", "/v1/status")
    if answer.status == 503:  # no first pass yet: a state, not an error
        if ctx.json:
            ctx.dump(answer.body)
        else:
            ctx.out.write(f"ready: no ({answer.body.get('message', 'not ready')})\n")
        return EXIT_NOT_READY
    body = ctx.client.check(answer)
    if ctx.json:
        ctx.dump(body)
    else:
        ctx.out.write(tables.status_text(body, ctx.color))
    return EXIT_OK if body.get("converged") else EXIT_NOT_READY


def _devices(ctx: Context, _args: argparse.Namespace) -> int:
    body = ctx.client.get("/v1/devices")
    items = body.get("items") or []
    if ctx.json:
        ctx.dump(body)
    elif ctx.output == "name":
        ctx.out.writelines(f"{escape(str(d.get('ref')))}\n" for d in items)
    elif ctx.output == "wide":
        ctx.out.write(tables.devices_table(items, ctx.color, tables.WIDE_COLUMNS))
    else:
        ctx.out.write(tables.devices_table(tables.short_refs(items), ctx.color))
    return EXIT_OK


def _explain(ctx: Context, args: argparse.Namespace) -> int:
    key: str = args.device
    found: list[Mapping[str, Any]]
    parts = key.split("/")
    if len(parts) in {3, 4} and all(parts):  # claim/request[/subrequest]/device
        answer = ctx.client.request("GET", path_of("v1", "devices", *parts))
        if answer.status == 409:
            items = ctx.client.get("/v1/devices").get("items") or []
            same = [d for d in items if _short_match(d, parts)]
            refs = ", ".join(str(d.get("ref")) for d in same)
            return ctx.fail(f"{len(same)} devices match {key}: {refs}; name one by its full ref")
        if answer.status == 404:
            return _not_found(ctx, key, ctx.client.get("/v1/devices").get("items") or [])
        found = [ctx.client.check(answer)]
    else:
        items = ctx.client.get("/v1/devices").get("items") or []
        found, _ = tables.find_devices(items, key)
        if not found:
            return _not_found(ctx, key, items)
        if len(found) > 1:
            refs = ", ".join(str(d.get("ref")) for d in found)
            return ctx.fail(f"{len(found)} devices match {key}: {refs}; name one by its full ref")
    if ctx.json:
        ctx.dump(found[0])
    elif ctx.output == "name":
        ctx.out.write(f"{escape(str(found[0].get('ref')))}\n")
    else:
        ctx.out.write(tables.explain_text(found[0], ctx.color))
    return EXIT_OK


def _short_match(d: Mapping[str, Any], parts: list[str]) -> bool:
    claims = {d.get("claim"), d.get("podClaimName")}
    return (
        parts[0] in claims
        and d.get("request") == "/".join(parts[1:-1])
        and (d.get("device") == parts[-1])
    )


def _not_found(ctx: Context, key: str, items: Sequence[Mapping[str, Any]]) -> int:
    ctx.err.write(
        f"kvdev: no described device matches {key!r} "
        "(tried: claim/request/device, full ref, interface name or altname, MAC, guest PCI, "
        "device name)\n"
    )
    if items:
        ctx.err.write("described devices:\n")
        ctx.err.writelines(f"  {escape(str(d.get('ref')))}\n" for d in items)
    return EXIT_NOT_READY


def _plan(ctx: Context, _args: argparse.Namespace) -> int:
    body = ctx.client.get("/v1/plan")
    if ctx.json:
        ctx.dump(body)
    else:
        ctx.out.write(tables.plan_text(body, ctx.color))
    return EXIT_OK


def _reconcile(ctx: Context, _args: argparse.Namespace) -> int:
    try:
        body = ctx.client.post("/v1/reconcile")
    except ApiError as e:
        if e.status == 403:
            return ctx.fail("only root may ask the agent to reconcile (try: sudo kvdev reconcile)")
        raise
    if ctx.json:
        ctx.dump(body)
    else:
        took = body.get("tookSeconds")
        ctx.out.write(
            f"reconciled: pass #{body.get('reconcile')} in {took} s: "
            f"{tables.counts_text(body.get('counts') or {}, ctx.color)}\n"
        )
        ctx.out.writelines(
            escape(f"  {d.get('ref')}: {d.get('phase')}: {d.get('reason') or '-'}") + "\n"
            for d in body.get("devices") or []
            if d.get("phase") != "Configured"
        )
    return EXIT_OK if body.get("converged") else EXIT_NOT_READY


def _metrics(ctx: Context, _args: argparse.Namespace) -> int:
    ctx.out.write(ctx.client.text("/v1/metrics"))
    return EXIT_OK


def _yaml(body: Mapping[str, Any]) -> str:
    """``-o yaml``: PyYAML, when installed (the guest's own dependencies do not need it)."""
    try:
        import yaml  # noqa: PLC0415 - optional: only -o yaml needs it
    except ImportError as e:
        msg = "-o yaml needs PyYAML (python3-yaml, which the package suggests); -o json is the same"
        raise AgentError(msg) from e
    text: str = yaml.safe_dump(dict(body), sort_keys=False, default_flow_style=False)
    return text


class _Waiter:
    """``kvdev wait``'s state between polls: the event cursor and the last status seen."""

    def __init__(self, ctx: Context, target: str) -> None:
        self.ctx = ctx
        self.target = target
        self.since: int | None = None  # None: ask the agent for its current event number
        self.pid: object = None
        self.ready = False
        self.last: dict[str, Any] | None = None
        self.why = "the agent has not finished its first pass"

    def reached(self) -> bool:
        """Read the status (first the event cursor, so no change can slip in between)."""
        client = self.ctx.client
        if self.since is None:
            self.since = int(client.get("/v1/events", {"since": "0"}).get("next", 0))
        answer = client.request("GET", "/v1/status")
        self.ready = answer.status == 200
        if not self.ready:
            if answer.status != 503:  # 503: no first pass yet
                client.check(answer)
            return False
        self.last = body = answer.body
        self.why = str(body.get("summary") or tables.counts_text(body.get("counts") or {}))
        pid = (body.get("agent") or {}).get("pid")
        if self.pid is not None and pid != self.pid:
            self.since = None  # a new agent numbers its events afresh
        self.pid = pid
        return self.target == "ready" or bool(body.get("converged"))

    def poll(self, remaining: float) -> None:
        """Long-poll for the next events (bounded, so a quiet first pass is not missed)."""
        if self.since is None:
            return
        wait = min(remaining, MAX_POLL if self.ready else NOT_READY_POLL)
        query = {"since": str(self.since), "wait": f"{wait:.3f}"}
        events = self.ctx.client.get("/v1/events", query, timeout=wait + self.ctx.client.timeout)
        self.since = int(events.get("next", self.since))

    def lost(self, why: str) -> None:
        """No socket (yet, or any more): start over when it comes back."""
        self.why, self.since, self.pid, self.ready = why, None, None, False


def _wait(ctx: Context, args: argparse.Namespace) -> int:
    """Long-poll the events; re-read the status after each batch; never spin."""
    waiter = _Waiter(ctx, args.target)
    started = time.monotonic()
    deadline = started + args.wait_timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            if waiter.reached():
                break
            if remaining <= 0:
                return _timed_out(ctx, waiter, args.wait_timeout)
            waiter.poll(remaining)
        except NotRunningError as e:
            waiter.lost(str(e))
            if remaining <= 0:
                return _timed_out(ctx, waiter, args.wait_timeout)
            time.sleep(min(NO_SOCKET_RETRY, remaining))
    if ctx.json and waiter.last is not None:
        ctx.dump(waiter.last)
    else:
        ctx.out.write(f"{args.target} after {time.monotonic() - started:.1f} s: {waiter.why}\n")
    return EXIT_OK


def _timed_out(ctx: Context, waiter: _Waiter, timeout: float) -> int:
    if ctx.json and waiter.last is not None:
        ctx.dump(waiter.last)
    return ctx.fail(f"not {waiter.target} after {timeout:g} s: {waiter.why}", EXIT_NOT_READY)


_COMMANDS: Final[dict[str, Callable[[Context, argparse.Namespace], int]]] = {
    "status": _status,
    "devices": _devices,
    "explain": _explain,
    "plan": _plan,
    "wait": _wait,
    "reconcile": _reconcile,
    "metrics": _metrics,
}
