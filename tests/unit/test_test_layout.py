"""The suite's own layout: pytest (rootdir import mode) needs every test module's name unique.

Two ``test_x.py`` in different folders stop the whole run at collection ("import file
mismatch"), which a run of one folder never shows. It happened twice (the Helm chart's, the
plugin's RBAC tests): this check makes it a test failure naming both files.
"""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_name_of_its_own():
    seen = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
