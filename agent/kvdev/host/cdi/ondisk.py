"""CDI spec directories and the files their mounts name, read on the node, confined (I/O).

The reads of ``kvdev-host relay`` and ``kvdev-host bundle --from-cdi``, one set of rules: a
directory listed through its descriptor, at most ``MAX_LISTED`` names (``spec_names``); a spec
read beneath its directory (``read_spec``, at most ``spec.MAX_SPEC_BYTES``) and a ``hostPath``
beneath one of the host directories (``read_host_file``, ``HostFiles``: each path once) by
``kvdev._confined``: no link followed, no ``..``, only a regular file with one link opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from kvdev._confined import RefusedError, list_names, place, read_beneath
from kvdev.errors import Problem, SchemaError, TransientReadError
from kvdev.host.cdi.spec import MAX_SPEC_BYTES, SUFFIXES

DEFAULT_HOST_DIRS: Final = ("/var/lib/kubelet/plugins",)  # kubelet's, upstream's plugin data
MAX_LISTED: Final = 65536  # names of one spec directory looked at


def spec_names(directory: Path) -> tuple[list[str], bool]:
    """The CDI spec files of ``directory`` by name (no hidden ones), and whether it was cut.

    The listing is cut at ``MAX_LISTED`` names.

    Raises:
        OSError: the directory cannot be listed (FileNotFoundError: it is not there).
    """
    names, cut = list_names(directory, MAX_LISTED)
    return sorted(n for n in names if n.endswith(SUFFIXES) and not n.startswith(".")), cut


def read_spec(directory: Path, name: str) -> bytes:
    """The bytes of the spec ``name`` beneath ``directory``, confined, at most MAX_SPEC_BYTES.

    Raises:
        SchemaError: it breaks a rule of ``kvdev._confined`` or is too large (named).
        TransientReadError: it cannot be read now.
    """
    path = directory / name
    try:
        return read_beneath(directory, name, MAX_SPEC_BYTES)
    except RefusedError as e:
        raise SchemaError([Problem(e.reason, str(path))]) from e
    except OSError as e:
        raise TransientReadError(f"{path}: cannot read: {e.strerror or e}") from e


def read_host_file(host: str, roots: Sequence[str | os.PathLike[str]], limit: int) -> bytes:
    """The file a mount's ``hostPath`` names, read beneath one of ``roots`` (confined).

    Raises:
        RefusedError: it is not beneath a root, or breaks a rule of ``kvdev._confined``.
        OSError: it cannot be read now.
    """
    placed = place(host, roots)
    if placed is None:
        listed = ", ".join(os.fspath(r) for r in roots) or "none given"
        raise RefusedError(host, f"not beneath a host directory ({listed}); not read")
    root, rel = placed
    return read_beneath(root, rel, limit)


class HostFiles:
    """The ``hostPath`` files of one read of the specs: each distinct path read at most once.

    Each is read by ``read_host_file`` (at most ``limit`` bytes); its answer (bytes or
    refusal) is kept for the other mounts that name it.
    """

    def __init__(self, roots: Iterable[str | os.PathLike[str]], limit: int) -> None:
        self.roots, self.limit = tuple(roots), limit
        self.bytes_read = 0
        self._done: dict[str, bytes | RefusedError | OSError] = {}

    def read(self, host: str) -> bytes:
        """The file's bytes.

        Raises:
            RefusedError: it breaks a rule (not beneath a root, a link, a device ...).
            OSError: it cannot be read now.
        """
        key = "/".join(p for p in host.split("/") if p not in ("", "."))
        if key not in self._done:
            try:
                data = read_host_file(host, self.roots, self.limit)
                self.bytes_read += len(data)
                self._done[key] = data
            except (RefusedError, OSError) as e:
                self._done[key] = e
        got = self._done[key]
        if isinstance(got, BaseException):
            raise got.with_traceback(None)
        return got
