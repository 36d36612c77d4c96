"""docs/architecture.md stays true: every folder it names exists, every package is listed."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()
SOURCE = REPO / "agent" / "kvdev"


def folders_in_the_tree_block():
    block = DOC.split("## Folders", 1)[1].split("```", 2)[1]
    out, stack = [], []
    for line in block.splitlines()[1:]:
        m = re.match(r"^(\s*)(\S+/)\s", line + " ")
        if not m:
            continue
        depth = len(m.group(1)) // 2
        stack[depth:] = [m.group(2).rstrip("/")]
        out.append("/".join(stack))
    return out


def test_every_folder_the_doc_names_exists():
    named = folders_in_the_tree_block()
    assert "agent/kvdev/guest/core" in named
    for folder in named:
        assert (REPO / folder).is_dir(), folder


def test_every_package_is_named_in_the_doc():
    named = set(folders_in_the_tree_block())
    for init in sorted(SOURCE.rglob("__init__.py")):
        folder = init.parent.relative_to(REPO).as_posix()
        assert folder in named, f"{folder} is not in docs/architecture.md"


@pytest.mark.parametrize("path", re.findall(r"`((?:guest|host)/[\w/]+\.py)`", DOC))
def test_every_module_the_doc_points_to_exists(path):
    assert (SOURCE / path).is_file(), path
