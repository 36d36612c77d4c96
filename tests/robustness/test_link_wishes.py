"""The privilege boundary under fuzzing: whatever the agent's user puts in its wish directory.

Regression class (issue 23 §1): the agent (user ``kvdev``) could write any ``.link`` file that
udevd reads as root (``Property=``, ``SYSTEMD_WANTS=``: a root shell, any kernel module). Now the
agent writes only link wishes; the root helper (``kvdev.guest.udevmarks.render``) reads them as
data and renders ``10-kvdev-<name>.link`` files itself. The invariant checked after every
drawn input: the network directory holds the foreign files exactly as they were, plus only
``.link`` files of the fixed form (a comment, one match by MAC, permanent MAC or PCI path, an
interface name that every consumer accepts), and nothing outside it changed. Hypothesis draws
the directory's content as a compromised agent could shape it: any file names, any bytes,
symbolic links (in and out of the directory), FIFOs, directories, hard links, big files.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdev.guest import udevmarks

pytestmark = [pytest.mark.robustness]

FIXED = re.compile(
    r"# Rendered by kvdev-udev-marks from [^\n]+\.wish; removed with it\.\n"
    r"\[Match\]\n"
    r"(?:MACAddress=(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\nPath=\?\*\n"
    r"|PermanentMACAddress=(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\n"
    r"|Path=pci-[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\n)"
    r"\n\[Link\]\nName=(?P<name>[A-Za-z0-9_.-]{1,15})\n"
)
FOREIGN = {"50-site.link": "[Match]\nOriginalName=*\n", "20-lan.network": "[Match]\nName=en*\n"}
GOOD = [b"mac 52:54:00:00:00:10\n", b"permanent-mac 52:54:00:00:00:11\n", b"pci 0000:07:00.0\n"]
HOSTILE = [
    b"mac 52:54:00:00:00:10\nProperty=SYSTEMD_WANTS=debug-shell.service\n",
    b"[Match]\nOriginalName=*\n[Link]\nName=eth0\n",
    b"pci ../../../etc/shadow\n",
    b"mac 52:54:00:00:00:1\n",
    b"\x00\xff\xfe",
    b"",
]
names = st.one_of(
    st.sampled_from(["data0", "a=b", "x y", "a/b", "a:b", ".", "..", "sixteen-chars-xx", "ok"]),
    st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s and "\0" not in s),
)
contents = st.one_of(st.sampled_from(GOOD + HOSTILE), st.binary(max_size=200))
pranks = st.sampled_from(["file", "symlink-out", "symlink-in", "fifo", "dir", "hardlink", "big"])
entries = st.lists(st.tuples(names, contents, pranks), max_size=12)


def plant(wishes: Path, outside: Path, name: str, content: bytes, prank: str) -> None:
    """One entry of the wish directory, shaped as ``prank`` says (errors: left out)."""
    path = wishes / (name if name.endswith(".wish") or len(name) % 2 else f"{name}.wish")
    try:
        if prank in {"file", "big"}:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as out:  # never through a link planted before
                out.write(content + (b"#" * 2_000_000 if prank == "big" else b""))
        elif prank == "symlink-out":
            path.symlink_to(outside / "secret")
        elif prank == "symlink-in":
            plant(wishes, outside, "real.wish", content, "file")
            path.symlink_to("real.wish")
        elif prank == "fifo":
            os.mkfifo(path)
        elif prank == "dir":
            path.mkdir()
        elif prank == "hardlink":
            os.link(outside / "secret", path)
    except OSError:
        pass  # the name cannot be (a duplicate, too long): nothing planted


def findings(network: Path) -> list[str]:
    """What in ``network`` breaks the invariant: a foreign file changed, or a non-fixed form."""
    found = {p.name: p for p in network.iterdir()}
    gone = [n for n in FOREIGN if n not in found]
    bad = [
        f"{n} changed" for n, t in FOREIGN.items() if n in found and found.pop(n).read_text() != t
    ]
    bad += [f"{n} removed" for n in gone]
    for name, path in found.items():
        text = path.read_text(errors="replace") if path.is_file() else "<not a file>"
        match = FIXED.fullmatch(text)
        if path.is_symlink() or match is None or name != f"10-kvdev-{match['name']}.link":
            bad.append(f"{name}: {text!r}")
    return bad


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@settings(
    max_examples=int(os.environ.get("KVDEV_ROBUST_WISHES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=entries)
def test_no_wish_makes_the_helper_write_anything_but_the_fixed_form(tmp_path, report, drawn):
    row = report("link wishes (the privilege boundary)")
    box = tmp_path / f"box{row.inputs}"
    wishes, network, outside = box / "links", box / "network", box / "outside"
    for d in (wishes, network, outside):
        d.mkdir(parents=True)
    (outside / "secret").write_bytes(b"mac 52:54:00:00:00:99\n")
    for name, text in FOREIGN.items():
        (network / name).write_text(text)
    before_outside = snapshot(outside)
    for name, content, prank in drawn:
        plant(wishes, outside, name, content, prank)
    row.inputs += 1
    try:
        kept = udevmarks.render(wishes, network)
    except Exception:  # a crash of the root helper is a finding, not an error of the test
        row.crashes += 1
        raise
    bad = findings(network)
    if snapshot(outside) != before_outside:
        bad.append("a file outside the network directory changed")
    ours = {str(p) for p in network.iterdir() if p.name not in FOREIGN}
    if set(kept) != ours:
        bad.append(f"render returned {sorted(kept)}")
    row.unintended += bool(bad)
    shutil.rmtree(box)
    assert not bad, bad
