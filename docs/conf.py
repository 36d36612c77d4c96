"""Sphinx configuration of kvdev's docs site and of its man pages (one source for both).

``make docs`` builds the HTML with warnings as errors (-W --keep-going -n), so a broken
internal link, a missing page or a reference the CLI parsers no longer back fails the build;
``make man`` writes packaging/man/ from the same pages. Nothing here reaches the network.
"""

from __future__ import annotations

import email.utils
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path[:0] = [str(REPO / "agent"), str(DOCS / "_ext")]
# The parsers' usage lines and defaults must not depend on who builds: argparse wraps at the
# terminal's width (the directive fixes it) and the kvdev socket's default reads the environment.
os.environ.pop("KVDEV_SOCKET", None)

from kvdev import __version__  # noqa: E402 - after sys.path names the source tree

project = "kvdev"
author = "kvdev developers"
copyright = "kvdev developers, under the Apache License 2.0"  # noqa: A001 - Sphinx's name for it
version = release = __version__


def _release_date() -> str:
    """The date of the newest entry of debian/changelog: the pages' date, stable per release."""
    text = (REPO / "debian" / "changelog").read_text()
    match = re.search(r"^ -- .*>  (.+)$", text, re.MULTILINE)
    assert match is not None, "debian/changelog: no trailer line"
    return email.utils.parsedate_to_datetime(match[1]).date().isoformat()


today = _release_date()

extensions = ["myst_parser", "sphinx.ext.graphviz", "kvdev_sphinx"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_diagrams", "_ext"]
nitpicky = True
# Option names and code-like prose stay as written (no -- to an en dash, no curly quotes).
smartquotes = False
# MyST checks every [text](page.md#anchor) link against the pages and their headings.
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]
suppress_warnings: list[str] = []

html_theme = "alabaster"
html_title = f"kvdev {release}"
html_theme_options = {
    "description": "DRA devices for KubeVirt guests",
    "fixed_sidebar": True,
    "page_width": "1180px",  # the reference tables need the room
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_static_path: list[str] = []
html_last_updated_fmt = None
graphviz_output_format = "svg"

# (source page, name, description, authors, section): the man pages packaging/man/ holds.
man_pages: list[tuple[str, str, str, list[str], int]] = [
    ("reference/cli/kvdev", "kvdev", "ask the kvdev agent about this VM's DRA devices", [], 1),
    (
        "reference/cli/kvdev-agent",
        "kvdev-agent",
        "configure the network interfaces Kubernetes DRA gave this VM",
        [],
        8,
    ),
    (
        "reference/cli/kvdev-host",
        "kvdev-host",
        "allocate, publish and bundle DRA devices for KubeVirt guests",
        [],
        1,
    ),
    (
        "reference/cli/kvdev-agent.toml",
        "kvdev-agent.toml",
        "kvdev-agent's configuration file",
        [],
        5,
    ),
]
man_show_urls = False
man_make_section_directory = False
