"""CEL device selectors (kvdev.host.allocation.cel) against real ResourceSlice devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hostlab import NeverRun
from kvdev.errors import PermanentError
from kvdev.host.allocation.cel import (
    COST_LIMIT,
    CelCompileError,
    CelCostLimitError,
    CelError,
    CelRuntimeError,
    DeviceView,
    Selector,
    Semver,
    compile_selector,
    compile_uncached,
    device_view,
)
from kvdev.host.k8s.resource import Device

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "allocator"
GPU = "gpu.example.com"
NIC = "nic.example.com"


def view(driver: str, spec: dict[str, Any]) -> DeviceView:
    return device_view(driver, Device.model_validate(spec))


A100 = {
    "name": "gpu-1",
    "attributes": {
        "model": {"string": "a100"},
        "index": {"int": 1},
        "exclusiveMode": {"bool": True},
        "driverVersion": {"version": "1.2.3"},
        "firmware": {"version": "2.0.0-rc.1"},
        "resource.kubernetes.io/numaNode": {"int": 0},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        "profiles": {"strings": ["1g.10gb", "2g.20gb"]},
        "lanes": {"ints": [4, 8]},
        "flags": {"bools": [False]},
        "compat": {"versions": ["1.0.0", "1.1.0"]},
    },
    "capacity": {"memory": {"value": "40Gi"}, "fpga.example.com/slots": {"value": "2"}},
}
BARE = {"name": "gpu-0"}


@pytest.fixture(scope="module")
def a100() -> DeviceView:
    return view(GPU, A100)


@pytest.fixture(scope="module")
def bare() -> DeviceView:
    return view(GPU, BARE)


def matches(expression: str, device: DeviceView) -> bool:
    return compile_selector(expression).matches(device)


# --------------------------------------------------------------------------- the view


def test_device_view_files_unqualified_names_under_the_driver_domain(a100: DeviceView) -> None:
    assert a100.driver == GPU
    assert a100.attributes[GPU]["model"] == "a100"
    assert a100.attributes[GPU]["driverVersion"] == Semver(1, 2, 3)
    assert a100.attributes[GPU]["lanes"] == [4, 8]
    assert a100.attributes["resource.kubernetes.io"] == {"numaNode": 0, "pcieRoot": "pci0000:00"}
    assert a100.capacity == {GPU: {"memory": "40Gi"}, "fpga.example.com": {"slots": "2"}}
    assert a100.allow_multiple_allocations is False


def test_device_view_allow_multiple_allocations_is_the_device_flag() -> None:
    """Class B: always defined, false when unset, whatever DRAConsumableCapacity says."""
    shared = {"name": "nic-0", "allowMultipleAllocations": True}
    assert view(NIC, shared).allow_multiple_allocations is True
    assert view(NIC, BARE).allow_multiple_allocations is False


# --------------------------------------------------------------------------- the corpus


def corpus_expressions() -> list[str]:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            cel = node.get("cel")
            if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
                found.add(cel["expression"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted(FIXTURES.glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return sorted(found)


CORPUS_FAILURES = {"noSuchVar": CelCompileError}


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="allocator fixture corpus not present")
def test_every_corpus_expression_compiles_and_evaluates() -> None:
    expressions = corpus_expressions()
    assert len(expressions) >= 10
    devices = [
        view(GPU, A100),
        view(GPU, {**A100, "capacity": {"memory": {"value": "80Gi"}}}),
        view(NIC, {"name": "nic-0", "capacity": {"bandwidth": {"value": "10G"}}}),
    ]
    errors: list[str] = []
    for expression in expressions:
        expected_error = CORPUS_FAILURES.get(expression)
        if expected_error is not None:
            with pytest.raises(expected_error):
                compile_selector(expression)
            continue
        selector = compile_selector(expression)
        for device in devices:
            reads_keys = "attributes[" in expression or "capacity[" in expression
            if device.driver == NIC and reads_keys and "has(" not in expression:
                # Unless the driver check short-circuits first, reading GPU keys on a NIC fails.
                try:
                    selector.matches(device)
                except CelRuntimeError as exc:
                    errors.append(str(exc))
                continue
            assert isinstance(selector.matches(device), bool), expression
    assert errors
    assert all("no such key" in e for e in errors), errors


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        ('device.driver == "gpu.example.com"', "a100", True),
        ('device.driver == "nic.example.com"', "a100", False),
        ('device.driver == "gpu.example.com" || device.driver == "fpga.example.com"', "a100", True),
        ('device.attributes["gpu.example.com"].model == "a100"', "a100", True),
        ('device.attributes["gpu.example.com"].model == "h100"', "a100", False),
        (
            (
                'device.driver == "gpu.example.com" && '
                'device.attributes["gpu.example.com"].model == "a100"'
            ),
            "a100",
            True,
        ),
        ('device.attributes["gpu.example.com"].exclusiveMode', "a100", True),
        ('device.attributes["resource.kubernetes.io"].numaNode == 0', "a100", True),
        ('device.attributes["resource.kubernetes.io"].numaNode == 1', "a100", False),
        ('device.attributes["resource.kubernetes.io"].pcieRoot.startsWith("pci")', "a100", True),
        ('device.attributes["gpu.example.com"].index >= 1', "a100", True),
        (
            'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
            "a100",
            True,
        ),
        (
            'device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) >= 0',
            "a100",
            False,
        ),
        (
            'device.capacity["gpu.example.com"].memory.compareTo(quantity("40960Mi")) == 0',
            "a100",
            True,
        ),
        ('device.capacity["fpga.example.com"].slots == quantity("2")', "a100", True),
        (
            (
                'has(device.attributes["gpu.example.com"].model) && '
                'device.attributes["gpu.example.com"].model == "a100"'
            ),
            "bare",
            False,
        ),
        ('has(device.attributes["gpu.example.com"].model)', "a100", True),
        ("device.allowMultipleAllocations == false", "a100", True),
        ('device.attributes["gpu.example.com"].size() == 9', "a100", True),
    ],
)
def test_selector(expression: str, device: str, expected: bool, request: Any) -> None:
    assert matches(expression, request.getfixturevalue(device)) is expected


def test_allow_multiple_allocations_on_a_shared_device() -> None:
    nic = view(NIC, {"name": "nic-0", "allowMultipleAllocations": True})
    assert matches("device.allowMultipleAllocations", nic)


def test_allow_multiple_allocations_is_defined_on_every_device() -> None:
    """Class B: the scheduler defines the field on every device (false when unset)."""
    bare = view(NIC, BARE)
    assert matches("has(device.allowMultipleAllocations)", bare)
    assert not matches("device.allowMultipleAllocations", bare)


# --------------------------------------------------------------------------- domains


def test_unknown_domain_is_an_empty_map(a100: DeviceView, bare: DeviceView) -> None:
    assert matches('size(device.attributes["unknown.example.com"]) == 0', a100)
    assert matches('size(device.capacity["unknown.example.com"]) == 0', a100)
    assert not matches('has(device.attributes["unknown.example.com"].model)', a100)
    # The driver's own domain exists even when the device has no attributes at all.
    assert matches("size(device.attributes[device.driver]) == 0", bare)
    assert matches("size(device.capacity[device.driver]) == 0", bare)


def test_other_driver_attributes_are_not_visible_under_own_domain(a100: DeviceView) -> None:
    nic = view(NIC, {"name": "nic-0", "attributes": {"model": {"string": "a100"}}})
    expression = 'device.attributes["gpu.example.com"].model == "a100"'
    assert matches(expression, a100)
    with pytest.raises(CelRuntimeError, match="no such key"):
        matches(expression, nic)
    assert matches('device.attributes["nic.example.com"].model == "a100"', nic)


def test_unknown_key_in_known_or_empty_map_is_a_runtime_error(
    a100: DeviceView, bare: DeviceView
) -> None:
    with pytest.raises(CelRuntimeError, match="no such key: nope"):
        matches('device.attributes["gpu.example.com"].nope == 1', a100)
    with pytest.raises(CelRuntimeError, match="no such key: model"):
        matches('device.attributes["gpu.example.com"].model == "a100"', bare)
    with pytest.raises(CelRuntimeError, match="no such key"):
        matches('device.attributes["unknown.example.com"].model == "a100"', a100)
    with pytest.raises(CelRuntimeError, match="no such key"):
        matches('device.capacity["gpu.example.com"].cores.compareTo(quantity("1")) > 0', a100)


# --------------------------------------------------------------------------- semver


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))', True),
        (
            'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.3"))',
            False,
        ),
        ('device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.10.0"))', True),
        (
            'device.attributes["gpu.example.com"].driverVersion.compareTo(semver("1.2.3")) == 0',
            True,
        ),
        ('device.attributes["gpu.example.com"].driverVersion == semver("1.2.3+build.7")', True),
        ('device.attributes["gpu.example.com"].driverVersion == "1.2.3"', False),
        ('device.attributes["gpu.example.com"].driverVersion.major() == 1', True),
        ('device.attributes["gpu.example.com"].driverVersion.minor() == 2', True),
        ('device.attributes["gpu.example.com"].driverVersion.patch() == 3', True),
        ('device.attributes["gpu.example.com"].firmware.isLessThan(semver("2.0.0"))', True),
        (
            'device.attributes["gpu.example.com"].firmware.isGreaterThan(semver("2.0.0-beta.2"))',
            True,
        ),
        ('semver("1.0.0-alpha.2").isLessThan(semver("1.0.0-alpha.10"))', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))', True),
        ('semver("1.0.0-1").isLessThan(semver("1.0.0-alpha"))', True),
        ('semver("v1.02", true) == semver("1.2.0")', True),
        ('isSemver("1.2.3") && !isSemver("1.2") && isSemver("v1.2", true)', True),
        ('device.attributes["gpu.example.com"].compat.exists(v, v.minor() == 1)', True),
    ],
)
def test_semver(expression: str, expected: bool, a100: DeviceView) -> None:
    assert matches(expression, a100) is expected


def test_semver_errors(a100: DeviceView) -> None:
    with pytest.raises(CelRuntimeError, match="not a semantic version"):
        matches('semver("1.2") == semver("1.2.0")', a100)
    with pytest.raises(CelRuntimeError, match="no matching overload"):
        matches('semver("1.2.0").compareTo(quantity("1")) == 0', a100)
    with pytest.raises(CelRuntimeError, match="no matching overload"):
        matches('"1.2.0".isGreaterThan("1.0.0")', a100)


def test_semver_value_type() -> None:
    assert Semver.parse("1.2.3-rc.1+b.5") == Semver(1, 2, 3, ("rc", "1"))
    assert str(Semver.parse("1.2.3-rc.1+b.5")) == "1.2.3-rc.1+b.5"
    assert hash(Semver.parse("1.2.3+x")) == hash(Semver(1, 2, 3))
    with pytest.raises(ValueError, match="not a semantic version"):
        Semver.parse("01.2.3")


# --------------------------------------------------------------------------- quantity


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('quantity("1Gi") == quantity("1024Mi")', True),
        ('quantity("1G") == quantity("1Gi")', False),
        ('quantity("1Gi").isGreaterThan(quantity("1G"))', True),
        ('quantity("500m").isLessThan(quantity("1"))', True),
        ('quantity("1k").add(24).asInteger() == 1024', True),
        ('quantity("1k").add(quantity("1k")) == quantity("2k")', True),
        ('quantity("1").sub(quantity("2")).sign() == -1', True),
        ('quantity("0").sign() == 0', True),
        ('quantity("500m").asApproximateFloat() == 0.5', True),
        ('isQuantity("40Gi") && !isQuantity("40GB")', True),
        (
            (
                'device.capacity["gpu.example.com"].memory.sub(quantity("8Gi"))'
                '.isGreaterThan(quantity("30Gi"))'
            ),
            True,
        ),
    ],
)
def test_quantity(expression: str, expected: bool, a100: DeviceView) -> None:
    assert matches(expression, a100) is expected


def test_quantity_errors(a100: DeviceView) -> None:
    with pytest.raises(CelRuntimeError, match="not a quantity"):
        matches('quantity("40GB").sign() == 1', a100)
    with pytest.raises(CelRuntimeError, match="cannot convert value to integer"):
        matches('quantity("1.5").asInteger() == 1', a100)
    with pytest.raises(CelRuntimeError, match="cannot convert value to integer"):
        matches('quantity("10E").asInteger() > 0', a100)


# --------------------------------------------------------------------------- lists


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["gpu.example.com"].profiles.includes("2g.20gb")', True),
        ('device.attributes["gpu.example.com"].profiles.includes("3g.40gb")', False),
        ('device.attributes["gpu.example.com"].lanes.includes(8)', True),
        ('device.attributes["gpu.example.com"].flags.includes(false)', True),
        ('device.attributes["gpu.example.com"].flags.includes(0)', False),
        ('device.attributes["gpu.example.com"].compat.includes(semver("1.1.0"))', True),
        ('device.attributes["gpu.example.com"].model.includes("a100")', True),
        ('device.attributes["gpu.example.com"].index.includes(true)', False),
        ('"2g.20gb" in device.attributes["gpu.example.com"].profiles', True),
        ('device.attributes["gpu.example.com"].lanes.all(n, n >= 4)', True),
    ],
)
def test_list_attributes(expression: str, expected: bool, a100: DeviceView) -> None:
    assert matches(expression, a100) is expected


def test_cel_bind(a100: DeviceView) -> None:
    assert matches(
        'cel.bind(gpu, device.attributes["gpu.example.com"], '
        'gpu.model == "a100" && gpu.index == 1)',
        a100,
    )
    assert matches("cel.bind(a, 1, cel.bind(b, a + 1, b == 2))", a100)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("noSuchVar", "undeclared reference to noSuchVar"),
        ('device.driver == "x" && other.thing', "undeclared reference to other"),
        ('device.driver.noSuchFunction() == "x"', "undeclared reference to noSuchFunction"),
        ("device.driver ==", "Syntax error"),
        ('device.attributes["x"].?model.orValue("")', "unsupported syntax"),
        ("", "empty"),
        ("   ", "empty"),
        ("true || " * 1500 + "true", "longer than 10240"),
    ],
)
def test_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message) as info:
        compile_selector(expression)
    assert isinstance(info.value, CelError)
    assert isinstance(info.value, PermanentError)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("Foo{a: 1}", "cannot parse at offset 3: unexpected '{'"),  # the library parses it
        ("cel.bind(a, 1)", "cannot parse at offset 13"),
        ("cel.bind(1, 2, 3)", r"cel.bind\(\) needs \(name, init, body\)"),
        ("(true", "Syntax error"),  # the library cannot parse it either: its own message
    ],
)
def test_what_the_parser_cannot_parse_is_a_compile_error(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message):
        compile_uncached(expression)


def test_rewrites_keep_the_source_around_them(a100: DeviceView) -> None:
    """cel.bind and matches are rewritten inside parentheses, comments and each other."""
    expression = (
        "cel.bind(x, (1 + 2), (x > 2 || false) && x == 3) // a comment\n"
        '&& cel.bind(s, device.driver, (s).matches("^gpu") && cel.bind(t, s, t.matches("com$")))'
    )
    assert compile_uncached(expression).matches(a100)


def test_compile_error_is_raised_again_from_the_cache() -> None:
    with pytest.raises(CelCompileError):
        compile_selector("noSuchVar2")
    with pytest.raises(CelCompileError):
        compile_selector("noSuchVar2")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("device.driver", "must evaluate to bool, got str"),
        ('device.attributes["gpu.example.com"].index', "must evaluate to bool, got int"),
        ('quantity("1")', "must evaluate to bool, got Quantity"),
        ("device.driver + 1 == 2", "string \\+ int"),
        ("1 / 0 == 1", "division by zero"),
        ("[1][2] == 1", "index out of bounds"),
    ],
)
def test_runtime_errors(expression: str, message: str, a100: DeviceView) -> None:
    selector = compile_selector(expression)
    with pytest.raises(CelRuntimeError, match=message):
        selector.matches(a100)


def test_error_hierarchy() -> None:
    assert issubclass(CelCostLimitError, CelRuntimeError)
    assert issubclass(CelRuntimeError, CelError)
    assert issubclass(CelCompileError, CelError)
    assert not issubclass(CelCompileError, CelRuntimeError)


# --------------------------------------------------------------------------- cost


def literal(n: int) -> str:
    return "[" + ",".join("1" for _ in range(n)) + "]"


def test_cost_bomb_is_refused_quickly(a100: DeviceView) -> None:
    # 10^9 iterations: the library alone would run for minutes.
    bomb = f"{literal(1000)}.all(x, {literal(1000)}.all(y, {literal(1000)}.all(z, x + y + z >= 0)))"
    selector = compile_selector(bomb)  # compiles: the limit applies to evaluation
    assert selector.estimated_cost > COST_LIMIT
    program = selector._program = NeverRun()
    with pytest.raises(CelCostLimitError, match="cost limit exceeded"):
        selector.matches(a100)
    assert program.runs == 0  # refused before the library evaluates anything


def test_list_doubling_with_bind_is_refused(a100: DeviceView) -> None:
    doubling = "cel.bind(a0, " + literal(100) + ", "
    for i in range(1, 30):
        doubling += f"cel.bind(a{i}, a{i - 1} + a{i - 1}, "
    doubling += "size(a29) > 0" + ")" * 30
    with pytest.raises(CelCostLimitError):
        compile_selector(doubling).matches(a100)


def test_bounded_comprehensions_run(a100: DeviceView) -> None:
    fine = f"{literal(100)}.all(x, {literal(100)}.exists(y, y == x))"
    selector = compile_selector(fine)
    assert selector.estimated_cost <= COST_LIMIT
    assert selector.matches(a100)
    assert matches('device.attributes.all(d, device.attributes[d].all(k, k != ""))', a100)


# --------------------------------------------------------------------------- cache


def test_compile_cache_returns_the_same_object() -> None:
    text = 'device.driver == "cache.example.com"'
    first = compile_selector(text)
    assert isinstance(first, Selector)
    assert compile_selector(text) is first
    assert compile_selector(text + " ") is not first
    assert first.expression == text


def test_one_selector_many_devices_and_one_device_many_selectors(a100: DeviceView) -> None:
    selector = compile_selector('device.attributes["gpu.example.com"].model == "a100"')
    h100 = view(GPU, {"name": "gpu-2", "attributes": {"model": {"string": "h100"}}})
    assert [selector.matches(d) for d in (a100, h100, a100)] == [True, False, True]
    assert matches('size(device.attributes["one.example.com"]) == 0', a100)
    assert matches('size(device.attributes["two.example.com"]) == 0', a100)
    assert matches('device.attributes["gpu.example.com"].model == "a100"', a100)


# --------------------------------------------------------------------------- the fast path

FAST = [
    'device.driver == "gpu.example.com"',
    "'gpu.example.com' == device.driver",
    'device.attributes["gpu.example.com"].model == "a100"',
    "device.attributes['gpu.example.com'].index == 1",
    'device.attributes["gpu.example.com"].exclusiveMode == true',
    'device.attributes["resource.kubernetes.io"].numaNode == 0',
    'device.attributes["gpu.example.com"].fw == "1.2.3"',  # a version: CEL decides
    'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a100"',
    'device.attributes["gpu.example.com"].nope == "x" && device.driver == "nic.example.com"',
    'device.attributes["other.example.com"].model == "a100"',
    'device.driver == "a&&b"',  # one comparison: the parsed tree knows "&&" is in the literal
]


def _outcome(selector: Any, device: DeviceView) -> Any:
    try:
        return selector.matches(device)
    except CelRuntimeError:
        return "error"


@pytest.mark.parametrize("expression", FAST)
def test_the_fast_path_answers_as_cel_does(expression: str) -> None:
    devices = [
        view(GPU, A100),
        view(GPU, BARE),
        view(NIC, BARE),
        view(GPU, {"name": "x", "attributes": {"model": {"int": 3}, "index": {"string": "1"}}}),
        view(GPU, {"name": "y", "attributes": {"fw": {"version": "1.2.3"}, "index": {"int": 1}}}),
    ]
    fast = compile_uncached(expression)
    plain = compile_uncached(expression)
    plain._fast = None
    assert fast._fast is not None
    for device in devices:
        assert _outcome(fast, device) == _outcome(plain, device), device


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "a" || device.driver == "b"',
        '(device.driver == "a")',
        'device.attributes["d"].x == 1.5',
        '!(device.driver == "a")',
    ],
)
def test_other_expressions_have_no_fast_path(expression: str) -> None:
    assert compile_uncached(expression)._fast is None
