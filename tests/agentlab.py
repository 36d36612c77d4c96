"""A real kvdev-agent in a network namespace: helpers for the integration and robustness tests.

A namespace stands in for the guest: veth links carry the bundled example's MACs, the agent
runs as a real process inside it (``ip netns exec``) against a private copy of the example
tree, and every assertion reads the kernel with ``ip -j``.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "packaging" / "examples"
CONFIG_DRIVE = EXAMPLES / "config-drive/openstack/latest/meta_data.json"
AGENT = os.environ.get("KVDEV_TEST_AGENT") or (  # e.g. an installed agent, or a wrapper
    shutil.which("kvdev-agent") or str(Path(sys.executable).parent / "kvdev-agent")
)
NICS = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"  # vf-1
HINTS = "kvdev/guest-hints.json"
LINKS = (
    ("eth1", "02:00:00:3b:02:01"),
    ("eth2", "02:00:00:3b:02:02"),
    ("eth3", "0c:42:a1:5e:00:01"),
)


def ip(ns, *args):
    return subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, text=True)


def ip_json(ns, *args):
    out = subprocess.run(["ip", "-j", "-n", ns, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout) if out.stdout.strip() else []


def addresses(ns, dev):
    found = ip_json(ns, "addr", "show", "dev", dev)
    return sorted(
        f"{a['local']}/{a['prefixlen']}" for a in found[0]["addr_info"] if a["scope"] == "global"
    )


def snapshot(ns):
    """What kvdev may change, per link: name, MAC, MTU, up, altnames, global addresses; routes.

    Kernel-owned details that move by themselves (counters, IPv6 link-local and DAD flags,
    lifetimes) are left out, so two snapshots differ only when someone changed something.
    """
    links = {
        entry["ifindex"]: (
            entry["ifname"],
            entry.get("address"),
            entry.get("mtu"),
            "UP" in entry.get("flags", []),
            tuple(sorted(entry.get("altnames", []))),
            tuple(
                sorted(
                    f"{a['local']}/{a['prefixlen']}"
                    for a in entry.get("addr_info", [])
                    if a.get("scope") == "global"
                )
            ),
        )
        for entry in ip_json(ns, "addr")
    }
    routes = sorted(  # those the kernel derives from addresses and links are covered above
        json.dumps(r, sort_keys=True)
        for r in ip_json(ns, "route", "show", "table", "all")
        if r.get("protocol") != "kernel"
    )
    return links, tuple(routes)


def link(ns, dev):
    return ip_json(ns, "-d", "link", "show", "dev", dev)[0]


def add_link(ns, name, mac, peer):
    ip(ns, "link", "add", name, "address", mac, "type", "veth", "peer", "name", peer)
    ip(ns, "link", "set", peer, "up")


def make_guest(ns, work):
    """Give ``ns`` the example's three NICs; return a private copy of the example tree."""
    for i, (name, mac) in enumerate(LINKS, start=1):
        add_link(ns, name, mac, f"peer{i}")
    tree = work / "tree"
    shutil.copytree(EXAMPLES / "dra-device-attributes", tree)
    return tree


def agent_args(tree, work, *extra, sock=None):
    return [
        AGENT,
        "--metadata-root",
        str(tree),
        "--config-drive",
        str(CONFIG_DRIVE),
        "--link-dir",
        str(work / "network"),
        "--state-dir",
        str(work / "state"),
        "--config-root",  # the guest's own network configuration: none unless a test writes it
        str(work / "guest-root"),
        "--socket",
        str(sock or work / "agent.sock"),
        "--config",
        "/dev/null",
        "--match-kind",
        "veth",
        *extra,
    ]


def stream_objects(path):
    """The JSON objects of a metadata stream file, however laid out (ours are indented)."""
    return json_objects(path.read_bytes())


def json_objects(data):
    """The JSON objects of a stream's bytes, one per line or indented."""
    decoder, text, pos, out = json.JSONDecoder(), data.decode(), 0, []
    while (start := text.find("{", pos)) != -1:
        value, pos = decoder.raw_decode(text, start)
        out.append(value)
    return out


def write_atomically(path, text):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def eventually(check, timeout=10.0):
    """Wait (bounded) until ``check()`` is truthy; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except subprocess.CalledProcessError:  # e.g. the link is not there (yet)
            value = None
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


class Notify:
    """A NOTIFY_SOCKET the agent reports READY=1 and STATUS= to, drained as systemd does.

    A reader thread empties it all the time: a datagram socket nobody reads fills up, and
    the agent then drops its next notifications (``systemd.notify`` never blocks), READY=1
    among them.
    """

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.path = path
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while self.sock.fileno() >= 0:
            try:
                self.seen.extend(self.sock.recv(4096).decode().splitlines())
            except TimeoutError:
                continue
            except OSError:
                return  # closed

    def collect(self):
        time.sleep(0.05)
        return self.seen

    def close(self):
        self.sock.close()
        self._reader.join(timeout=5)


def activation_socket(path):
    """A listening socket at ``path``, as kvdev-agent.socket holds it for the agent."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    return listener


@contextlib.contextmanager
def serving(ns, tree, work, *extra, sock=None, listener=None):
    """The agent serving in ``ns`` until the block ends (SIGTERM then); yields (proc, notify).

    Ready means READY=1 arrived: the first pass is done and the API socket answers (with
    ``listener``, passed as systemd's socket activation passes it, fd 3 with LISTEN_FDS and
    LISTEN_PID: it is served from just after READY=1). The agent's output goes to
    ``work/agent.log``.
    """
    notify = Notify(work / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": str(notify.path)}
    argv = agent_args(tree, work, *extra, sock=sock)
    if listener is not None:
        fd = listener.fileno()
        wrap = f'export LISTEN_FDS=1 LISTEN_PID=$$; exec "$0" "$@" 3<&{fd} {fd}<&-'
        argv = ["bash", "-c", wrap, *argv]  # bash: dash takes no fd above 9
    with (work / "agent.log").open("ab") as log:  # a file: a full pipe would block the agent
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(listener.fileno(),) if listener is not None else (),
        )
    try:
        ready = eventually(lambda: "READY=1" in notify.collect() or proc.poll() is not None)
        assert ready, "the agent did not report READY=1 within 10 s"
        assert proc.poll() is None, f"the agent exited {proc.returncode}"
        yield proc, notify
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # the test fails anyway (it must not hang); leave nothing behind
            proc.wait()
            raise
        finally:
            notify.close()
