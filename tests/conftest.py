"""Fixtures shared by every test directory."""

import os
import shutil
import subprocess
import uuid

import pytest
from hypothesis import settings

# CI replays the same examples every run (a red CI then means a change broke something);
# developers' runs explore new examples each time.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def netns():
    """A throwaway network namespace, named ``kvdev-t-<8 hex>``, deleted afterwards.

    Skips the test when ``ip netns add`` cannot work here (not root, no iproute2, no netns).
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespace tests need root and iproute2")
    name = f"kvdev-t-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"ip netns add failed: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def pytest_addoption(parser):
    parser.addoption(
        "--robustness-long",
        action="store_true",
        help="run the long robustness suites (also: KVDEV_ROBUST_LONG=1)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "robustness: abuse and fuzzing of the running agent (tests/robustness)"
    )


# Fixtures that hold one process-wide resource for the whole session: with pytest-xdist (make
# unit: --dist loadgroup) every test that uses one runs on the same worker, so it starts once.
_SESSION_GROUPS = {"cluster": "cluster", "kube": "cluster", "shipped": "cluster"}


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("xdist"):
        return  # the .deb's build tests and the compat legs run without it
    for item in items:
        names = getattr(item, "fixturenames", ())
        for group in sorted({_SESSION_GROUPS[n] for n in names if n in _SESSION_GROUPS}):
            item.add_marker(pytest.mark.xdist_group(group))
