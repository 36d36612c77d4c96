"""Regression tests for what the hostile-input suite (tests/robustness) found in the allocator.

Each would hang, eat gigabytes or print a traceback before its fix.
"""

import json
import tracemalloc

import pytest

from hostlab import NeverRun
from kvdev.errors import SchemaError
from kvdev.host.allocation.allocator import Clock, Failed, NodeInfo, allocate
from kvdev.host.allocation.cel import COST_LIMIT, CelCostLimitError, compile_selector, device_view
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice, load, parse_quantity

DRIVER = "d.example.com"


def nest(depth, inner, wrap):
    for i in range(depth, 0, -1):
        inner = wrap(i, inner)
    return inner


def a_device():
    data = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "n",
            "devices": [
                {"name": f"dev-{i}", "attributes": {"uniq": {"int": i}}} for i in range(60)
            ],
        },
    }
    return ResourceSlice.model_validate(data)


@pytest.mark.parametrize(
    "expression",
    [
        # [v, v] doubles a deep copy: 2**30 values from 30 binds (was: minutes, then OOM)
        "cel.bind(v0, [1, 2], "
        + nest(30, "size(v30) > 0", lambda i, e: f"cel.bind(v{i}, [v{i - 1}, v{i - 1}], {e})")
        + ")",
        # b.map(x, b) squares the size: 2**256 after 8 binds
        "cel.bind(v0, [1, 2], "
        + nest(8, "size(v8) > 0", lambda i, e: f"cel.bind(v{i}, v{i - 1}.map(x, v{i - 1}), {e})")
        + ")",
        "device.attributes.map(d, device.attributes.map(e, device.attributes)).size() > 0",
    ],
    ids=["list-nesting", "map-squaring", "attribute-squaring"],
)
def test_copying_cost_bombs_are_refused_without_running(expression):
    selector = compile_selector(expression)
    # upstream's estimate allows some (Go shares the lists the library copies): the copy bound
    assert max(selector.estimated_cost, selector.copy_bound) > COST_LIMIT
    program = selector._program = NeverRun()
    with pytest.raises(CelCostLimitError, match="cost limit exceeded"):
        selector.matches(device_view(DRIVER, a_device().spec.devices[0]))
    assert program.runs == 0


def test_small_copies_still_run():
    view = device_view(DRIVER, a_device().spec.devices[0])
    assert compile_selector("cel.bind(a, [1, 2], [a, a].size() == 2)").matches(view)
    assert compile_selector("[1, 2, 3].map(x, x * 2).exists(y, y == 6)").matches(view)


def test_parse_errors_do_not_echo_the_whole_expression():
    expression = "(" * 4000 + "true" + ")" * 4000
    with pytest.raises(Exception, match="CEL compile error") as e:
        compile_selector(expression)
    assert len(str(e.value)) < 1500
    assert "Recursion limit" in str(e.value)


def test_selector_errors_name_the_claim_class_field_and_device():
    cls = DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "c"},
            "spec": {"selectors": [{"cel": {"expression": "device.attributes['x'].y == 1"}}]},
        }
    )
    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "cl", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
        }
    )
    out = allocate(NodeInfo("n", {}), [claim], classes=[cls], slices=[a_device()])
    assert isinstance(out, Failed)
    assert out.keyword == "cel-runtime-error"
    assert out.message.startswith(
        "claim ns/cl: class c: spec.selectors[0].cel.expression: device d.example.com/p/dev-0: "
        "CEL runtime error: "
    )


def test_a_search_past_its_filter_timeout_fails_with_filter_timeout():
    """The scheduler's filter timeout, on a fake clock that moves a second per reading."""
    ticks = iter(range(10**6))
    clock = Clock(now=lambda: float(next(ticks)), timeout=5, every=1)
    cls = DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "c"},
            "spec": {},
        }
    )
    claims = [
        ResourceClaim.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"cl-{i}", "namespace": "ns"},
                "spec": {
                    "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}
                },
            }
        )
        for i in range(20)
    ]
    out = allocate(NodeInfo("n", {}), claims, classes=[cls], slices=[a_device()], clock=clock)
    assert isinstance(out, Failed)
    assert out.keyword == "filter-timeout"
    assert out.message.startswith("node n: timed out trying to allocate devices")
    assert "filter timeout of 5 s" in out.message
    unlimited = allocate(NodeInfo("n", {}), claims, classes=[cls], slices=[a_device()])
    assert not isinstance(unlimited, Failed)


@pytest.mark.parametrize("text", ["9" * 129, "0." + "0" * 200 + "1", "1" * 5000 + "Ki"])
def test_quantities_with_too_many_digits_are_refused(text):
    with pytest.raises(ValueError, match="more than 128 digits"):
        parse_quantity(text)
    assert parse_quantity("9" * 128) == int("9" * 128)


def test_a_yaml_alias_bomb_is_refused_before_it_expands():
    text = 'kind: ResourceClaim\napiVersion: resource.k8s.io/v1\nx0: &x0 ["a","a","a","a","a"]\n'
    for i in range(1, 12):
        text += f"x{i}: &x{i} [" + ",".join([f"*x{i - 1}"] * 5) + "]\n"
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match="alias bomb"):
            load(text, "bomb.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # expanded, it would be 5**11 = 48 million references


def test_modest_aliases_still_load():
    text = (
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\n"
        "metadata: &m {name: c}\nspec: &e {}\n---\n"
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\n"
        "metadata: {name: d, labels: {a: b}}\nspec: {selectors: &s []}\n"
    )
    assert [o.metadata.name for o in load(text, "ok.yaml")] == ["c", "d"]


def test_a_number_longer_than_python_converts_is_an_error_naming_the_file():
    text = (
        json.dumps({"apiVersion": "v1", "kind": "List", "items": []})[:-1]
        + ', "n": '
        + "9" * 5000
        + "}"
    )
    with pytest.raises(SchemaError) as e:
        load(text, "big.json")
    [problem] = e.value.problems
    assert "big.json" in str(problem)
    assert "4300 digits" in str(problem)
