"""Upstream's DRA CEL environment judges kvdev's cost verdicts.

The judge is ``build/upstream/bin/celcost`` (tests/upstream/cmd/celcost):
k8s.io/dynamic-resource-allocation/cel v0.37.2's compiler (both DRAConsumableCapacity and
DRAListTypeAttributes on), its ``MaxCost`` (what the API server compares with
``CELSelectorExpressionMaxCost``) and, given a device, the evaluation under the runtime cost
limit (its actual cost, or "actual cost limit exceeded").

For every expression both compile, generated (hypothesis: comprehensions over literal lists,
bound lists, the attribute maps and list attributes, nested, around ``matches``, string
concatenation, comparisons) and hostile (the regex bomb, copy bombs, deep nesting):

* compile time: kvdev's estimated cost is upstream's, so kvdev refuses (estimate over
  ``COST_LIMIT``) exactly what upstream refuses;
* run time: where upstream's runtime limit trips, kvdev's does (``CelCostLimitError``); where
  kvdev's trips and upstream's does not, the case is one of ``DIFFERS`` (named below and in
  docs/reference/allocator.md, "CEL cost and limits").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cel import A100, GPU

from kvdev.host.allocation.cel import (
    COST_LIMIT,
    CelCompileError,
    CelCostLimitError,
    CelRuntimeError,
    compile_uncached,
    device_view,
)
from kvdev.host.k8s.resource import Device
from upstreamlab import JsonLines

pytestmark = pytest.mark.upstream

DRIVER = GPU
DEVICE: dict[str, Any] = A100
VIEW = device_view(DRIVER, Device.model_validate(DEVICE))
UPSTREAM_DEVICE = {
    "driver": DRIVER,
    "attributes": DEVICE["attributes"],
    "capacity": DEVICE["capacity"],
}

# Where kvdev's runtime limit trips and upstream's does not, on purpose.
DIFFERS = {
    "estimate-at-runtime": "kvdev's evaluator counts no actual cost: an expression whose "
    "estimate exceeds the limit is stopped before it runs (CelCostLimitError) where upstream "
    "runs it and stops only if its actual cost passes the limit",
    "library-copies": "the CEL library copies a list each time a literal or map() holds it "
    "(upstream shares it): an expression that may copy more than COST_LIMIT values is stopped "
    "although upstream's estimate is under the limit",
}


def _regex_bomb(n: int, pattern: str = r"\\w{100}") -> str:
    items = ", ".join(str(i) for i in range(n))
    return f'cel.bind(l, [{items}], l.all(x, l.all(y, !device.driver.matches("{pattern}"))))'


def _copy_bomb(n: int) -> str:
    expr = f"size(v{n}) > 0"
    for i in range(n, 0, -1):
        expr = f"cel.bind(v{i}, [v{i - 1}, v{i - 1}], {expr})"
    return f"cel.bind(v0, [1], {expr})"


HOSTILE = [
    _regex_bomb(277),  # 76,729 matches: estimated 999,709 before, 1,535,987 upstream
    _regex_bomb(240),
    _regex_bomb(277, "q"),  # 998,884 upstream: allowed, and fast with the pattern compiled once
    _regex_bomb(280, "q"),
    _copy_bomb(22),
    _copy_bomb(10),
    (
        'device.attributes["gpu.example.com"].lanes.all(x, '
        'device.attributes["gpu.example.com"].lanes.all(y, x == y))'
    ),
    "cel.bind(l, [0,1,2,3,4,5,6,7,8,9], l.all(a, l.all(b, l.all(c, l.all(d, l.all(e, true))))))",
    (
        "cel.bind(l, [0,1,2,3,4,5,6,7,8,9], l.all(a, l.all(b, l.all(c, l.all(d, l.all(e, "
        "l.all(f, true)))))))"
    ),
    (
        "device.attributes.all(d, device.attributes[d].all(k, device.attributes.all(e, "
        "device.attributes[e].all(j, true))))"
    ),
    (
        "cel.bind(a, device.driver + device.driver, cel.bind(b, a + a, cel.bind(c, b + b, "
        "cel.bind(d, c + c, cel.bind(e, d + d, e.matches(e))))))"
    ),
    'device.driver.matches("[")',
    'device.attributes["gpu.example.com"].model.contains(device.driver + device.driver)',
]


class Judge(JsonLines):
    """One long-lived ``celcost``: an expression (and a device) in, upstream's verdict out."""

    def __init__(self) -> None:
        super().__init__("celcost")

    def verdict(self, expression: str, *, evaluate: bool = False) -> dict[str, Any]:
        request: dict[str, object] = {"expression": expression}
        if evaluate:
            request["device"] = UPSTREAM_DEVICE
        return dict(self.ask(request))


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    j = Judge()
    yield j
    j.close()


def _kvdev(expression: str) -> int | None:
    """kvdev's estimated cost, or None when kvdev does not compile the expression."""
    try:
        return compile_uncached(expression).estimated_cost
    except CelCompileError:
        return None


def _agree_at_compile_time(judge: Judge, expression: str) -> bool:
    """Assert the compile-time verdicts agree; whether both compiled."""
    up = judge.verdict(expression)
    mine = _kvdev(expression)
    if up.get("compileError") or mine is None:
        return False
    assert mine == up["maxCost"], (expression, mine, up)
    assert (mine > COST_LIMIT) == up["overLimit"], expression
    return True


def _agree_at_run_time(judge: Judge, expression: str) -> str:
    """Assert the runtime limits agree (or differ as ``DIFFERS`` names); the case."""
    up = judge.verdict(expression, evaluate=True)
    selector = compile_uncached(expression)
    try:
        selector.matches(VIEW)
    except CelCostLimitError:
        if up["costLimitExceeded"]:
            return "both"
        if selector.estimated_cost > COST_LIMIT:
            assert up["overLimit"], expression
            return "estimate-at-runtime"
        assert selector.copy_bound > COST_LIMIT, expression
        return "library-copies"
    except CelRuntimeError:
        assert not up["costLimitExceeded"], (expression, up)
        return "error"
    assert not up["costLimitExceeded"], (expression, up)
    return "neither"


@pytest.mark.parametrize("expression", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_expressions_get_upstreams_cost_verdict(judge: Judge, expression: str) -> None:
    if _agree_at_compile_time(judge, expression):
        assert _agree_at_run_time(judge, expression) in ("both", "neither", "error", *DIFFERS)
    else:
        up = judge.verdict(expression)
        assert up.get("compileError"), (expression, up)
        assert _kvdev(expression) is None, expression


def test_the_regex_bomb_is_refused_for_cost_as_upstream_refuses_it(judge: Judge) -> None:
    bomb = compile_uncached(_regex_bomb(277))
    assert bomb.estimated_cost == judge.verdict(_regex_bomb(277))["maxCost"] == 1_535_987
    with pytest.raises(CelCostLimitError, match="estimated cost 1535987 > 1000000"):
        bomb.matches(VIEW)


def test_a_copy_bomb_is_a_named_difference(judge: Judge) -> None:
    bomb = _copy_bomb(22)
    assert not judge.verdict(bomb)["overLimit"]
    assert _agree_at_run_time(judge, bomb) == "library-copies"


# ---------------------------------------------------------------------------- generated

_ATTR = 'device.attributes["gpu.example.com"]'  # A100's
_STRINGS = [
    "device.driver",
    f"{_ATTR}.model",
    '"a100"',
    "(device.driver + device.driver)",
    f'({_ATTR}.model + "-x")',
]
_PATTERNS = ['"a"', r'"\\w{100}"', '"^gpu[.]"', '"(a|b)*c{2,9}"', "device.driver"]


def _ranges(var: str | None) -> st.SearchStrategy[str]:
    literal = st.sampled_from([0, 1, 3, 10, 40, 120, 300]).map(
        lambda n: "[" + ", ".join(str(i) for i in range(n)) + "]"
    )
    fixed = st.sampled_from(
        [
            f"{_ATTR}.lanes",
            "device.attributes",
            _ATTR,
            '["a", "b", "c"].map(s, s + s)',
            "[[1, 2], [3]]",
        ]
    )
    choices = [literal, fixed]
    if var is not None:
        choices.append(st.just(var))
    return st.one_of(*choices)


def _leaves(scope: list[str]) -> st.SearchStrategy[str]:
    plain = st.one_of(
        st.tuples(st.sampled_from(_STRINGS), st.sampled_from(_PATTERNS)).map(
            lambda p: f"{p[0]}.matches({p[1]})"
        ),
        st.tuples(st.sampled_from(_STRINGS), st.sampled_from(_STRINGS)).map(
            lambda p: f"{p[0]} == {p[1]}"
        ),
        st.tuples(st.sampled_from(_STRINGS), st.sampled_from(["contains", "startsWith"])).map(
            lambda p: f'{p[0]}.{p[1]}("gpu")'
        ),
        st.just(f"{_ATTR}.index > 0"),
        st.just(f"{_ATTR}.lanes.includes(8)"),
        st.just('"model" in ' + _ATTR),
        st.just("size(device.driver) > 3"),
        st.just("has(device.attributes.x)"),
    )
    if not scope:
        return plain
    return st.one_of(plain, st.sampled_from(scope).map(lambda v: f"{v} == {v}"))


@st.composite
def _selectors(draw: st.DrawFn, scope: tuple[str, ...] = (), depth: int = 0) -> str:
    names = list(scope)
    kind = draw(
        st.sampled_from(["leaf", "macro", "macro", "bind", "logic"] if depth < 3 else ["leaf"])
    )
    if kind == "leaf":
        return draw(_leaves(names))
    if kind == "logic":
        a = draw(_selectors(scope, depth + 1))
        b = draw(_selectors(scope, depth + 1))
        return draw(st.sampled_from([f"({a} && {b})", f"({a} || {b})", f"!({a})"]))
    if kind == "bind":
        var = f"b{depth}"
        init = draw(_ranges(None))
        body = draw(_selectors((*scope, var), depth + 1))
        return f"cel.bind({var}, {init}, {body})"
    binds = [n for n in names if n.startswith("b")]
    target = draw(_ranges(draw(st.sampled_from(binds)) if binds else None))
    var = f"v{depth}"
    body = draw(_selectors((*scope, var), depth + 1))
    macro = draw(st.sampled_from(["all", "exists", "exists_one"]))
    return f"{target}.{macro}({var}, {body})"


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_COUNTS: dict[str, int] = {}


@SETTINGS
@given(expression=_selectors())
def test_generated_selectors_get_upstreams_cost_verdict(judge: Judge, expression: str) -> None:
    compiled = _agree_at_compile_time(judge, expression)
    key = "compiled" if compiled else "not compiled"
    _COUNTS[key] = _COUNTS.get(key, 0) + 1
    if compiled and compile_uncached(expression).estimated_cost > COST_LIMIT:
        _COUNTS["over the limit"] = _COUNTS.get("over the limit", 0) + 1
    if compiled:
        case = _agree_at_run_time(judge, expression)
        _COUNTS[case] = _COUNTS.get(case, 0) + 1


def test_report_agreement_counts() -> None:
    """Print the generated run's counts (docs/development/upstream-judges.md quotes them)."""
    print(json.dumps(_COUNTS, sort_keys=True))
