"""The e2e tests' switches and report: the ``e2e`` marker, skipped unless KVDEV_E2E=1.

`make e2e` sets KVDEV_E2E=1 (CI runs it); a plain `pytest` skips these tests, because one run
boots a QEMU guest for minutes. When they run, nothing is skipped: a missing tool fails.
The measured times and, on failure, where the artifacts are and the tails of the guest's
journal and console are printed at the end of the run.
"""

import os

import pytest

E2E_ENABLED = os.environ.get("KVDEV_E2E") == "1"
SUMMARY_KEY = pytest.StashKey[list[str]]()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "e2e: boots a QEMU guest (minutes); runs only with KVDEV_E2E=1 (make e2e)"
    )
    config.stash[SUMMARY_KEY] = []


def pytest_collection_modifyitems(config, items):
    if E2E_ENABLED:
        return
    skip = pytest.mark.skip(reason="boots a VM: set KVDEV_E2E=1 or run `make e2e`")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def e2e_summary(request):
    """Lines printed after the run (timings, artifacts, failure tails)."""
    return request.config.stash[SUMMARY_KEY]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("kvdev e2e")
        for line in lines:
            terminalreporter.write_line(line)
