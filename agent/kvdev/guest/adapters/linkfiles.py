"""The agent's link wishes: read the current ones, write and remove them atomically.

A wish (``core.linkwish``) is ``<name>.wish`` in the policy's directory (``/var/lib/kvdev/links``
by default, in the agent's own state); the root helper ``kvdev-udev-marks`` renders each as a
``.link`` file in ``/run/systemd/network``, which the agent cannot write. Only ``*.wish`` files
are ever read (by ``kvdev._confined.read_beneath``: never through a link, never a FIFO, at
most ``WISH_MAX_BYTES``) or touched (and the temporary files of their atomic writes, which ``tidy``
removes when a killed agent left them behind). A failed write is retryable or permanent by the
errno map of every kvdev writer (``kvdev.errors.os_error``).
"""

from __future__ import annotations

from pathlib import Path

from kvdev._atomic import fsync_directory, remove_leftovers, write_atomic
from kvdev._confined import RefusedError, read_beneath
from kvdev.errors import os_error
from kvdev.guest.core.linkwish import WISH_MAX_BYTES, WISH_SUFFIX
from kvdev.guest.core.steps import RemoveLinkFile, Step, StepResult, WriteLinkFile


def read(directory: str) -> dict[str, str]:
    """Path -> content of every link wish in ``directory`` (empty if it is missing)."""
    out: dict[str, str] = {}
    base = Path(directory)
    if not base.is_dir():
        return out
    for path in sorted(base.glob(f"*{WISH_SUFFIX}")):
        try:
            data = read_beneath(base, path.name, WISH_MAX_BYTES)
            out[str(path)] = data.decode("utf-8", "replace")
        except (OSError, RefusedError):
            continue  # vanished, unreadable or not a wish file: planning will rewrite it
    return out


def tidy(directory: str) -> list[Path]:
    """Remove what link-file writes killed mid-way left in ``directory``; the files removed."""
    return remove_leftovers(directory, f"*{WISH_SUFFIX}")


def apply(step: Step) -> StepResult:
    """Write or remove one link wish; never raises for an OS error."""
    if not isinstance(step, WriteLinkFile | RemoveLinkFile):
        return StepResult(step, ok=False, error="not a link-file step")
    try:
        if isinstance(step, WriteLinkFile):
            path = Path(step.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, step.content.encode(), mode=0o644)
        else:
            path = Path(step.path)
            if path.parent.is_dir():  # a directory that is gone took the file with it
                path.unlink(missing_ok=True)
                fsync_directory(path.parent)
    except OSError as e:  # the errno map every kvdev writer uses
        error = os_error(e, "write" if isinstance(step, WriteLinkFile) else "remove", step.path)
        return StepResult(step, ok=False, error=str(error), retryable=error.retryable)
    return StepResult(step, ok=True)
