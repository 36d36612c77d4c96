"""The guest opens files for reading only through ``kvdev._confined``, or says here why not.

Every call that could open a file for reading in ``kvdev.guest`` is found in the source (``open``,
``Path.open``, ``read_text``/``read_bytes``, ``os.open`` without ``O_PATH``, ``O_DIRECTORY`` or
``O_WRONLY`` in its flags, ``os.fdopen`` of a mode without ``w``): outside ``ALLOWED`` it is a
failure naming the module and the line. A new reader then either goes through the confined
reader (which names its guarantees: limit, no-follow, owner, non-blocking) or earns its line here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kvdev.guest

GUEST = Path(kvdev.guest.__file__).parent

ALLOWED = {
    "adapters/procstats.py": "sysfs statistics of a link: the kernel's files, one page at most",
    "adapters/udev.py": "sysfs attributes of a device (its IOMMU group's name): the kernel's",
    "adapters/fspoll.py": "/proc/self/mountinfo: the kernel's view of this process's mounts",
    "api/httpconn.py": "/proc/<pid>/status of a peer the kernel named (SO_PEERCRED)",
    "adapters/netlink/_rtnl.py": "network namespace handles for setns(2): opened, never read",
    "adapters/config.py": "the admin's own config file, named on the command line: any file "
    "the admin names is read (``--config /dev/null`` is no configuration)",
}
NOT_READING = ("O_PATH", "O_DIRECTORY", "O_WRONLY")  # os.open flags that read no file's content
NOT_FILES = {"tarfile"}  # X.open(...) that opens no path (tarfile.open(fileobj=...))


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) of every call in ``tree`` that may open a file for reading."""
    return [
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _may_read(node)
    ]


def _may_read(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "open"
    if not isinstance(func, ast.Attribute):
        return False
    owner = ast.unparse(func.value)
    flags = " ".join(ast.unparse(a) for a in call.args[1:])
    if func.attr in {"read_text", "read_bytes"}:
        return True
    if owner == "os" and func.attr == "open":
        return not any(f in flags for f in NOT_READING)
    if owner == "os" and func.attr == "fdopen":
        return "w" not in flags
    return func.attr == "open" and owner not in NOT_FILES and not owner.startswith("self")


def test_the_guest_reads_files_only_through_the_confined_reader():
    offenders = []
    for path in sorted(GUEST.rglob("*.py")):
        rel = path.relative_to(GUEST).as_posix()
        if rel in ALLOWED:
            continue
        tree = ast.parse(path.read_text(), str(path))
        offenders += [f"{rel}:{line}: {call}" for line, call in _reads(tree)]
    assert offenders == [], "read these through kvdev._confined (or allow them, with why)"


def test_each_allowed_module_still_reads_on_its_own():
    """An allowance nobody needs any more is taken out, not kept."""
    idle = [rel for rel in ALLOWED if not _reads(ast.parse((GUEST / rel).read_text(), rel))]
    assert idle == []


def test_the_check_sees_each_way_of_opening_a_file():
    """The finder itself: each form is found, and the opens that read nothing are not."""
    source = """
open(p)
Path(p).open("rb")
p.read_text()
p.read_bytes()
os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
os.fdopen(fd, "rb")
os.open(p, os.O_PATH | os.O_CLOEXEC)
os.open(d, os.O_RDONLY | os.O_DIRECTORY)
os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
os.fdopen(fd, "wb")
tarfile.open(fileobj=raw, mode="w:gz")
self._open()
"""
    assert [line for line, _ in _reads(ast.parse(source))] == [2, 3, 4, 5, 6, 7]
