"""Every object of the allocator conformance fixtures validates and round-trips."""

from pathlib import Path

import pytest
import yaml

from kvdev.host.k8s import KINDS

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "allocator"  # copied from shared/
FILES = sorted(FIXTURES.glob("*.yaml"))
SECTIONS = ("deviceClasses", "resourceSlices", "claims")


def _objects(path):
    case = yaml.safe_load(path.read_text(encoding="utf-8"))
    for section in SECTIONS:
        yield from case.get(section) or []


def test_the_fixtures_are_there():
    assert len(FILES) == 88


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_fixture_objects_validate_and_round_trip(path):
    count = 0
    for obj in _objects(path):
        model = KINDS[(obj["apiVersion"], obj["kind"])]
        parsed = model.model_validate(obj, strict=True)
        again = model.model_validate(parsed.to_json_dict(), strict=True)
        assert again == parsed
        count += 1
    assert count > 0 or path.stem.startswith("008")


def test_fixture_corpus_is_large():
    assert len(FILES) >= 80 or not FILES
