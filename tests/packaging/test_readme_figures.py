"""The README and the docs pages: the README stays short and names its two commands, every figure
says when it was measured, the stale figures are gone, and no page speaks of the tracker's
issues or of working sessions (readers never see either). The user pages (all but Development
and the architecture map) show a command's output under it, never as a trailing comment, and
keep the lab and its history out: those figures live in Development's Benchmarks."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
PAGES = {
    p.relative_to(REPO).as_posix(): p.read_text()
    for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
}
DATE = re.compile(r"20\d\d-\d\d-\d\d")


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_the_readme_is_short_and_starts_with_the_two_commands():
    assert len(README.splitlines()) <= 150
    first = README.split("```sh", 1)[1].split("```", 1)[0]
    assert "make demo" in first
    assert "make test" in first


def test_every_measured_paragraph_names_when():
    undated = [
        f"{name}: {p.splitlines()[0][:80]}"
        for name, text in PAGES.items()
        for p in paragraphs(text)
        if re.search(r"(^|[^a-z])Measured\b", p) and not DATE.search(p)
    ]
    assert undated == []


def test_the_stale_figures_are_gone():
    for text in PAGES.values():
        assert "about 5 minutes on 2 busy cores" not in text
        assert "684 passed" not in text
        assert "with its 684 tests 27\u201368 s" not in text


def test_no_page_speaks_of_issues_or_sessions():
    said = [
        f"{name}:{n}: {line.strip()[:80]}"
        for name, text in PAGES.items()
        for n, line in enumerate(text.splitlines(), 1)
        if re.search(r"\b[Ii]ssues? \d|\bprobe I+\b|\bthis session\b|other sessions\b", line)
    ]
    assert said == []


def test_every_relative_link_resolves():
    broken = []
    for name, text in PAGES.items():
        base = (REPO / name).parent
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (base / target).exists():
                broken.append(f"{name}: {target}")
    assert broken == []


DEVELOPER = ("docs/development/", "docs/architecture.md")
USER_PAGES = {name: text for name, text in PAGES.items() if not name.startswith(DEVELOPER)}
WALKED = ("docs/quickstart/", "docs/guides/", "docs/troubleshooting.md", "docs/getting-help.md")
SHELL = {"", "sh", "bash", "shell", "console"}
# Package and chart installs are one block of alternatives, each line saying what it is for:
# the install instructions' own form.
INSTALLS = re.compile(r"\b(apt-get|apt|dnf|pip|helm) install\b")


def shell_blocks(text: str):
    """(line number, lines) of each fenced block in a shell language."""
    for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        if m[1].strip() in SHELL:
            yield text.count("\n", 0, m.start()) + 2, m[2].splitlines()


def test_a_command_shows_its_output_below_never_as_a_trailing_comment():
    trailing = [
        f"{name}:{first + i}: {line.strip()[:80]}"
        for name, text in PAGES.items()
        if name.startswith(WALKED)
        for first, lines in shell_blocks(text)
        if not any(INSTALLS.search(line) for line in lines)
        for i, line in enumerate(lines)
        if not line.lstrip().startswith("#") and re.search(r"\S\s+#\s", line)
    ]
    assert trailing == []


INTERNAL = re.compile(
    r"\b(2|two)-core\b|\bengineers\b|\brework\b|\bclass [A-Z]-[A-Z]\b|\be2e caught\b"
    r"|\bnot looked up\b|\b(this|the dev|a busy|the busy|the shared) machine\b"
    r"|\b(Measured|recorded) 20\d\d-\d\d-\d\d"
)


def test_user_pages_keep_the_lab_and_its_history_out():
    said = [
        f"{name}:{n}: {line.strip()[:80]}"
        for name, text in USER_PAGES.items()
        for n, line in enumerate(text.splitlines(), 1)
        if INTERNAL.search(line)
    ]
    assert said == []
