"""Sphinx directives that render kvdev's own sources into the docs site and the man pages.

It owns four directives, each reading one source of truth at build time, so the HTML, the man
pages and ``--help`` never drift apart:

* ``kvdev-cli module:function``: an argparse parser (the function builds it) as its usage,
  option groups, epilog and one section per subcommand; ``:synopsis:`` renders only the usage
  lines. Help texts are plain text, never parsed as markup (they are written for ``--help``).
* ``kvdev-agent-toml``: ``packaging/etc/agent.toml``'s commented keys (the file the package
  installs) as the configuration file's reference, checked against the keys the agent accepts.
* ``kvdev-helm-values``: the chart's ``values.schema.json`` with the defaults and comments of
  ``values.yaml``, as one table of every value.
* ``kvdev-versions TABLE``: one table of ``packaging/versions.toml`` (``kvdev_versions``):
  ``versions``, ``kubernetes-gates``, ``kubevirt-gates``, ``distributions``, ``maturity``,
  ``quickstart``.

A source that does not match what it documents (an undocumented key, a value the schema lacks)
is a build error, which ``make docs`` (warnings as errors) turns into a failed build.

For the man pages it also keeps a Markdown hard line break (a line ending in two spaces, as in a
multi-line synopsis) a line break (``.br``): MyST gives it only to HTML and LaTeX, so the man
builder ran the two lines together. A term with its description is a MyST definition list
(``.TP``), never a hard break.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import kvdev_versions
import yaml
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

REPO = Path(__file__).resolve().parents[2]
AGENT_TOML = REPO / "packaging" / "etc" / "agent.toml"
CHART = REPO / "packaging" / "helm" / "kvdev"
WIDTH = 88  # the usage lines are wrapped as argparse wraps them on an 88-column terminal


class SourceMismatchError(Exception):
    """A documented source disagrees with the code it documents."""


# ------------------------------------------------------------------ argparse


def _fixed_width(parser: argparse.ArgumentParser) -> None:
    """Wrap this parser's and its subparsers' usage at WIDTH, whatever the terminal."""
    formatter = parser.formatter_class
    if not isinstance(formatter, functools.partial):
        parser.formatter_class = functools.partial(formatter, width=WIDTH)  # type: ignore[call-arg]
    for sub in _subparsers(parser):
        _fixed_width(sub[1])


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of each subcommand, in ``--help`` order."""
    out: list[tuple[str, argparse.ArgumentParser, str]] = []
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            helps = {a.dest: a.help or "" for a in action._choices_actions}  # noqa: SLF001
            out.extend((name, sub, helps.get(name, "")) for name, sub in action.choices.items())
    return out


def _is_raw(parser: argparse.ArgumentParser) -> bool:
    formatter = parser.formatter_class
    cls = formatter.func if isinstance(formatter, functools.partial) else formatter
    return isinstance(cls, type) and issubclass(cls, argparse.RawDescriptionHelpFormatter)


def _text(text: str, *, raw: bool) -> list[nodes.Node]:
    """A description or epilog: verbatim when the parser keeps its layout, else paragraphs."""
    if raw:
        return [_verbatim(text.rstrip())]
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return [nodes.paragraph(p, p) for p in paragraphs if p]


def _verbatim(text: str) -> nodes.literal_block:
    """Text shown as the terminal shows it: never highlighted as code."""
    block = nodes.literal_block(text, text)
    block["language"] = "text"
    return block


def _invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """``-o, --output {json,yaml}`` or ``DEVICE``: how the option is written."""
    formatter = parser._get_formatter()  # noqa: SLF001
    if not action.option_strings:
        return formatter._format_args(action, action.dest)  # noqa: SLF001
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    default = formatter._get_default_metavar_for_optional(action)  # noqa: SLF001
    return f"{names} {formatter._format_args(action, default)}"  # noqa: SLF001


def _options(parser: argparse.ArgumentParser) -> list[nodes.Node]:
    """Each argument group with something to show, as a titled definition list."""
    formatter = parser._get_formatter()  # noqa: SLF001
    out: list[nodes.Node] = []
    for group in parser._action_groups:  # noqa: SLF001
        items = []
        for action in group._group_actions:  # noqa: SLF001
            if action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for name, _sub, summary in _subparsers(parser):
                    items.append(_item(name, summary))
                continue
            items.append(_item(_invocation(parser, action), formatter._expand_help(action)))  # noqa: SLF001
        if items:
            title = group.title or "arguments"
            out.append(nodes.paragraph("", "", nodes.strong(title, title.capitalize())))
            out.append(nodes.definition_list("", *items))
    return out


def _item(term: str, text: str) -> nodes.definition_list_item:
    text = " ".join(text.split())
    return nodes.definition_list_item(
        "",
        nodes.term("", "", nodes.literal(term, term)),
        nodes.definition("", nodes.paragraph(text, text)),
    )


def _usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage without its ``usage:`` label (continuation lines moved left with it)."""
    lines = parser.format_usage().removeprefix("usage: ").rstrip().splitlines()
    rest = (line.removeprefix(" " * len("usage: ")) for line in lines[1:])
    return "\n".join([lines[0], *rest])


def _usages(parser: argparse.ArgumentParser) -> list[str]:
    """The usage line of the parser and of every subcommand under it, depth first."""
    usage = _usage(parser)
    lines = [usage] if not _subparsers(parser) or parser.prog.count(" ") == 0 else []
    for _name, sub, _summary in _subparsers(parser):
        lines.extend(_usages(sub))
    return lines


class CliDirective(SphinxDirective):
    """``kvdev-cli module:function``: the parser that function builds, as reference text."""

    required_arguments = 1
    option_spec: ClassVar[dict[str, Any]] = {"synopsis": directives.flag}

    def run(self) -> list[nodes.Node]:
        """Build the parser and render it."""
        module, _, function = self.arguments[0].partition(":")
        parser = getattr(importlib.import_module(module), function)()
        _fixed_width(parser)
        if "synopsis" in self.options:
            return [_verbatim("\n".join(_usages(parser)))]
        return self._body(parser, top=True)

    def _body(self, parser: argparse.ArgumentParser, *, top: bool) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        if not top:
            out.append(_verbatim(_usage(parser)))
            if parser.description:
                out.extend(_text(parser.description, raw=_is_raw(parser)))
        out.extend(_options(parser))
        if parser.epilog:
            out.extend(_text(parser.epilog, raw=_is_raw(parser)))
        for name, sub, _summary in _subparsers(parser):
            title = f"{parser.prog} {name}"
            section = nodes.section(
                ids=[nodes.make_id(title)], names=[nodes.fully_normalize_name(title)]
            )
            section += nodes.title(title, title)
            section.extend(self._body(sub, top=False))
            out.append(section)
        return out


# ------------------------------------------------------------------ agent.toml


def agent_toml_keys(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """agent.toml's header and, for each key, (key, default as written, its comment)."""
    blocks = re.split(r"\n\s*\n", text.strip())
    header = "\n".join(line.removeprefix("#").removeprefix(" ") for line in blocks[0].splitlines())
    keys = []
    for block in blocks[1:]:
        lines = block.splitlines()
        match = re.fullmatch(r"#([a-z-]+) = (.*)", lines[-1])
        if match is None:
            raise SourceMismatchError(f"{AGENT_TOML}: a block does not end in '#key = default'")
        comment = " ".join(line.removeprefix("#").strip() for line in lines[:-1])
        keys.append((match[1], match[2], comment))
    return header, keys


class AgentTomlDirective(SphinxDirective):
    """``kvdev-agent-toml``: every key of the installed agent.toml, with default and meaning."""

    def run(self) -> list[nodes.Node]:
        """Read the file, check its keys are the agent's, render them."""
        from kvdev.guest.adapters import config  # noqa: PLC0415 - sys.path is set by conf.py

        self.env.note_dependency(str(AGENT_TOML))
        _header, keys = agent_toml_keys(AGENT_TOML.read_text())
        accepted = {name.replace("_", "-") for name in config._FILE_KEYS}  # noqa: SLF001
        if {k for k, _, _ in keys} != accepted:
            raise self.error(
                f"{AGENT_TOML}: documents {sorted(k for k, _, _ in keys)}, "
                f"the agent accepts {sorted(accepted)}"
            )
        items = [_item(f"{key} = {default}", comment) for key, default, comment in keys]
        return [nodes.definition_list("", *items)]


# ------------------------------------------------------------------ Helm values


def _yaml_comments(text: str) -> dict[str, str]:
    """Dotted key -> the comment lines right above it in values.yaml."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.removeprefix("#").strip())
            continue
        match = re.match(r"( *)([A-Za-z][A-Za-z0-9]*):", line)
        if match is None:
            comment = []
            continue
        indent = len(match[1])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match[2]))
        out[".".join(name for _, name in stack)] = " ".join(comment)
        comment = []
    return out


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        return {**root["definitions"][ref.removeprefix("#/definitions/")], **schema}
    return schema


def _kind(schema: dict[str, Any]) -> str:
    """The schema's type and constraints, in a few words."""
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    bounds = [
        f"{label} {schema[key]}"
        for key, label in (("minimum", ">="), ("maximum", "<="), ("maxLength", "length <="))
        if key in schema
    ]
    if "pattern" in schema:
        bounds.append(f"matching {schema['pattern']}")
    return f"{text} ({', '.join(bounds)})" if bounds else text


def helm_values(
    values: dict[str, Any], schema: dict[str, Any], comments: dict[str, str]
) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default as JSON, description) of every leaf value of values.yaml."""
    rows: list[tuple[str, str, str, str]] = []

    def walk(value: object, node: dict[str, Any], path: tuple[str, ...]) -> None:
        node = _resolve(node, schema)
        props = node.get("properties")
        if isinstance(props, dict) and isinstance(value, dict) and "$ref" not in node:
            for key, item in value.items():
                if key not in props:
                    dotted = ".".join((*path, key))
                    raise SourceMismatchError(f"values.schema.json lacks {dotted}")
                walk(item, props[key], (*path, key))
            return
        dotted = ".".join(path)
        rows.append((dotted, _kind(node), json.dumps(value), comments.get(dotted, "")))

    walk(values, schema, ())
    return rows


class HelmValuesDirective(SphinxDirective):
    """``kvdev-helm-values``: every value of the chart, its type, default and comment."""

    def run(self) -> list[nodes.Node]:
        """Read the chart's values and schema, render the table."""
        values_path, schema_path = CHART / "values.yaml", CHART / "values.schema.json"
        for path in (values_path, schema_path):
            self.env.note_dependency(str(path))
        text = values_path.read_text()
        try:
            rows = helm_values(
                yaml.safe_load(text), json.loads(schema_path.read_text()), _yaml_comments(text)
            )
        except SourceMismatchError as e:
            raise self.error(str(e)) from e
        return self._sections(rows, _yaml_comments(text))

    def _sections(
        self, rows: Sequence[tuple[str, str, str, str]], comments: dict[str, str]
    ) -> list[nodes.Node]:
        """One section per top-level key (its values by their path below it), in file order."""
        groups: dict[str, list[tuple[str, str, str, str]]] = {}
        for key, kind, default, comment in rows:
            top, _, rest = key.partition(".")
            group = top if rest else ""
            groups.setdefault(group, []).append((rest or key, kind, default, comment))
        out: list[nodes.Node] = []
        for group, members in groups.items():
            title = group or "Top-level values"
            section = nodes.section(ids=[nodes.make_id(f"values-{title}")], names=[title])
            section += nodes.title(
                title, "", nodes.literal(title, title) if group else nodes.Text(title)
            )
            if comments.get(group):
                section += nodes.paragraph(comments[group], comments[group])
            section += _values_table(members)
            out.append(section)
        return out


class VersionsDirective(SphinxDirective):
    """``kvdev-versions TABLE``: a table rendered from packaging/versions.toml."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        """Read and check the versions file, render the named table as Markdown."""
        self.env.note_dependency(str(kvdev_versions.VERSIONS))
        try:
            v = kvdev_versions.load()
        except kvdev_versions.VersionsError as e:
            raise self.error(str(e)) from e
        tables = {
            "versions": lambda: kvdev_versions.versions_table(v),
            "kubernetes-gates": lambda: kvdev_versions.gates_table(v, "Kubernetes"),
            "kubevirt-gates": lambda: kvdev_versions.gates_table(v, "KubeVirt"),
            "distributions": lambda: kvdev_versions.distributions_table(v),
            "maturity": lambda: kvdev_versions.maturity_table(v),
            "quickstart": lambda: kvdev_versions.quickstart_table(v),
        }
        render = tables.get(self.arguments[0])
        if render is None:
            raise self.error(
                f"kvdev-versions: no table {self.arguments[0]!r}: one of {sorted(tables)}"
            )
        return self.parse_text_to_nodes(render())


def _values_table(rows: Sequence[tuple[str, str, str, str]]) -> nodes.table:
    """Value and default as code; the type and the comment share the widest column."""
    group = nodes.tgroup(cols=3)
    group.extend(nodes.colspec(colwidth=w) for w in (3, 2, 5))

    def entry(*children: nodes.Node) -> nodes.entry:
        return nodes.entry("", nodes.paragraph("", "", *children))

    head = nodes.row("", *(entry(nodes.Text(t)) for t in ("Value", "Default", "Type and meaning")))
    body = []
    for key, kind, default, comment in rows:
        meaning: list[nodes.Node] = [nodes.literal(kind, kind)]
        if comment:
            meaning.append(nodes.Text(f": {comment}"))
        body.append(
            nodes.row(
                "",
                entry(nodes.literal(key, key)),
                entry(nodes.literal(default, default)),
                entry(*meaning),
            )
        )
    group += nodes.thead("", head)
    group += nodes.tbody("", *body)
    return nodes.table("", group, classes=["colwidths-given"])  # the HTML keeps 30/20/50


# ------------------------------------------------------------------ man pages


def _man_line_breaks(app: Sphinx, doctree: nodes.document, _docname: str) -> None:
    """Give each of MyST's hard line breaks a roff ``.br`` in the man pages."""
    if app.builder.name != "man":
        return
    for raw in list(doctree.findall(nodes.raw)):
        if raw.get("format") == "html" and raw.astext().strip() == "<br />":
            raw.replace_self(nodes.raw("", "\n.br\n", format="manpage"))


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directives and the man pages' line breaks."""
    app.connect("doctree-resolved", _man_line_breaks)
    app.add_directive("kvdev-cli", CliDirective)
    app.add_directive("kvdev-agent-toml", AgentTomlDirective)
    app.add_directive("kvdev-helm-values", HelmValuesDirective)
    app.add_directive("kvdev-versions", VersionsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
