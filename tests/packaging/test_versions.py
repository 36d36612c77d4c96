"""packaging/versions.toml is the one statement of what kvdev supports: the README's table and
Chart.yaml's kubeVersion equal what is rendered from it, the pages that state versions name only
versions it knows, and a file that does not hold together is refused, naming the field."""

import copy
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs" / "_ext"))
import kvdev_versions  # noqa: E402

from kvdev import __version__  # noqa: E402

CHART = REPO / "packaging" / "helm" / "kvdev"
# every page or file that says which Kubernetes or KubeVirt versions kvdev works with
STATING = (
    "README.md",
    "docs/quickstart/operator.md",
    "docs/guides/wire-a-vmi.md",
    "docs/guides/install-helm.md",
    "docs/reference/compatibility.md",
    "docs/reference/maturity.md",
    "packaging/helm/kvdev/Chart.yaml",
    "packaging/helm/kvdev/values.yaml",
)


@pytest.fixture(scope="module")
def versions():
    return kvdev_versions.load()


def test_the_readme_table_is_the_one_rendered_from_the_file(versions):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Supported versions\n\n", 1)[1]
    assert section.startswith(kvdev_versions.readme_table(versions)), (
        "README.md's Supported versions table differs from packaging/versions.toml's:\n"
        + kvdev_versions.readme_table(versions)
    )


def test_the_charts_kube_version_and_version_are_the_files_and_kvdevs(versions):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == kvdev_versions.chart_kube_version(versions) == ">=1.34.0-0"
    assert chart["version"] == chart["appVersion"] == __version__


def test_the_wiring_policy_starts_where_its_gate_is_stable(versions):
    (gate,) = [g for g in versions.gates if g.name == "MutatingAdmissionPolicy"]
    first = next(
        m
        for m in versions.kubernetes.supported
        if kvdev_versions.maturity_of(gate.stages[m]) == "stable"
    )
    template = (CHART / "templates" / "vmi-wiring.yaml").read_text()
    assert f'semverCompare ">={first}-0"' in template
    older = [m for m in versions.kubernetes.supported if m < first]
    page = (REPO / "docs" / "guides" / "wire-a-vmi.md").read_text()
    assert older
    assert f"Kubernetes older than {first}" in page


def test_pages_name_only_versions_the_file_knows(versions):
    known = set(versions.kubernetes.supported) | {versions.kubernetes.tested.removeprefix("v")}
    known |= {g.removed for g in versions.gates if g.removed}
    # facts about when an upstream feature arrived, which a page may cite
    known |= {"1.32"}
    kubevirt = {r for r in versions.kubevirt.supported if r != "main"} | {versions.kubevirt.tested}
    wrong = []
    for name in STATING:
        text = (REPO / name).read_text()
        wrong += [
            f"{name}: Kubernetes {m.group(0)}"
            for m in re.finditer(r"(?<![\d.\w])v?(1\.3\d)(\.\d+)?(?![\d])", text)
            if m.group(1) not in known and m.group(0).removeprefix("v") not in known
        ]
        wrong += [
            f"{name}: KubeVirt {m.group(1)}"
            for m in re.finditer(r"KubeVirt (?:<= )?(v1\.\d+(?:\.\d+)?)", text)
            if m.group(1) not in kubevirt
        ]
    assert not wrong, "versions packaging/versions.toml does not know:\n" + "\n".join(wrong)


def test_no_page_claims_an_unreleased_kubevirt():
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        assert "v1.10" not in path.read_text(), path


def test_the_distributions_are_the_distributions_pages_rows_and_their_legs_exist(versions):
    page = (REPO / "docs" / "reference" / "distributions.md").read_text()
    table = page.split("## The rows", 1)[1]
    rows = re.findall(r"^\| ([^|-][^|]*?) \| \d", table, re.MULTILINE)
    assert rows == [d.name for d in versions.distributions]
    for d in versions.distributions:
        if d.leg:
            assert (REPO / "tests" / "packaging" / "compat" / f"{d.leg}.txt").is_file(), d.leg


def _data():
    return tomllib.loads(kvdev_versions.VERSIONS.read_text())


def test_a_feature_more_mature_than_a_gate_it_needs_is_refused():
    data = copy.deepcopy(_data())
    i = next(i for i, f in enumerate(data["features"]) if "NetworkDevicesWithDRA" in f["needs"])
    data["features"][i]["maturity"] = "stable"
    with pytest.raises(kvdev_versions.VersionsError, match=rf"features\[{i}\]\.maturity: stable"):
        kvdev_versions.parse(data)


def test_a_gate_stage_for_an_unsupported_version_is_refused():
    data = copy.deepcopy(_data())
    data["gates"][0]["stages"]["1.33"] = "beta, on"
    with pytest.raises(kvdev_versions.VersionsError, match=r"gates\[0\]\.stages: 1\.33 is not"):
        kvdev_versions.parse(data)


def test_a_missing_field_is_named_with_the_file():
    data = copy.deepcopy(_data())
    del data["kubernetes"]["tested"]
    with pytest.raises(kvdev_versions.VersionsError, match=r"versions\.toml: kubernetes\.tested"):
        kvdev_versions.parse(data)


def test_what_is_tested_and_what_is_only_read_is_said(versions):
    """Tested: Kubernetes v1.37.2, KubeVirt v1.9.0 and main; only read: the 1.38 alphas."""
    assert versions.kubernetes.all_tested == "v1.37.2"
    assert versions.kubevirt.all_tested == "v1.9.0 and main"
    assert versions.kubernetes.read_only == ("1.38 alphas",)
    assert "1.38" not in versions.kubernetes.supported
    row = next(
        line for line in kvdev_versions.readme_table(versions).splitlines() if "Kubernetes" in line
    )
    assert row == "| Kubernetes | 1.34 to 1.37 | v1.37.2 | 1.38 alphas |"
    compat = kvdev_versions.versions_table(versions)
    assert "| Kubernetes | no: read only | 1.38 alphas |" in compat


def test_no_file_sets_the_dynamic_resource_allocation_gate():
    """The gate is gone in 1.38: nothing of kvdev's (chart, tests, docs) sets it."""
    setting = re.compile(r"DynamicResourceAllocation\s*[=:]\s*\"?(true|false)")
    roots = ["packaging", "tests", "docs", ".ci", "README.md", "Makefile"]
    found = [
        str(path)
        for root in roots
        for path in ([REPO / root] if (REPO / root).is_file() else (REPO / root).rglob("*"))
        if path.is_file()
        and path.suffix in {".py", ".yaml", ".yml", ".md", ".sh", ".toml", ".json", ""}
        and setting.search(path.read_text(errors="replace"))
    ]
    assert not found, found
