"""The agent's configuration, in layers, and where each value came from.

Lowest first: the defaults, ``/etc/kvdev/agent.toml``, its drop-ins
(``/etc/kvdev/agent.toml.d/*.toml``, in name order), the environment (``KVDEV_AGENT_<KEY>``,
e.g. ``KVDEV_AGENT_LOG_LEVEL=debug``), then command-line flags. The TOML files hold flat keys
named like the long options (``metadata-root = "/srv/meta"``). An unknown key or a wrong type
is an error naming the file (or variable) and the key; a missing default config file is not
an error (an explicitly given one is). ``layered`` returns the configuration with each key's
origin, which ``kvdev-agent --dump-config`` prints.
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from kvdev._records import compared
from kvdev.errors import UsageError
from kvdev.schema.tree import HINTS_PATH, ROOT

__all__ = [
    "DEFAULTS",
    "DEFAULT_CONFIG",
    "ENV_PREFIX",
    "HINTS_PATH",
    "AgentConfig",
    "Layered",
    "dropins",
    "from_toml",
    "layered",
    "merge",
]

DEFAULT_CONFIG = Path("/etc/kvdev/agent.toml")
ENV_PREFIX = "KVDEV_AGENT_"


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AgentConfig:
    """Everything the agent can be told."""

    metadata_root: Path = Path(ROOT)
    hints: Path | None = None  # default: <metadata-root>/kvdev/guest-hints.json
    config_drive: Path | None = None  # a mounted config drive's openstack/latest/meta_data.json
    socket: Path = Path("/run/kvdev/agent.sock")
    state_dir: Path = Path("/var/lib/kvdev")
    link_dir: Path = Path("/var/lib/kvdev/links")  # link wishes (kvdev-udev-marks reads these)
    config_root: Path = Path("/")  # where the guest's own network configuration is (etc/...)
    altnames: bool = True
    match_kinds: tuple[str, ...] = ()  # software link kinds (e.g. veth) offered to matching
    log_level: str = "info"
    poll_interval: float | None = None  # seconds between stat polls; None = auto, 0 = off
    read_deadline: float = 15.0  # seconds a pass waits for its read of the metadata (serving)
    once: bool = False
    dry_run: bool = False

    @property
    def hints_path(self) -> Path:
        """The hints file to read."""
        return self.hints if self.hints is not None else self.metadata_root / HINTS_PATH


DEFAULTS = AgentConfig()  # what --help shows and --dump-config calls "default"


PATH_KEYS = (  # the settings that are paths, in the order the flags are listed
    "metadata_root",
    "hints",
    "config_drive",
    "socket",
    "state_dir",
    "link_dir",
    "config_root",
)
_PATH_KEYS = set(PATH_KEYS)
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


def parse_read_deadline(value: object, where: str) -> float:
    """A number of seconds above 0, at most 3600 -> float."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        msg = f"{where} must be a number of seconds above 0, at most 3600"
        raise UsageError(msg)
    return float(value)


def from_toml(path: Path, *, required: bool) -> AgentConfig:
    """Load a config file; a missing file gives the defaults unless ``required``."""
    raw = _read_toml(path, required=required)
    return merge(AgentConfig(), raw or {}, source=str(path))


def _read_toml(path: Path, *, required: bool) -> dict[str, Any] | None:
    """A TOML file's keys; None when it is missing and not ``required``."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError as e:
        if required:
            raise UsageError(f"{path}: no such config file") from e
        return None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: {e}") from e


def file_key(name: str) -> str:
    """``metadata_root`` -> ``metadata-root``, as files, flags and --dump-config spell it."""
    return name.replace("_", "-")


KEYS = tuple(file_key(f.name) for f in fields(AgentConfig) if f.name in _FILE_KEYS)


Flags = Mapping[str, Any]  # AgentConfig field -> a flag's value, already converted
FLAGS = {"altnames": "--no-altnames", "match_kinds": "--match-kind"}  # not --<key>


def dump(layers: Layered) -> str:
    """``--dump-config``: TOML the agent reads back, each key's origin in a comment after it."""
    lines = ["# kvdev-agent: the effective configuration; after each key, where it came from"]
    for key in KEYS:
        value = getattr(layers.config, key.replace("-", "_"))
        origin = layers.origins[key]
        if value is None:
            unset = {
                "hints": f"<metadata-root>/{HINTS_PATH} = {layers.config.hints_path}",
                "config-drive": "none read",
                "poll-interval": "auto",
            }[key]
            if key == "poll-interval":
                lines.append(f'{key} = "auto"  # {origin}')
            else:
                lines.append(f"# {key} unset: {unset}  # {origin}")
            continue
        lines.append(f"{key} = {toml_value(value)}  # {origin}")
    return "\n".join(lines) + "\n"


def as_json(layers: Layered) -> dict[str, dict[str, object]]:
    """``--dump-config --json``: per key, its value (JSON) and its origin."""
    out: dict[str, dict[str, object]] = {}
    for key in KEYS:
        value = getattr(layers.config, key.replace("-", "_"))
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif value is None and key == "poll-interval":
            value = "auto"
        out[key] = {"value": value, "source": layers.origins[key]}
    return out


def toml_value(value: object) -> str:
    """A TOML literal: paths and strings quoted (JSON escapes are TOML's), lists, booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Layered:
    """The effective configuration and, per key (``metadata-root``), where it came from."""

    config: AgentConfig
    origins: dict[str, str]


def dropins(path: Path) -> list[Path]:
    """``PATH.d/*.toml`` in name order (none when the directory is missing)."""
    directory = path.with_name(path.name + ".d")
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == ".toml" and p.is_file())
    except FileNotFoundError:
        return []
    except OSError as e:
        raise UsageError(f"{directory}: {e.strerror or e}") from e


def _from_env(env: Mapping[str, str]) -> list[tuple[str, str, object]]:
    """(key, variable, value) of each ``KVDEV_AGENT_<KEY>`` set, converted for ``merge``."""
    out: list[tuple[str, str, object]] = []
    for key in KEYS:
        variable = ENV_PREFIX + key.replace("-", "_").upper()
        if variable not in env:
            continue
        text = env[variable]
        value: object = text
        if key == "altnames":
            words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            value = words.get(text.strip().lower(), text)
        elif key == "match-kinds":
            value = [k.strip() for k in text.split(",") if k.strip()]
        out.append((key, variable, value))
    return out


def layered(path: Path, *, required: bool, env: Mapping[str, str], flags: Flags) -> Layered:
    """Defaults < ``path`` < its drop-ins < the environment < ``flags`` (already converted)."""
    cfg = AgentConfig()
    origins = dict.fromkeys(KEYS, "default")
    files = [(path, _read_toml(path, required=required), "file")]
    files += [(d, _read_toml(d, required=True), "drop-in") for d in dropins(path)]
    for source, raw, kind in files:
        if raw is None:
            continue
        cfg = merge(cfg, raw, source=str(source))
        origins.update(
            dict.fromkeys(map(file_key, (k.replace("-", "_") for k in raw)), f"{kind} {source}")
        )
    for key, variable, value in _from_env(env):
        cfg = merge(cfg, {key: value}, source=f"environment {variable}")
        origins[key] = f"environment {variable}"
    for name, value in flags.items():
        cfg = replace(cfg, **{name: value})
        origins[file_key(name)] = f"command line {FLAGS.get(name, '--' + file_key(name))}"
    return Layered(cfg, origins)


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
        elif name == "read_deadline":
            changes[name] = parse_read_deadline(value, f"{source}: {key}")
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
