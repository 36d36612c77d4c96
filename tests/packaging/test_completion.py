"""Shell completion: bash completes each program's commands and options for real, and every
option the parsers know is in the bash, zsh and fish files (so they stay true).

bash runs the shipped file with COMP_WORDS set as readline would; zsh and fish are only
checked for their words (and parsed by ``fish --no-execute`` when fish is installed).
"""

import argparse
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kvdev.guest.__main__ import build_parser as agent_parser
from kvdev.guest.cli.main import build_parser as kvdev_parser
from kvdev.host.cli import build_parser

COMPLETION = Path(__file__).resolve().parents[2] / "packaging/completion"


def complete(program, *words):
    """What the shipped bash completion offers for ``program words...`` (the last is typed)."""
    script = f"""
source {COMPLETION}/{program}.bash
COMP_WORDS=({program} {" ".join(repr(w) for w in words)})
COMP_CWORD={len(words)}
$(complete -p {program} | sed -E 's/.*-F ([^ ]+) .*/\\1/')
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_bash_completes_kvdev_host_commands_and_options():
    assert complete("kvdev-host", "sch") == ["schedule"]
    assert complete("kvdev-host", "schedule", "--pro") == ["--progress"]
    assert complete("kvdev-host", "allocate", "-o", "") == ["yaml", "json", "name"]
    assert complete("kvdev-host", "bundle", "-o", "") == ["text", "json"]


def test_bash_completes_kvdev_agent_options():
    assert complete("kvdev-agent", "--dry") == ["--dry-run"]
    assert complete("kvdev-agent", "--log-level", "w") == ["warning"]


def test_bash_completes_kvdev_outputs():
    assert complete("kvdev", "devices", "-o", "") == ["json", "yaml", "wide", "name"]


def options(parser):
    out = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= options(sub)
    return out


@pytest.mark.parametrize(
    ("program", "parser", "files"),
    [
        ("kvdev-host", build_parser, ["kvdev-host.bash", "_kvdev-host", "kvdev-host.fish"]),
        ("kvdev-agent", agent_parser, ["kvdev-agent.bash", "_kvdev-agent", "kvdev-agent.fish"]),
        ("kvdev", kvdev_parser, ["kvdev.bash", "_kvdev", "kvdev.fish"]),
    ],
)
def test_every_option_is_in_every_completion_file(program, parser, files):
    for name in files:
        text = (COMPLETION / name).read_text().replace(" -l ", " --")  # fish: -l NAME
        words = set(re.findall(r"--[a-z][a-z0-9-]*", text))
        missing = options(parser()) - words - {"--version", "--help"}
        assert not missing, f"{name} lacks {sorted(missing)}"


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize("name", ["kvdev.fish", "kvdev-host.fish", "kvdev-agent.fish"])
def test_fish_files_parse(name):
    subprocess.run(["fish", "--no-execute", str(COMPLETION / name)], check=True)


def test_bash_completes_kvdev_collect():
    assert complete("kvdev", "col") == ["collect"]
    assert complete("kvdev", "collect", "--with") == ["--with-metadata"]
