"""packaging/versions.toml, read and checked, and the tables rendered from it.

The one statement of what kvdev supports: the README's table (``readme_table``), Chart.yaml's
``kubeVersion`` (``chart_kube_version``), the Compatibility page's version and gate matrix
(``versions_table``, ``gates_table``, ``distributions_table``), the Feature maturity page
(``maturity_table``) and the operator quickstart's table (``quickstart_table``) come from here,
as Markdown text. ``load`` refuses a file that does not hold together (a missing field, a stage
for a version that is not supported, a feature more mature than a gate it needs), naming the file
and the field.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "packaging" / "versions.toml"
MATURITY = ("alpha", "beta", "stable")
T = TypeVar("T")


class VersionsError(Exception):
    """packaging/versions.toml does not hold together; the message names the field."""


@dataclass(frozen=True)
class Platform:
    """Kubernetes or KubeVirt: the versions supported, those tested and how, those only read."""

    supported: tuple[str, ...]
    tested: str
    tested_how: str
    also_tested: tuple[str, ...] = ()  # tested too, beside ``tested`` (KubeVirt: its main)
    read_only: tuple[str, ...] = ()  # newer pre-releases read from their sources, not run
    read_how: str = ""

    @property
    def all_tested(self) -> str:
        """``v1.9.0 and main``: every version tested."""
        return " and ".join((self.tested, *self.also_tested))


@dataclass(frozen=True)
class Gate:
    """A feature gate: its stage per supported version (absent: not needed there)."""

    project: str
    name: str
    needed_for: str
    stages: dict[str, str]
    removed: str


@dataclass(frozen=True)
class Distribution:
    """A guest distribution row."""

    name: str
    package: str
    leg: str
    booted: bool


@dataclass(frozen=True)
class Feature:
    """One thing kvdev does, and how mature it is."""

    name: str
    maturity: str
    needs: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class Versions:
    """The whole file."""

    kubernetes: Platform
    kubevirt: Platform
    gates: tuple[Gate, ...]
    distributions: tuple[Distribution, ...]
    features: tuple[Feature, ...]


def _field(table: dict[str, Any], key: str, kind: type[T], where: str) -> T:
    value = table.get(key)
    if not isinstance(value, kind):
        raise VersionsError(f"{VERSIONS}: {where}.{key}: expected a {kind.__name__}, got {value!r}")
    return value


def _strings(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = _field(table, key, list, where)
    if not all(isinstance(v, str) and v for v in values):
        raise VersionsError(
            f"{VERSIONS}: {where}.{key}: expected non-empty strings, got {values!r}"
        )
    return tuple(values)


def _platform(data: dict[str, Any], key: str) -> Platform:
    table = _field(data, key, dict, "")
    read_only = _strings(table, "read_only", key) if "read_only" in table else ()
    if read_only and not table.get("read_how"):
        raise VersionsError(f"{VERSIONS}: {key}.read_how: say how {', '.join(read_only)} are read")
    return Platform(
        _strings(table, "supported", key),
        _field(table, "tested", str, key),
        _field(table, "tested_how", str, key),
        _strings(table, "also_tested", key) if "also_tested" in table else (),
        read_only,
        _field(table, "read_how", str, key) if read_only else "",
    )


def maturity_of(stage: str) -> str:
    """The maturity word a gate's stage starts with (``"beta, on"`` -> ``beta``)."""
    return stage.split(",", maxsplit=1)[0].split(" ", maxsplit=1)[0]


def _gate(table: dict[str, Any], where: str, platforms: dict[str, Platform]) -> Gate:
    project = _field(table, "project", str, where)
    platform = platforms.get(project)
    if platform is None:
        raise VersionsError(
            f"{VERSIONS}: {where}.project: one of {sorted(platforms)}, not {project!r}"
        )
    stages = _field(table, "stages", dict, where)
    if not stages:
        raise VersionsError(f"{VERSIONS}: {where}.stages: at least one version's stage")
    for version, stage in stages.items():
        if version not in platform.supported:
            raise VersionsError(
                f"{VERSIONS}: {where}.stages: {version} is not a supported {project} version"
            )
        if not isinstance(stage, str) or maturity_of(stage) not in MATURITY:
            raise VersionsError(
                f"{VERSIONS}: {where}.stages.{version}: starts with one of {MATURITY}: {stage!r}"
            )
    removed = table.get("removed", "")
    if not isinstance(removed, str) or removed in stages:
        raise VersionsError(
            f"{VERSIONS}: {where}.removed: a version without a stage, not {removed!r}"
        )
    name, needed_for = _field(table, "name", str, where), _field(table, "needed_for", str, where)
    return Gate(project, name, needed_for, dict(stages), removed)


def newest_stage(gate: Gate, platform: Platform) -> tuple[str, str]:
    """The newest supported version the gate has a stage for, and that stage."""
    version = next(v for v in reversed(platform.supported) if v in gate.stages)
    return version, gate.stages[version]


def _feature(
    table: dict[str, Any], where: str, gates: dict[str, Gate], platforms: dict[str, Platform]
) -> Feature:
    maturity = _field(table, "maturity", str, where)
    if maturity not in MATURITY:
        raise VersionsError(f"{VERSIONS}: {where}.maturity: one of {MATURITY}, not {maturity!r}")
    needs = _strings(table, "needs", where) if table.get("needs") else ()
    for need in needs:
        gate = gates.get(need)
        if gate is None:
            raise VersionsError(f"{VERSIONS}: {where}.needs: no gate named {need!r}")
        version, stage = newest_stage(gate, platforms[gate.project])
        if MATURITY.index(maturity) > MATURITY.index(maturity_of(stage)):
            raise VersionsError(
                f"{VERSIONS}: {where}.maturity: {maturity} is more than {need}'s"
                f" {maturity_of(stage)} ({version})"
            )
    return Feature(
        _field(table, "name", str, where), maturity, needs, _field(table, "where", str, where)
    )


def parse(data: dict[str, Any]) -> Versions:
    """The file's values, checked; a ``VersionsError`` names the first field that is wrong."""
    kubernetes, kubevirt = _platform(data, "kubernetes"), _platform(data, "kubevirt")
    if kubernetes.tested.removeprefix("v").rsplit(".", 1)[0] not in kubernetes.supported:
        raise VersionsError(f"{VERSIONS}: kubernetes.tested: {kubernetes.tested} is not supported")
    platforms = {"Kubernetes": kubernetes, "KubeVirt": kubevirt}
    gates = tuple(
        _gate(t, f"gates[{i}]", platforms) for i, t in enumerate(_field(data, "gates", list, ""))
    )
    distributions = tuple(
        Distribution(
            _field(t, "name", str, f"distributions[{i}]"),
            _field(t, "package", str, f"distributions[{i}]"),
            _field(t, "leg", str, f"distributions[{i}]"),
            _field(t, "booted", bool, f"distributions[{i}]"),
        )
        for i, t in enumerate(_field(data, "distributions", list, ""))
    )
    by_name = {g.name: g for g in gates}
    features = tuple(
        _feature(t, f"features[{i}]", by_name, platforms)
        for i, t in enumerate(_field(data, "features", list, ""))
    )
    return Versions(kubernetes, kubevirt, gates, distributions, features)


def load(path: Path = VERSIONS) -> Versions:
    """Read and check the file."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise VersionsError(f"{path}: {e}") from e
    return parse(data)


def chart_kube_version(v: Versions) -> str:
    """Chart.yaml's kubeVersion: the oldest supported minor and later (pre-releases included)."""
    return f">={v.kubernetes.supported[0]}.0-0"


def _span(versions: tuple[str, ...]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]} to {versions[-1]}"


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _short(name: str) -> str:
    return re.sub(r" \(.*?\)| LTS", "", name)


def readme_table(v: Versions) -> str:
    """The README's "Supported versions" table (tests/packaging/test_versions.py checks it)."""
    k, kv = v.kubernetes, v.kubevirt
    booted = [_short(d.name) for d in v.distributions if d.booted]
    legs = [_short(d.name) for d in v.distributions if d.leg]
    return _table(
        ("component", "supported", "tested", "read, not tested"),
        [
            ("Kubernetes", _span(k.supported), k.all_tested, ", ".join(k.read_only) or "-"),
            (
                "KubeVirt",
                " and ".join(kv.supported),
                f"{kv.all_tested} (its own code judges kvdev's VMIs; not run as a cluster)",
                ", ".join(kv.read_only) or "-",
            ),
            (
                "guest",
                ", ".join(_short(d.name) for d in v.distributions),
                f"{', '.join(booted)} booted; the libraries of {len(legs)} of them",
                "-",
            ),
        ],
    )


def versions_table(v: Versions) -> str:
    """Supported and tested versions, and how they are tested."""
    rows: list[tuple[str, ...]] = [
        (name, ", ".join(p.supported), p.all_tested, p.tested_how)
        for name, p in (("Kubernetes", v.kubernetes), ("KubeVirt", v.kubevirt))
    ]
    rows += [
        (name, "no: read only", ", ".join(p.read_only), p.read_how)
        for name, p in (("Kubernetes", v.kubernetes), ("KubeVirt", v.kubevirt))
        if p.read_only
    ]
    return _table(("component", "supported", "tested", "tested how"), rows)


def gates_table(v: Versions, project: str) -> str:
    """One project's gates: a row each, a column per supported version, what each is for."""
    platform = v.kubernetes if project == "Kubernetes" else v.kubevirt
    rows = []
    for gate in (g for g in v.gates if g.project == project):
        cells = [gate.stages.get(version, "not needed") for version in platform.supported]
        note = gate.needed_for + (
            f"; removed in {gate.removed}: do not set it there" if gate.removed else ""
        )
        rows.append((f"`{gate.name}`", *cells, note))
    return _table(("gate", *platform.supported, "needed for"), rows)


def distributions_table(v: Versions) -> str:
    """The guest rows: package, compat leg, booted or not."""
    return _table(
        ("guest", "package", "tested how"),
        [
            (
                d.name,
                d.package,
                "; ".join(
                    s
                    for s in (
                        "booted in QEMU (`make e2e`)" if d.booted else "",
                        f"compat leg `{d.leg}`" if d.leg else "not tested",
                    )
                    if s
                ),
            )
            for d in v.distributions
        ],
    )


def maturity_table(v: Versions) -> str:
    """Each feature, its maturity, the gates it needs and where it lives."""
    return _table(
        ("feature", "maturity", "needs", "where"),
        [
            (
                f.name,
                f.maturity,
                ", ".join(f"`{n}`" for n in f.needs) or "nothing upstream",
                f.where,
            )
            for f in v.features
        ],
    )


def quickstart_table(v: Versions) -> str:
    """The operator quickstart's first step: the versions, and the gates to check on each."""
    k, kv = v.kubernetes, v.kubevirt

    def gates(project: str, platform: Platform) -> str:
        """On by default everywhere: named once; off somewhere: each version's stage."""
        own = [g for g in v.gates if g.project == project]
        on = [f"`{g.name}`" for g in own if not any("off" in s for s in g.stages.values())]
        off = [
            f"`{g.name}` ("
            + "; ".join(f"{m}: {g.stages[m]}" for m in platform.supported if m in g.stages)
            + ")"
            for g in own
            if any("off" in s for s in g.stages.values())
        ]
        return "; ".join(
            part
            for part in (f"on by default: {', '.join(on)}" if on else "", ", ".join(off))
            if part
        )

    return _table(
        ("component", "needs"),
        [
            (
                "Kubernetes",
                f"{_span(k.supported)} (tested: {k.all_tested}); gates {gates('Kubernetes', k)}",
            ),
            ("KubeVirt", f"{' or '.join(kv.supported)}; gates {gates('KubeVirt', kv)}"),
            (
                "DRA drivers",
                (
                    "any: kvdev reads the claims and slices;"
                    " a driver's own KEP-5304 file wins where it writes one"
                ),
            ),
        ],
    )
