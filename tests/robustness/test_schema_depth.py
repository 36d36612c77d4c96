"""Regression: the verdict on deeply nested JSON must not depend on the caller's stack depth.

The metadata fuzzer found the agent reporting "maximum recursion depth exceeded" for a file
that the same checker, called from a shallower stack (or with a higher recursion limit), said
was "nested deeper than 32 levels": the JSON decoder hit the interpreter's limit first.
Since upstream's reader judged kvdev's (tests/unit/test_metadata_reader_oracle.py), nesting up
to Go's limit (10000 levels) is read, checked without recursion; past it, refused.
"""

import sys

import pytest

from kvdev.errors import SchemaError
from kvdev.schema import DEVICE_METADATA, decode_stream

pytestmark = [pytest.mark.robustness]


def deep(levels):
    doc = '{"apiVersion":"metadata.resource.k8s.io/v1beta1","deep":%s%s}'
    return (doc % ("[" * levels, "]" * levels)).encode()


def problems(data, *, recursion_limit, stack_depth=0):
    """decode_stream's problems, called ``stack_depth`` frames down, under ``recursion_limit``."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit)
    try:

        def down(n):
            if n:
                return down(n - 1)
            try:
                decode_stream(data, DEVICE_METADATA, source="f")
            except SchemaError as e:
                return [str(p) for p in e.problems]
            return []

        return down(stack_depth)
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize("levels", [33, 900, 5000, 9999, 10_001, 100_000])
@pytest.mark.parametrize(("limit", "stack"), [(1000, 0), (1000, 800), (50_000, 0)])
def test_the_verdict_on_depth_is_the_same_whatever_the_stack(levels, limit, stack):
    found = problems(deep(levels), recursion_limit=limit, stack_depth=stack)
    if levels < 10_000:  # read as upstream reads it: what is wrong is the missing kind
        assert found == problems(deep(1), recursion_limit=limit, stack_depth=stack)
    else:
        assert found == ["f: stream[0]: nested deeper than 10000 levels"]


def test_depth_within_the_limit_is_not_refused_for_depth():
    found = problems(deep(30), recursion_limit=1000, stack_depth=900)
    assert not any("nested" in p or "recursion" in p for p in found), found
