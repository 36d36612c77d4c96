from fractions import Fraction

import pytest
from pydantic import ValidationError

from kvdev.host.k8s import parse_quantity
from kvdev.host.k8s.resource import Counter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("8", Fraction(8)),
        ("+8", Fraction(8)),
        ("-8", Fraction(-8)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("500m", Fraction(1, 2)),
        ("1k", Fraction(1000)),
        ("10G", Fraction(10**10)),
        ("2T", Fraction(2 * 10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ei", Fraction(2**60)),
        ("2e3", Fraction(2000)),
        ("2E3", Fraction(2000)),
        ("5e-1", Fraction(1, 2)),
        ("1e+2", Fraction(100)),
        ("100n", Fraction(1, 10**7)),
        ("3u", Fraction(3, 10**6)),
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "Gi",
        "1gi",
        "1KI",
        "1K",
        "1.2.3",
        "1e",
        "e3",
        "1Gi1",
        "--1",
        "0x10",
        "1e9999",
    ],
)
def test_parse_quantity_rejects(text):
    with pytest.raises(ValueError, match=r"quantity|exponent"):
        parse_quantity(text)


def test_equal_spellings_compare_equal():
    assert parse_quantity("4Gi") == parse_quantity("4294967296")
    assert parse_quantity("1000m") == parse_quantity("1") == parse_quantity("1e0")


def test_quantity_field_accepts_json_integer_but_not_bool_or_float():
    assert Counter.model_validate({"value": 8}).value == "8"
    for bad in (True, 1.5):
        with pytest.raises(ValidationError):
            Counter.model_validate({"value": bad})


def test_quantity_field_error_names_the_value():
    with pytest.raises(ValidationError, match="'4 Gi' is not a quantity"):
        Counter.model_validate({"value": "4 Gi"})
