"""The agent's configuration: defaults, ``/etc/kvdev/agent.toml``, then command-line flags.

The TOML file holds flat keys named like the long options (``metadata-root = "/srv/meta"``).
An unknown key or a wrong type is an error naming the file and the key; a missing default
config file is not an error (an explicitly given one is).
"""

from __future__ import annotations

import contextlib
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from kvdev.errors import UsageError
from kvdev.schema.tree import HINTS_PATH, ROOT

DEFAULT_CONFIG = Path("/etc/kvdev/agent.toml")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Everything the agent can be told."""

    metadata_root: Path = Path(ROOT)
    hints: Path | None = None  # default: <metadata-root>/kvdev/guest-hints.json
    config_drive: Path | None = None  # a mounted config drive's openstack/latest/meta_data.json
    socket: Path = Path("/run/kvdev/agent.sock")
    state_dir: Path = Path("/var/lib/kvdev")
    link_dir: Path = Path("/run/systemd/network")
    config_root: Path = Path("/")  # where the guest's own network configuration is (etc/...)
    altnames: bool = True
    match_kinds: tuple[str, ...] = ()  # software link kinds (e.g. veth) offered to matching
    log_level: str = "info"
    poll_interval: float | None = None  # seconds between stat polls; None = auto, 0 = off
    once: bool = False
    dry_run: bool = False

    @property
    def hints_path(self) -> Path:
        """The hints file to read."""
        return self.hints if self.hints is not None else self.metadata_root / HINTS_PATH


PATH_KEYS = (  # the settings that are paths, in the order the flags are listed
    "metadata_root",
    "hints",
    "config_drive",
    "socket",
    "state_dir",
    "link_dir",
    "config_root",
)
_FILE_KEYS = {f.name for f in fields(AgentConfig)} - {"once", "dry_run"}


def parse_poll_interval(value: object, where: str) -> float | None:
    """``"auto"`` -> None; a number of seconds >= 0 (0 = off) -> float."""
    if value == "auto":
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 3600:
        msg = f"{where} must be 'auto' or a number of seconds from 0 (off) to 3600"
        raise UsageError(msg)
    return float(value)


def from_toml(path: Path, *, required: bool) -> AgentConfig:
    """Load a config file; a missing file gives the defaults unless ``required``."""
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError as e:
        if required:
            raise UsageError(f"{path}: no such config file") from e
        return AgentConfig()
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: {e}") from e
    return merge(AgentConfig(), raw, source=str(path))


def merge(base: AgentConfig, values: dict[str, Any], *, source: str) -> AgentConfig:
    """Apply ``values`` (keys like the long options) over ``base``, checking names and types."""
    changes: dict[str, Any] = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in _FILE_KEYS:
            known = ", ".join(sorted(k.replace("_", "-") for k in _FILE_KEYS))
            raise UsageError(f"{source}: unknown key {key!r} (known: {known})")
        if name == "poll_interval":
            changes[name] = parse_poll_interval(value, f"{source}: {key}")
        else:
            changes[name] = _checked(name, key, value, source)
    return replace(base, **changes)


def _checked(name: str, key: str, value: object, source: str) -> object:
    """A file value of key ``name`` (not poll_interval), converted; UsageError when wrong."""
    if name in PATH_KEYS:
        if not isinstance(value, str) or not value:
            raise UsageError(f"{source}: {key} must be a non-empty path string")
        return Path(value)
    if name == "altnames":
        if not isinstance(value, bool):
            raise UsageError(f"{source}: {key} must be true or false")
        return value
    if name == "match_kinds":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f'{source}: {key} must be a list of link kinds, e.g. ["veth"]')
        return tuple(value)
    if not isinstance(value, str) or value not in {"debug", "info", "warning", "error"}:
        raise UsageError(f"{source}: {key} must be debug, info, warning or error")
    return value
