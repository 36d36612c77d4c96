"""The docs site's checks hold: a broken internal link or anchor fails the build (and only what
was broken is reported), the generated Helm values reference lists every value of the chart
and refuses one its schema lacks, and the operator quickstart and the Helm guide recommend one
install, from the packaged chart, with any helm."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs" / "_ext"))
import kvdev_sphinx  # noqa: E402

CHART = REPO / "packaging" / "helm" / "kvdev"


def test_a_broken_link_or_anchor_fails_the_build_and_is_named(tmp_path):
    # a copy of docs/ beside the sources it renders (the parsers, agent.toml, the chart)
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    for name in ("agent", "debian", "packaging"):
        (tmp_path / name).symlink_to(REPO / name)
    page = tmp_path / "docs" / "troubleshooting.md"
    page.write_text(
        page.read_text()
        + "\nSee [a page that is not there](guides/no-such-page.md) and"
        + " [a heading that is not there](guides/wire-a-vmi.md#no-such-heading).\n"
    )
    sphinx = [sys.executable, "-m", "sphinx", "-q", "-E", "-W", "--keep-going", "-n", "-b", "dummy"]
    done = subprocess.run(
        [*sphinx, str(tmp_path / "docs"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, done.stderr
    assert any("no-such-page" in w for w in warnings)
    assert any("no-such-heading" in w for w in warnings)
    assert all("troubleshooting.md" in w for w in warnings)


def test_the_helm_values_reference_lists_every_value():
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    schema = json.loads((CHART / "values.schema.json").read_text())
    rows = kvdev_sphinx.helm_values(values, schema, kvdev_sphinx._yaml_comments(text))
    keys = [key for key, _, _, _ in rows]
    assert len(keys) == len(set(keys)) > 40
    assert "plugin.drivers" in keys
    defaults = {key: default for key, _, default, _ in rows}
    comments = {key: comment for key, _, _, comment in rows}
    assert defaults["controller.port"] == "8080"
    assert comments["controller.port"] == ("HTTP: /metrics, /healthz, /readyz, /leader")
    values["controller"]["portt"] = 8080
    with pytest.raises(kvdev_sphinx.SourceMismatchError, match=r"lacks controller\.portt"):
        kvdev_sphinx.helm_values(values, schema, {})


def _helm_install(page: Path) -> str:
    """The page's `helm install` command, its continuation lines joined."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("helm install "))
    command = []
    for line in lines[start:]:
        command.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return " ".join(command)


def test_the_quickstart_and_the_helm_guide_recommend_one_install_with_any_helm():
    docs = REPO / "docs"
    quickstart = _helm_install(docs / "quickstart" / "operator.md")
    assert quickstart == _helm_install(docs / "guides" / "install-helm.md")
    # the packaged chart that make dist or a release gives, not the clone's chart directory
    assert " dist/kvdev-" in quickstart
    for page in [
        REPO / "README.md",
        *(docs / "quickstart").glob("*.md"),
        *(docs / "guides").glob("*.md"),
    ]:
        assert "make helm" not in page.read_text(), page
