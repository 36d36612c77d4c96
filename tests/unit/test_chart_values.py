"""The chart's values: the Helm guide's table lists every value of values.yaml with its default and
nothing else, and values.schema.json describes every one of them (a value it does not describe
is refused by ``additionalProperties: false``: a default the schema lacked would break helm)."""

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "kvdev"


def leaves(value, schema, path=()):
    """(dotted key, default) of each value; a ``$ref``'d or unstructured schema is a leaf."""
    props = schema.get("properties")
    if props and "$ref" not in schema and isinstance(value, dict):
        for key, item in value.items():
            assert key in props, f"values.schema.json lacks {'.'.join((*path, key))}"
            yield from leaves(item, props[key], (*path, key))
    else:
        yield ".".join(path), value


def defaults():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    return dict(leaves(values, schema))


def readme_table():
    page = (REPO / "docs" / "guides" / "install-helm.md").read_text()
    section = page.split("## Install with Helm", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([A-Za-z.]+)` \| `(.*?)` \|", section, re.MULTILINE))


def test_every_value_is_described_by_the_schema():
    assert len(defaults()) > 40  # the walk reached the leaves


def test_the_guide_table_lists_every_value_with_its_default():
    table = readme_table()
    assert sorted(table) == sorted(defaults())
    for key, default in defaults().items():
        shown = default if isinstance(default, str) and default else json.dumps(default)
        assert table[key] == shown, key
