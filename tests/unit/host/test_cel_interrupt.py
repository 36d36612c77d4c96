"""A CEL evaluation stops inside itself, and a constant ``matches`` pattern is compiled once.

The hostile selector: two ``all`` over a bound list of ``n`` around ``matches`` (n*n calls).
With the library's own ``matches`` each call compiled the pattern again (~25 ms for
``\\w{100}``): 76,729 calls were half an hour of CPU in one call nothing could stop. Now the
pattern is compiled once when the selector is, each call is a checkpoint, and a check (the
filter timeout's, a cancel flag any thread sets) stops the evaluation at the next one. The
bounds below are counted in checkpoints and clock readings, never in seconds.
"""

from __future__ import annotations

import threading
from itertools import count
from typing import Any

import pytest
import re2

from kvdev.host.allocation.allocator import Allocated, Clock, Failed, NodeInfo, allocate
from kvdev.host.allocation.cel import (
    COST_LIMIT,
    CelCompileError,
    _regex,
    compile_uncached,
    device_view,
    interruptible,
)
from kvdev.host.allocation.explain import explain
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice
from kvdev.host.k8s.resource import Device

DRIVER = "gpu.example.com"
VIEW = device_view(DRIVER, Device.model_validate({"name": "gpu-0"}))


def bomb(n: int, pattern: str = r"\\w{100}") -> str:
    items = ", ".join(str(i) for i in range(n))
    return f'cel.bind(l, [{items}], l.all(x, l.all(y, !device.driver.matches("{pattern}"))))'


class StopError(Exception):
    pass


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every pattern RE2 compiles from now on (the pattern cache starts empty)."""
    seen: list[str] = []
    real = re2.compile

    def counting(pattern: str, *args: Any) -> Any:
        seen.append(pattern)
        return real(pattern, *args)

    _regex._compiled.cache_clear()
    monkeypatch.setattr(_regex.re2, "compile", counting)
    return seen


def test_a_constant_pattern_is_compiled_once_when_the_selector_is(compiles: list[str]) -> None:
    selector = compile_uncached(bomb(30))
    assert compiles == [r"\w{100}"]  # at compile time, before any evaluation
    assert selector.matches(VIEW) is True  # 900 calls of matches
    assert compile_uncached('device.driver.matches("^gpu[.]")').matches(VIEW)
    assert compiles == [r"\w{100}", "^gpu[.]"]


def test_a_bad_constant_pattern_is_a_compile_error_as_upstream_reports_it() -> None:
    with pytest.raises(CelCompileError, match="invalid matches pattern"):
        compile_uncached('device.driver.matches("(")')


def test_matches_is_re2_and_finds_the_pattern_anywhere() -> None:
    assert compile_uncached('device.driver.matches("example")').matches(VIEW)
    assert compile_uncached('matches(device.driver, "^gpu")').matches(VIEW)
    assert not compile_uncached('device.driver.matches("^example")').matches(VIEW)
    assert not compile_uncached(r'device.driver.matches("\\w{100}")').matches(VIEW)


def test_a_check_stops_the_hostile_selector_at_the_next_checkpoint() -> None:
    selector = compile_uncached(bomb(277, "q"))  # 76,729 calls; upstream allows it (998,884)
    assert selector.estimated_cost <= COST_LIMIT
    calls = count(1)

    def check() -> None:
        if next(calls) > 100:
            raise StopError

    with interruptible(check), pytest.raises(StopError):
        selector.matches(VIEW)
    assert next(calls) == 102  # stopped at the 101st checkpoint: one check after it fired


def test_an_interrupted_evaluation_raises_even_where_cel_absorbs_the_error() -> None:
    # ``true || error`` is true in CEL: the kept exception is raised all the same
    selector = compile_uncached('device.driver.matches("a") || true')

    def check() -> None:
        raise StopError

    with interruptible(check), pytest.raises(StopError):
        selector.matches(VIEW)
    assert selector.matches(VIEW) is True  # outside the context nothing checks


def test_another_thread_cancels_an_evaluation_in_progress() -> None:
    selector = compile_uncached(bomb(277, "q"))
    inside, cancel = threading.Event(), threading.Event()
    checks = count(1)
    outcome: list[BaseException] = []

    def check() -> None:
        n = next(checks)
        if n == 1:
            inside.set()
            cancel.wait()  # the evaluation is inside the interpreter now
        if cancel.is_set():
            raise StopError(n)

    def run() -> None:
        with interruptible(check):
            try:
                selector.matches(VIEW)
            except StopError as e:
                outcome.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    inside.wait()
    cancel.set()
    worker.join()
    assert [e.args for e in outcome] == [(1,)]


def _objects(expression: str) -> tuple[DeviceClass, ResourceClaim, ResourceSlice]:
    cls = DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "c"},
            "spec": {},
        }
    )
    request = {"name": "r", "exactly": {"deviceClassName": "c"}}
    request["exactly"]["selectors"] = [{"cel": {"expression": expression}}]  # type: ignore[index]
    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "cl", "namespace": "ns"},
            "spec": {"devices": {"requests": [request]}},
        }
    )
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 1}
    slice_ = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {"driver": DRIVER, "pool": pool, "nodeName": "n", "devices": [{"name": "d"}]},
        }
    )
    return cls, claim, slice_


def test_the_filter_timeout_holds_inside_one_evaluation() -> None:
    """One device, one selector: the search's own checks between steps never come round."""
    cls, claim, slice_ = _objects(bomb(200, "q"))  # 40,000 calls of matches
    readings = count()
    clock = Clock(now=lambda: float(next(readings)), timeout=50)  # a second per reading
    out = allocate(NodeInfo("n", {}), [claim], classes=[cls], slices=[slice_], clock=clock)
    assert isinstance(out, Failed), out
    assert out.keyword == "filter-timeout"
    assert next(readings) < 60  # stopped ~50 readings in, not after 40,000 calls
    unlimited = allocate(NodeInfo("n", {}), [claim], classes=[cls], slices=[slice_])
    assert isinstance(unlimited, Allocated)


def test_the_explanation_pass_is_bounded_the_same_way() -> None:
    cls, claim, slice_ = _objects(bomb(200, "q"))
    readings = count()
    clock = Clock(now=lambda: float(next(readings)), timeout=50)
    [report] = explain(NodeInfo("n", {}), [claim], classes=[cls], slices=[slice_], clock=clock)
    [verdict] = report.devices
    assert verdict.reason == "selector-error"
    assert "timed out" in verdict.detail
    assert next(readings) < 60
    [unlimited] = explain(NodeInfo("n", {}), [claim], classes=[cls], slices=[slice_])
    assert unlimited.devices[0].reason != "selector-error"
