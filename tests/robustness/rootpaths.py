"""A tree an unprivileged user owns and rewrites between a root process's steps, and the judge.

``Mallory`` is a forked process running as ``nobody`` (uid 65534) that owns the tree and
rewrites one entry on request: the entry swapped for a symbolic link into a root-only mirror
of the tree (the secret), for a FIFO, for a hard link to the secret (made by root: with
``fs.protected_hardlinks=1`` the user could not, without it they could), or its parent
directory swapped for a link to the secret's. ``Steps`` hooks the filesystem calls a root path
makes in-process (``os.open``/``stat``/``lstat``/``listdir``/``scandir``/``readlink`` and
``io.open``, which pathlib uses): each call about an entry of the tree is one step, and
Mallory rewrites that entry just before step ``at`` (or before every step). Nothing races:
the swap happens exactly between two of the root path's system calls.

The hook also judges the calls themselves: a call that resolves a path through a link
Mallory made (an intermediate component, or the last one without ``O_NOFOLLOW``/
``follow_symlinks=False``) is recorded as followed, and an open that would block on a FIFO
(no ``O_NONBLOCK``) is recorded and answered with ``EAGAIN`` instead of hanging the test.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import pickle
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

UID = GID = 65534  # nobody
KINDS = ("symlink", "fifo", "hardlink", "dirswap")
SECRET = b"SECRET-as-etc-shadow-"


# --------------------------------------------------------------------------- Mallory's moves
# Each runs in Mallory's process (uid 65534) with paths relative to the tree, which is its cwd.


def _remove(rel: str) -> Path:
    """``rel`` out of the way: a directory renamed aside (``rel~N``), anything else unlinked."""
    path = Path(rel)
    if path.is_dir() and not path.is_symlink():
        n = 0
        while Path(f"{rel}~{n}").is_symlink() or Path(f"{rel}~{n}").exists():
            n += 1
        path.rename(f"{rel}~{n}")
    else:
        path.unlink()
    return path


def _op_symlink(rel: str, secret: str) -> None:
    _remove(rel).symlink_to(secret)


def _op_fifo(rel: str) -> None:
    os.mkfifo(_remove(rel), 0o644)


def _op_clear(rel: str, as_dir: bool) -> None:
    path = _remove(rel)
    if as_dir:
        path.mkdir(mode=0o755)


_OPS: dict[str, Callable[..., None]] = {
    "symlink": _op_symlink,
    "fifo": _op_fifo,
    "clear": _op_clear,
}


class Mallory:
    """The unprivileged owner of ``tree``: a child process as uid/gid 65534, its cwd the tree."""

    def __init__(self, tree: Path, secret: Path) -> None:
        self.tree, self.secret = tree, secret
        for path in (tree, *tree.rglob("*")):
            os.lchown(path, UID, GID)
        to_child, self._cmds = os.pipe()
        self._acks, from_child = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                os.close(self._cmds)
                os.close(self._acks)
                os.chdir(tree)
                os.setgroups([])
                os.setresgid(GID, GID, GID)
                os.setresuid(UID, UID, UID)
                with os.fdopen(to_child, "rb") as cmds, os.fdopen(from_child, "wb") as acks:
                    while True:
                        try:
                            op, args = pickle.load(cmds)  # noqa: S301 - our own pipe
                        except EOFError:
                            break
                        try:
                            _OPS[op](*args)
                            answer = ""
                        except OSError as e:
                            answer = f"{op} {args}: {e}"
                        pickle.dump(answer, acks)
                        acks.flush()
            except BaseException:  # noqa: BLE001 - the child must never return into pytest
                code = 1
            os._exit(code)
        os.close(to_child)
        os.close(from_child)
        self.pid = pid
        self._out = os.fdopen(self._cmds, "wb")
        self._in = os.fdopen(self._acks, "rb")

    def do(self, op: str, *args: object) -> str:
        pickle.dump((op, args), self._out)
        self._out.flush()
        return pickle.load(self._in)  # noqa: S301 - our own pipe

    def close(self) -> None:
        self._out.close()
        self._in.close()
        os.waitpid(self.pid, 0)

    def attack(self, kind: str, target: Path) -> None:  # noqa: C901 - one branch a move
        """Rewrite ``target`` (an entry of the tree, not the tree itself) as ``kind`` says."""
        real_lstat = _REAL["lstat"]
        try:
            real_lstat(target)
        except OSError:
            return  # gone already (an earlier move)
        rel = os.path.relpath(target, self.tree)
        if rel.startswith(".."):
            return
        mirror = self.secret / _unmoved(rel)
        if kind == "symlink":
            self.do("symlink", rel, str(mirror))
        elif kind == "fifo":
            self.do("fifo", rel)
        elif kind == "hardlink":  # the user clears it; root links (protected_hardlinks=0)
            is_dir = mirror.is_dir()
            self.do("clear", rel, is_dir)
            if is_dir:
                for f in mirror.iterdir():
                    if f.is_file():
                        os.link(f, target / f.name)
            elif mirror.is_file():
                os.link(mirror, target)
        elif kind == "dirswap":
            parent = str(Path(rel).parent)
            if parent != ".":
                self.do("symlink", parent, str(self.secret / _unmoved(parent)))
            else:
                self.do("symlink", rel, str(mirror))


def _unmoved(rel: str) -> str:
    """``links~0/x`` -> ``links/x``: the mirror's name for an entry Mallory moved aside."""
    return "/".join(part.split("~")[0] for part in rel.split("/"))


def mirror(tree: Path, secret: Path, content: Callable[[str], bytes]) -> None:
    """``secret``: root's 0700 copy of ``tree``'s shape, each file holding ``content(rel)``."""
    secret.mkdir(mode=0o700)
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree)
        if path.is_dir():
            (secret / rel).mkdir(mode=0o700)
        else:
            (secret / rel).write_bytes(content(str(rel)))
            (secret / rel).chmod(0o600)


# --------------------------------------------------------------------------- the hook

_NAMES = ("open", "stat", "lstat", "listdir", "scandir", "readlink")
_REAL: dict[str, Callable[..., object]] = {n: getattr(os, n) for n in _NAMES}
_REAL["io.open"] = io.open


class Steps:
    """Hook the filesystem calls under ``tree``; Mallory moves before step ``at`` (None: each)."""

    def __init__(self, tree: Path, mallory: Mallory | None, kind: str, at: int | None) -> None:
        self.tree, self.mallory, self.kind, self.at = tree, mallory, kind, at
        self.count = 0
        self.violations: list[str] = []
        self.mallory_errors: list[str] = []

    # which entry a call is about -------------------------------------------------------
    def _where(self, path: object, dir_fd: int | None) -> Path | None:
        if isinstance(path, int):  # listdir(fd)/scandir(fd): the directory itself
            where = Path(str(_REAL["readlink"](f"/proc/self/fd/{path}")))
        else:
            name = os.fsdecode(path)  # type: ignore[arg-type]
            if dir_fd is not None:
                base = Path(str(_REAL["readlink"](f"/proc/self/fd/{dir_fd}")))
                where = base / name
            else:
                where = Path.cwd() / name
        return where if where == self.tree or self.tree in where.parents else None

    def _mallorys_link(self, path: Path) -> bool:
        try:
            st = _REAL["lstat"](path)
        except OSError:
            return False
        return stat.S_ISLNK(st.st_mode) and st.st_uid == UID  # type: ignore[attr-defined]

    def _judge(self, call: str, path: object, dir_fd: int | None, *, follows: bool) -> None:
        where = self._where(path, dir_fd)
        if where is None:
            return
        self.count += 1
        if self.mallory is not None and where != self.tree:
            if self.at is None:
                self.mallory.attack(KINDS[self.count % len(KINDS)], where)
            elif self.count - 1 == self.at:
                self.mallory.attack(self.kind, where)
        if isinstance(path, int):
            return
        # the components this call resolves: from the tree (or the dir fd) down to the entry
        if dir_fd is None:
            rel = where.relative_to(self.tree).parts
            chain = [self.tree.joinpath(*rel[: i + 1]) for i in range(len(rel))]
        else:
            chain = [where]
        resolved = chain if follows else chain[:-1]
        for component in resolved:
            if self._mallorys_link(component):
                self.violations.append(f"{call} {where} followed the user's link {component}")

    def _fifo(self, call: str, path: object, dir_fd: int | None, flags: int) -> None:
        # O_DIRECTORY never blocks: the kernel answers ENOTDIR before it opens a FIFO; nor does
        # O_PATH, which opens nothing (the confined reader looks with it before it opens)
        if (
            flags & (os.O_NONBLOCK | os.O_DIRECTORY | os.O_PATH)
            or self._where(path, dir_fd) is None
        ):
            return
        try:
            st = _REAL["stat"](path, dir_fd=dir_fd, follow_symlinks=not flags & os.O_NOFOLLOW)
        except OSError:
            return
        if stat.S_ISFIFO(st.st_mode):  # type: ignore[attr-defined]
            self.violations.append(f"{call} {path} would block on a FIFO")
            raise BlockingIOError(errno.EAGAIN, "would block on a FIFO", path)

    # the hooked calls ------------------------------------------------------------------
    def open(self, path, flags, mode=0o777, *, dir_fd=None):
        self._judge("open", path, dir_fd, follows=not flags & os.O_NOFOLLOW)
        self._fifo("open", path, dir_fd, flags)
        return _REAL["open"](path, flags, mode, dir_fd=dir_fd)

    def stat(self, path, *, dir_fd=None, follow_symlinks=True):
        self._judge("stat", path, dir_fd, follows=follow_symlinks)
        return _REAL["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    def lstat(self, path, *, dir_fd=None):
        self._judge("lstat", path, dir_fd, follows=False)
        return _REAL["lstat"](path, dir_fd=dir_fd)

    def listdir(self, path="."):
        self._judge("listdir", path, None, follows=True)
        return _REAL["listdir"](path)

    def scandir(self, path="."):
        self._judge("scandir", path, None, follows=True)
        return _REAL["scandir"](path)

    def readlink(self, path, *, dir_fd=None):
        self._judge("readlink", path, dir_fd, follows=False)
        return _REAL["readlink"](path, dir_fd=dir_fd)

    def io_open(self, file, mode="r", *args, **kw):
        if isinstance(file, str | bytes | os.PathLike):
            self._judge("open", file, None, follows=True)
            if "r" in mode:
                self._fifo("open", file, None, 0)
        return _REAL["io.open"](file, mode, *args, **kw)


@contextlib.contextmanager
def hooked(steps: Steps) -> Iterator[Steps]:
    """``steps`` in place of the real calls (for this process, while the block runs)."""
    saved = {n: getattr(os, n) for n in _NAMES}
    saved_io = io.open
    try:
        for n in _NAMES:
            setattr(os, n, getattr(steps, n))
        io.open = steps.io_open
        yield steps
    finally:
        for n, f in saved.items():
            setattr(os, n, f)
        io.open = saved_io


def under_attack(
    tree: Path, secret: Path, kind: str, at: int | None, run: Callable[[], object], *, attack: bool
) -> tuple[object, Steps]:
    """``run()`` hooked, Mallory (when ``attack``) moving before step ``at`` (None: each)."""
    mallory = Mallory(tree, secret) if attack else None
    steps = Steps(tree, mallory, kind, at)
    try:
        with hooked(steps):
            return run(), steps
    finally:
        if mallory is not None:
            mallory.close()
