"""procstats.agent: the agent's own usage, with psutil and (EL9's python3.11) without it."""

import json
import os
import subprocess
import sys

import pytest

from kvdev.guest.adapters import procstats


@pytest.mark.skipif(not procstats.HAVE_PSUTIL, reason="no psutil here (test-compat's el9 leg)")
def test_agent_figures_with_psutil():
    procstats._agent_cache = None
    figures = procstats.agent(started_at=0.0)
    assert figures["pid"] == os.getpid()
    assert figures["rssBytes"] > 0
    assert figures["threads"] >= 1
    assert figures["cpuSeconds"] >= 0
    assert figures["uptimeSeconds"] > 0


def test_agent_figures_without_psutil_are_the_pid_alone():
    # a fresh interpreter where "import psutil" fails, as on EL9's python3.11
    code = (
        "import sys, json; sys.modules['psutil'] = None\n"
        "from kvdev.guest.adapters import procstats\n"
        "print(json.dumps([procstats.HAVE_PSUTIL, procstats.agent(0.0)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    have, figures = json.loads(done.stdout)
    assert have is False
    assert set(figures) == {"pid", "uptimeSeconds"}
    assert figures["pid"] > 0


@pytest.mark.skipif(not procstats.HAVE_PSUTIL, reason="no psutil here (test-compat's el9 leg)")
def test_psutil_is_imported_when_the_figures_are_first_asked_for():
    code = (
        "import sys, json\n"
        "from kvdev.guest.api import routes\n"
        "from kvdev.guest.adapters import procstats\n"
        "before = 'psutil' in sys.modules\n"
        "figures = procstats.agent(0.0)\n"
        "print(json.dumps([before, 'psutil' in sys.modules, 'rssBytes' in figures]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == [False, True, True]
