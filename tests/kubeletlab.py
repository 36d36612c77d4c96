"""A ConfigMap volume as kubelet lays it out and updates it (its atomic writer), for tests.

``publish(root, data)`` writes ``data`` (key -> bytes) as a new version the way kubelet's
atomic writer does: the files into a new ``..<timestamp>`` directory, a ``..data_tmp`` link to
it renamed over ``..data`` (the one atomic step), a ``<key> -> ..data/<key>`` link per key,
then the keys no longer present and the old version removed. Our own code, from kubelet's
documented behaviour (pkg/volume/util/atomic_writer.go).
"""

import itertools
import os
import shutil
import time
from pathlib import Path

_serial = itertools.count()


def publish(root: Path, data: dict[str, bytes]) -> Path:
    """Make ``data`` the version in force of the ConfigMap volume at ``root``; its directory."""
    root.mkdir(parents=True, exist_ok=True)
    data_link = root / "..data"
    old = data_link.readlink() if data_link.is_symlink() else None
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    version = root / f"..{stamp}.{os.getpid()}{next(_serial):06d}"
    version.mkdir(mode=0o755)
    for key, value in data.items():
        (version / key).write_bytes(value)
        (version / key).chmod(0o644)
    tmp = root / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(version.name)
    tmp.replace(data_link)  # the swap
    for key in data:
        link = root / key
        if not link.is_symlink():
            link.symlink_to(f"..data/{key}")
    for entry in root.iterdir():
        if not entry.name.startswith("..") and entry.name not in data:
            entry.unlink()
    if old is not None:
        shutil.rmtree(root / old, ignore_errors=True)
    return version
