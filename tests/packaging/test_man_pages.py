"""The man pages are rendered from the docs' pages (make man): the committed ones are exactly
what those pages render today, every option of every --help is in its man page, each --help
names its man page, and both packages install every page they ship."""

import argparse
import re
import shutil
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


# ------------------------------------------------------------------ rendered as a reader sees it

SOURCES = {  # man page -> the docs page it is rendered from (docs/conf.py man_pages)
    "kvdev.1": "kvdev.md",
    "kvdev-agent.8": "kvdev-agent.md",
    "kvdev-host.1": "kvdev-host.md",
    "kvdev-agent.toml.5": "kvdev-agent.toml.md",
}
GROFF = shutil.which("groff")
ASCII = str.maketrans({"\u2010": "-", "\u2212": "-", "\u2019": "'", "\u2018": "'", "\u00a0": " "})


def rendered(page: str) -> list[str]:
    """The page as ``man`` shows it on an 80-column terminal, styles kept as overstrikes."""
    done = subprocess.run(
        [GROFF, "-man", "-Tutf8", "-rLL=80n", "-P-c", str(MAN / page)],
        capture_output=True,
        text=True,
        check=True,
        env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"},
    )
    return done.stdout.translate(ASCII).splitlines()


def units(line: str) -> list[tuple[str, bool]]:
    """Each character the reader sees, and whether it is bold or italic (overstruck)."""
    out, i = [], 0
    while i < len(line):
        j = i + 1
        while line[j : j + 1] == "\x08" and j + 1 < len(line):
            j += 2
        out.append((line[j - 1], j > i + 1))
        i = j
    return out


def plain(line: str) -> str:
    return "".join(c for c, _ in units(line))


def styled_runs_glued_to_words(line: str) -> list[str]:
    """Bold or italic text followed at once by a plain letter or digit: ``GET /healthz200``."""
    seen = units(line)
    return [
        "".join(c for c, _ in seen[max(0, k - 30) : k + 12])
        for k in range(len(seen) - 1)
        if seen[k][1] and not seen[k + 1][1] and seen[k + 1][0].isalnum()
    ]


def hide(char: str) -> str:
    """``char`` out of the markup's way (a private-use character), for ``source_terms``."""
    return chr(0xE000 + ord(char))


def source_terms(page: str) -> list[str]:
    """Each term of the page's definition lists, and each line a hard break ends, as text.

    A term is a MyST definition list's (``term`` then ``: description``); a line ending in two
    spaces after a blank line is one written as a hard break, which the man builder ran into
    its description. The markup is taken off (``**``, ``*``, ``_x_``, backticks, escapes).
    """
    lines = (REPO / "docs" / "reference" / "cli" / SOURCES[page]).read_text().splitlines()
    terms = []
    for i, line in enumerate(lines):
        after_blank = i == 0 or not lines[i - 1].strip()
        described = i + 1 < len(lines) and lines[i + 1].startswith(": ")
        hard = line.endswith("  ") and after_blank and not line.startswith("    ")
        if line.strip() and after_blank and (described or hard):
            text = re.sub(r"`([^`]*)`", lambda m: "".join(map(hide, m[1])), line.strip())
            text = re.sub(r"\\(.)", lambda m: hide(m[1]), text)
            text = text.replace("**", "").replace("*", "")
            text = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", "", text)
            terms.append(re.sub("[\ue000-\ue0ff]", lambda m: chr(ord(m[0]) - 0xE000), text))
    return terms


def tagged(lines: list[str], n: int, term: str) -> bool:
    """Line ``n`` holds ``term`` as ``.TP`` renders it: alone, the description indented below;
    or, a term shorter than the indent, then spaces and the description at the indent."""
    line, below = lines[n], lines[n + 1] if n + 1 < len(lines) else ""
    at = len(line) - len(line.lstrip())
    words = " ".join(line.split())
    if words == term:
        return len(below) - len(below.lstrip()) > at and bool(below.strip())
    rest = line[at + len(term) :]
    if not words.startswith(term + " ") or not rest.startswith(" "):
        return False
    column = at + len(term) + len(rest) - len(rest.lstrip())
    return not below.strip() or len(below) - len(below.lstrip()) == column


@pytest.mark.skipif(GROFF is None, reason="groff is not installed (apt: groff-base)")
@pytest.mark.parametrize("page", SOURCES)
def test_every_term_renders_on_its_own_line_with_its_description_indented(page):
    lines = [plain(line) for line in rendered(page)]
    terms = source_terms(page)
    assert terms or page == "kvdev-agent.toml.5"
    wrong = [term for term in terms if not any(tagged(lines, n, term) for n in range(len(lines)))]
    glued = [t for line in lines for term in wrong if (t := line.strip()).startswith(term)]
    assert wrong == [], f"{page}: a term runs into its description: {glued}"


@pytest.mark.skipif(GROFF is None, reason="groff is not installed (apt: groff-base)")
@pytest.mark.parametrize("page", SOURCES)
def test_no_bold_or_italic_text_runs_into_the_next_word(page):
    glued = [g for line in rendered(page) for g in styled_runs_glued_to_words(line)]
    assert glued == [], f"{page}: a bold or italic term runs into the plain text after it"
