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


DIAGRAM = (REPO / "docs" / "_diagrams" / "architecture.dot").read_text()


def _cluster(name: str) -> str:
    """The text of one half's subgraph in the architecture diagram."""
    start = DIAGRAM.index(f"subgraph cluster_{name}")
    depth = 0
    for i in range(DIAGRAM.index("{", start), len(DIAGRAM)):
        depth += {"{": 1, "}": -1}.get(DIAGRAM[i], 0)
        if depth == 0:
            return DIAGRAM[start : i + 1]
    raise AssertionError(f"cluster_{name} is not closed")


@pytest.mark.parametrize("half", ["guest", "host"])
def test_every_folder_of_each_half_is_drawn_in_that_half(half):
    """Each package folder of guest/ and host/ is named in its half of the diagram."""
    drawn = _cluster(half)
    folders = sorted(p.parent.name for p in (SOURCE / half).glob("*/__init__.py"))
    assert folders, half
    missing = [f for f in folders if not re.search(rf"\b{f}\b", drawn)]
    assert not missing, f"docs/_diagrams/architecture.dot's {half} half does not draw {missing}"


@pytest.mark.parametrize("half", ["guest", "host"])
def test_every_folder_of_each_half_is_in_the_data_flow_or_the_folder_list(half):
    """The page names each folder with its half's prefix (the folder tree or the flow)."""
    for init in sorted((SOURCE / half).glob("*/__init__.py")):
        name = init.parent.name
        assert re.search(rf"\b{name}/", DOC), f"docs/architecture.md never names {half}/{name}/"
