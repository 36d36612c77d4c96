"""A small JSON journal of the state directory: written atomically, read when it may be damaged.

The agent's journals (``renames.json``, ``addresses.json``, ``altnames.json``) are objects it
wrote itself (``save_object``: atomically and durably, the file removed when the journal is
empty), but a crash, a full disk or a hand can leave anything there. A file that is no JSON
object (or is larger than its bound, or nested too deep to decode) is moved aside once to
``<name>.corrupt`` (replacing an older one), with a warning naming the file and what is wrong,
so that it is kept for whoever looks into it and not warned about again at the next start.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvdev._atomic import write_atomic

log = logging.getLogger("kvdev.agent")


def load_object(path: Path, max_bytes: int, what: str, *, set_aside: bool = True) -> dict[str, Any]:
    """The JSON object in ``path``; empty when there is none, it cannot be read, or is bad.

    ``set_aside=False`` (a dry run) leaves a bad file where it is, warning only.
    """
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        log.warning("cannot read the %s %s: %s; not used", what, path, e.strerror or e)
        return {}
    if len(data) > max_bytes:
        _set_aside(path, what, f"larger than {max_bytes} bytes", move=set_aside)
        return {}
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested too deep
        _set_aside(path, what, f"not JSON: {e}", move=set_aside)
        return {}
    if not isinstance(body, dict):
        _set_aside(path, what, f"a JSON {type(body).__name__}, not an object", move=set_aside)
        return {}
    return body


def save_object(path: Path, body: Mapping[str, Any]) -> None:
    """Write ``body`` to ``path`` as one JSON line, atomically; remove the file when it is empty.

    Raises OSError.
    """
    if not body:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    write_atomic(path, (json.dumps(body, sort_keys=True) + "\n").encode(), mode=0o644)


def _set_aside(path: Path, what: str, why: str, *, move: bool) -> None:
    if not move:
        log.warning("ignoring the %s %s (%s); a dry run leaves it there", what, path, why)
        return
    aside = path.with_name(f"{path.name}.corrupt")
    try:
        path.replace(aside)
    except OSError as e:
        reason = e.strerror or e
        log.warning("ignoring the %s %s (%s); cannot move it aside: %s", what, path, why, reason)
        return
    log.warning("ignoring the %s %s (%s); kept as %s", what, path, why, aside)
