"""kvdev-udev-marks, the agent's root helper: render its link wishes, bring udev's marks up to date.

Run as root by the agent unit's ``ExecStartPost=`` (so a network manager ordered after the
agent starts with every mark in place) and by ``kvdev-udev-marks.path`` whenever the agent
changes a mark or a wish. The agent (user ``kvdev``) cannot write ``/run/systemd/network``:
this module is the only writer of kvdev's ``.link`` files there, and it reads what the agent
wrote only as data it checks (``core.linkwish``):

1. **Wishes.** Every ``<name>.wish`` in ``/var/lib/kvdev/links`` is read through the directory's
   fd by ``kvdev._confined.read_at`` (a symlink, a FIFO, a device, a hard link, a file owned by
   another user or larger than ``WISH_MAX_BYTES`` is refused, never opened; so is the whole
   directory if it is a symlink)
   and checked by ``parse_wish``; what passes is rendered by ``render_link`` into
   ``10-kvdev-<name>.link`` (atomically, root's, 0644), and every other ``10-kvdev-*.link``
   there is removed (and an ACL entry an older version's tmpfiles.d gave user kvdev on that
   directory is taken out). A directory with more than ``WISHES_MAX`` entries is not read at all:
   the ``.link`` files stay as they were (nothing is lost) and the helper says why. Each
   refusal is one line on stderr naming the file and the reason.
2. **Marks.** One ``udevadm info --export-db`` read per round (not one ``udevadm info`` per
   link), the mark decision of ``81-kvdev.rules`` (``core.linkwish.stale``), and a "change"
   event only for the links whose mark is out of date; at most three rounds. A mark is read
   through the mark directory's fd (never through a link) and only a regular file counts.
3. **NetworkManager** (1.52 tested) reads ``NM_UNMANAGED`` only when a device appears: while
   it runs, each link whose mark changed is taken from it with ``nmcli device set ifname
   NAME managed no`` or handed back with ``managed reset`` (NetworkManager decides again from
   its own configuration and udev, and makes its connection again), ``managed yes`` where
   ``reset`` is refused (an older NetworkManager); one name per argument. A managed state a
   person made permanent (``managed --permanent yes``, NetworkManager 1.58) beats the mark: the
   agent reports it (``core.marking.nm_overrides``), the helper does not undo it.

``KVDEV_LINK_WISHES``, ``KVDEV_NETWORK_DIR``, ``KVDEV_MARK_DIR`` and ``KVDEV_SYSFS`` name other
places (tests only). Imports only the stdlib, ``_atomic``, ``_confined`` and the pure
``linkwish`` (start-up cost: it runs before NetworkManager).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kvdev._atomic import remove_leftovers, write_atomic
from kvdev._confined import RefusedError, read_at, read_beneath, read_path
from kvdev.guest.core.linkwish import (
    LINK_FILE_PREFIX,
    WISH_MAX_BYTES,
    WISH_SUFFIX,
    WISHES_MAX,
    NetLink,
    Wish,
    acl_without_user,
    first_of_each_match,
    link_file_name,
    mark_keys,
    parse_export_db,
    parse_wish,
    render_link,
    stale,
)

WISH_DIR = "/var/lib/kvdev/links"  # the agent's default --link-dir
NETWORK_DIR = "/run/systemd/network"
MARK_DIR = "/var/lib/kvdev/marks"
ROUNDS = 3
TRIGGER_BATCH = 256  # sysfs paths per "udevadm trigger"
SYSFS_ATTR_MAX = 4096  # a sysfs attribute is one page at most (and says so as its size)


def say(message: str) -> None:
    """One line on stderr (the journal, under systemd)."""
    print(f"kvdev-udev-marks: {message}", file=sys.stderr, flush=True)


def shown(path: Path) -> str:
    """A path the agent named, as one line of printable ASCII (a name may hold a newline)."""
    return ascii(str(path))[1:-1][:200]


# --------------------------------------------------------------------------- wishes


def read_wishes(directory: Path) -> list[Wish] | None:
    """The valid wishes in ``directory`` ([] when it is missing); None when it cannot be read."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as e:
        say(f"{directory}: not read ({e.strerror}); the .link files stay as they are")
        return None
    try:
        owner = os.fstat(dfd).st_uid
        entries: list[str] = []
        with os.scandir(dfd) as it:
            for entry in it:
                entries.append(entry.name)
                if len(entries) > WISHES_MAX:
                    say(
                        f"{directory}: more than {WISHES_MAX} entries, not read; "
                        "the .link files stay as they are"
                    )
                    return None
        wishes = []
        for name in sorted(entries):
            if not name.endswith(WISH_SUFFIX):
                continue  # the agent's temporary files, or anything else: not a wish
            try:
                data = read_at(dfd, name, WISH_MAX_BYTES, owners={owner})
                wishes.append(parse_wish(name[: -len(WISH_SUFFIX)], data))
            except RefusedError as e:
                say(f"{shown(directory / name)}: refused: {e.reason}")
            except (OSError, ValueError) as e:
                say(f"{shown(directory / name)}: refused: {getattr(e, 'strerror', None) or e}")
        return wishes
    finally:
        os.close(dfd)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One helper at a time (the unit's ExecStartPost= and the path unit's run may overlap)."""
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(dfd)


_ACL = "system.posix_acl_access"


def drop_old_acl(network_dir: Path, wish_dir: Path) -> None:
    """Take the wish directory's owner (the agent's user) out of ``network_dir``'s ACL."""
    try:
        owner = wish_dir.lstat().st_uid
        acl = os.getxattr(network_dir, _ACL)
    except OSError:
        return  # no wishes yet, or no ACL (ENODATA), or no ACL support
    if owner == os.geteuid():
        return
    changed = acl_without_user(acl, owner)
    if changed is None:
        return
    data, group = changed
    if data is None:
        os.removexattr(network_dir, _ACL)
        mode = network_dir.stat().st_mode
        network_dir.chmod((mode & 0o7707) | (group << 3))
    else:
        os.setxattr(network_dir, _ACL, data)
    say(f"{network_dir}: took uid {owner}'s ACL entry out (an older kvdev's tmpfiles.d)")


def render(wish_dir: Path, network_dir: Path) -> frozenset[str]:
    """Make ``network_dir``'s ``10-kvdev-*.link`` files those of the wishes; the paths kept."""
    drop_old_acl(network_dir, wish_dir)
    remove_leftovers(network_dir, f"{LINK_FILE_PREFIX}*.link")
    present = {
        p.name
        for p in network_dir.iterdir()
        if p.name.startswith(LINK_FILE_PREFIX) and p.name.endswith(".link")
    }
    wishes = read_wishes(wish_dir)
    if wishes is None:
        return frozenset(str(network_dir / n) for n in present)
    kept, again = first_of_each_match(wishes)
    for w in again:
        say(f"{wish_dir / (w.name + WISH_SUFFIX)}: refused: another wish has the same {w.kind}")
    me = os.geteuid()
    wanted = set()
    for w in kept:
        name = link_file_name(w.name)
        wanted.add(name)
        target = network_dir / name
        text = render_link(w, str(wish_dir / (w.name + WISH_SUFFIX)))
        if name in present and _is_ours(target, text, me):
            continue
        write_atomic(target, text.encode(), mode=0o644)
        say(f"{target}: written")
    for name in sorted(present - wanted):
        (network_dir / name).unlink(missing_ok=True)
        say(f"{network_dir / name}: removed")
    return frozenset(str(network_dir / n) for n in wanted)


def _is_ours(path: Path, text: str, me: int) -> bool:
    """True when ``path`` already is this helper's rendering of ``text`` (not a copy by another).

    Read by ``kvdev._confined.read_beneath``: never through a link, never a FIFO, only a
    regular file of one link that is ``me``'s.
    """
    try:
        return read_beneath(path.parent, path.name, len(text), owners={me}) == text.encode()
    except (OSError, RefusedError):
        return False


# --------------------------------------------------------------------------- marks


def _links(sysfs: Path, db: Mapping[str, Mapping[str, str]]) -> list[NetLink]:
    out: list[NetLink] = []
    base = sysfs / "class" / "net"
    try:
        names = sorted(p.name for p in base.iterdir())
    except FileNotFoundError:
        return out
    for name in names:
        try:
            mac = read_path(base / name / "address", SYSFS_ATTR_MAX).decode().strip()
        except (OSError, RefusedError, UnicodeDecodeError):
            continue  # gone, or not a link
        if name in db:  # udev has not seen a link it lacks: nothing to compare yet
            out.append(NetLink(name, mac, (base / name / "device").exists(), db[name]))
    return out


def _export_db() -> dict[str, dict[str, str]]:
    try:
        done = subprocess.run(
            ["udevadm", "info", "--export-db"], capture_output=True, text=True, check=False
        )
    except OSError as e:  # no udevadm: no udev to mark anything for
        say(f"udevadm: {e.strerror}; no marks to update")
        return {}
    if done.returncode != 0:
        say(f"udevadm info --export-db failed: {done.stderr.strip()[:200]}")
        return {}
    return parse_export_db(done.stdout)


def marks_present(mark_dir: Path, keys: list[str]) -> dict[str, bool]:
    """Which marks exist, each key ``lstat``-ed through the mark directory's fd.

    The directory is opened without following a link, and only a regular file counts: a link,
    FIFO or directory is no mark.
    """
    try:
        dfd = os.open(mark_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return dict.fromkeys(keys, False)
    try:
        return {k: _is_mark(dfd, k) for k in keys}
    finally:
        os.close(dfd)


def _is_mark(dfd: int, key: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(key, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def update_marks(sysfs: Path, mark_dir: Path, link_files: frozenset[str]) -> dict[str, bool]:
    """Ask udev to re-read the mark of each link whose mark is out of date; name -> marked."""
    changed: dict[str, bool] = {}
    for n in range(1, ROUNDS + 1):
        links = _links(sysfs, _export_db())
        has_mark = marks_present(mark_dir, [k for link in links for k in mark_keys(link)])
        out_of_date = stale(links, has_mark, link_files)
        if not out_of_date:
            break
        for link, want in out_of_date:
            changed[link.name] = want
            say(f"{link.name}: {'marking' if want else 'unmarking'}")
        paths = [str(sysfs / "class" / "net" / link.name) for link, _ in out_of_date]
        for i in range(0, len(paths), TRIGGER_BATCH):
            subprocess.run(
                ["udevadm", "trigger", "--action=change", "--", *paths[i : i + TRIGGER_BATCH]],
                check=False,
            )
        subprocess.run(["udevadm", "settle", "--timeout=30"], check=False)
        if n == ROUNDS:
            say(f"marks still changing after {n} rounds; the next change runs this again")
    return changed


def tell_network_manager(changed: Mapping[str, bool]) -> None:
    """Hand each changed link to a running NetworkManager, or take it away."""
    if not changed or shutil.which("nmcli") is None:
        return
    running = subprocess.run(
        ["nmcli", "-t", "-f", "RUNNING", "general"], capture_output=True, text=True, check=False
    )
    if running.stdout.strip() != "running":
        return
    for name, mark in sorted(changed.items()):
        for managed in ("no",) if mark else ("reset", "yes"):
            done = subprocess.run(
                ["nmcli", "device", "set", "ifname", name, "managed", managed],
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                break
            say(f"{name}: NetworkManager refused 'managed {managed}'")


def main() -> int:
    """Render the wishes, then update the marks; 0 unless a file could not be written."""
    env = os.environ
    wish_dir = Path(env.get("KVDEV_LINK_WISHES", WISH_DIR))
    network_dir = Path(env.get("KVDEV_NETWORK_DIR", NETWORK_DIR))
    mark_dir = Path(env.get("KVDEV_MARK_DIR", MARK_DIR))
    sysfs = Path(env.get("KVDEV_SYSFS", "/sys"))
    try:
        with _locked(network_dir):
            link_files = render(wish_dir, network_dir)
            changed = update_marks(sysfs, mark_dir, link_files)
    except OSError as e:
        say(f"{e.filename or network_dir}: {e.strerror}")
        return 1
    tell_network_manager(changed)
    return 0
