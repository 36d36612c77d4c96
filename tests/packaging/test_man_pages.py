"""The man pages are rendered from the docs' pages (make man): the committed ones are exactly
what those pages render today, every option of every --help is in its man page, each --help
names its man page, and both packages install every page they ship."""

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvdev.guest import __main__ as agent
from kvdev.guest.adapters import config
from kvdev.guest.cli import main as cli
from kvdev.host import cli as host

REPO = Path(__file__).resolve().parents[2]
MAN = REPO / "packaging" / "man"
PROGRAMS = {  # program -> (its parser, its man page, what its --help ends with)
    "kvdev": (cli.build_parser, "kvdev.1", "The manual: kvdev(1) (man kvdev)."),
    "kvdev-agent": (
        agent.build_parser,
        "kvdev-agent.8",
        "The manual: kvdev-agent(8), kvdev-agent.toml(5) (man kvdev-agent).",
    ),
    "kvdev-host": (
        host.build_parser,
        "kvdev-host.1",
        "The manual: kvdev-host(1) (man kvdev-host).",
    ),
}


def parsers(parser: argparse.ArgumentParser):
    """The parser and every subcommand's, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def roff_text(name: str) -> str:
    """The page's words as a reader sees them: roff's escaped dashes as dashes."""
    return (MAN / name).read_text().replace("\\-", "-").replace("\\(aq", "'")


def test_the_committed_man_pages_are_what_the_docs_render(tmp_path):
    sphinx = [sys.executable, "-m", "sphinx", "-q", "-E", "-W", "--keep-going", "-n", "-b", "man"]
    done = subprocess.run(
        [*sphinx, "-d", str(tmp_path / "doctrees"), str(REPO / "docs"), str(tmp_path / "man")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rendered = {p.name: p.read_text() for p in (tmp_path / "man").iterdir()}
    committed = {p.name: p.read_text() for p in MAN.iterdir()}
    assert sorted(rendered) == sorted(committed)
    stale = [name for name in rendered if rendered[name] != committed[name]]
    assert stale == [], f"{stale}: out of date with docs/, run make man"


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_option_of_every_help_is_in_the_man_page(program):
    build, page, _ = PROGRAMS[program]
    text = roff_text(page)
    missing = sorted(
        {
            f"{p.prog} {option}"
            for p in parsers(build())
            for action in p._actions
            if action.help != argparse.SUPPRESS
            for option in action.option_strings
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)
        }
    )
    assert missing == []
    commands = [p.prog for p in parsers(build())]
    assert len(commands) > 1 or program == "kvdev-agent"
    assert [c for c in commands if c not in text] == []


@pytest.mark.parametrize("program", PROGRAMS)
def test_each_help_ends_by_naming_its_man_page(program):
    build, _, ending = PROGRAMS[program]
    for parser in parsers(build()):
        assert parser.format_help().rstrip().endswith(ending), parser.prog


def test_every_config_key_is_in_kvdev_agent_toml_5():
    text = roff_text("kvdev-agent.toml.5")
    keys = {name.replace("_", "-") for name in config._FILE_KEYS}
    assert len(keys) > 10
    listed = set(re.findall(r"^\.B \\fB([a-z-]+) = ", text, re.MULTILINE))  # one entry a key
    assert listed == keys
    # and the file the package installs parses, every key commented out at its default
    shipped = (REPO / "packaging" / "etc" / "agent.toml").read_text()
    defaults = tomllib.loads(
        "\n".join(
            line.removeprefix("#")
            for line in shipped.splitlines()
            if re.match(r"#[a-z-]+ = ", line)
        )
    )
    assert sorted(defaults) == sorted(keys)


def test_both_packages_install_every_guest_man_page():
    guest = sorted(p.name for p in MAN.iterdir() if p.name != "kvdev-host.1")
    deb = (REPO / "debian" / "kvdev.manpages").read_text().split()
    assert sorted(Path(p).name for p in deb) == guest
    spec = (REPO / "rpm" / "kvdev.spec").read_text()
    for name in guest:
        section = name.rsplit(".", 1)[1]
        assert f"packaging/man/{name} %{{buildroot}}%{{_mandir}}/man{section}/{name}\n" in spec
        assert f"%{{_mandir}}/man{section}/{name}*\n" in spec
    # the docs the packages carry: a short README and the changelog, never the docs site
    assert (REPO / "debian" / "kvdev.docs").read_text().split() == ["README.md"]
    assert "dh_installchangelogs CHANGELOG.md" in (REPO / "debian" / "rules").read_text()
    assert re.findall(r"^%doc (.*)$", spec, re.MULTILINE) == ["README.md CHANGELOG.md"]
    assert len((REPO / "README.md").read_text().splitlines()) <= 150


def test_no_line_is_too_long_for_lintian():
    # lintian (very-long-line-length-in-source-file) refuses source lines over 512 characters;
    # prose wraps at 100 in the pages, and the pages' line breaks carry into the man pages
    pages = [*MAN.iterdir(), *(REPO / "docs" / "reference" / "cli").glob("*.md")]
    long = [
        f"{p.name}:{n}"
        for p in pages
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if len(line) > 512
    ]
    assert long == []
