"""CEL selector micro benchmark: time per evaluation of typical DRA device selectors.

Run: ``.venv/bin/python tests/bench/bench_cel.py``. Not collected by pytest (``bench_``
prefix). Three numbers per selector, each the best of several rounds:

* ``warm``: ``Selector.matches`` on a DeviceView that was already evaluated once (the
  converted CEL context is cached on the view): the per-evaluation cost inside a search;
* ``cold``: ``matches`` on a fresh DeviceView each time (includes converting the device into
  a CEL context, the "context set-up" the issue's ~24 us figure includes);
* ``view+cold``: additionally builds the view with ``device_view`` from the ``Device`` model.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kvdev.host.allocation import cel as cel_module
from kvdev.host.allocation.cel import DeviceView, compile_selector, device_view
from kvdev.host.k8s.resource import Device

DRIVER = "gpu.example.com"
DEVICE = Device.model_validate(
    {
        "name": "gpu-1",
        "attributes": {
            "model": {"string": "a100"},
            "index": {"int": 1},
            "driverVersion": {"version": "1.2.3"},
            "resource.kubernetes.io/numaNode": {"int": 0},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "40Gi"}},
    }
)
SELECTORS = (
    'device.driver == "gpu.example.com"',
    'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a100"',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))',
)
ROUNDS, N = 5, 20_000


def best_us(fn: Callable[[], object], n: int = N) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main() -> None:
    view = device_view(DRIVER, DEVICE)
    print(f"{'selector':<92} {'warm':>8} {'cold':>8} {'view+cold':>10}  (us/eval)")
    for text in SELECTORS:
        selector = compile_selector(text)
        assert selector.matches(view)
        warm = best_us(lambda s=selector: s.matches(view))

        def cold(s=selector) -> bool:  # type: ignore[no-untyped-def]
            fresh = DeviceView(
                view.driver, view.attributes, view.capacity, allow_multiple_allocations=False
            )
            return s.matches(fresh)

        def full(s=selector) -> bool:  # type: ignore[no-untyped-def]
            return s.matches(device_view(DRIVER, DEVICE))

        print(f"{text:<92} {warm:8.2f} {best_us(cold, N // 4):8.2f} {best_us(full, N // 4):10.2f}")
    start = time.perf_counter()
    for i in range(200):
        cel_module.compile_uncached(f'device.attributes["gpu.example.com"].index == {i}')
    print(f"compile (uncached, incl. analysis): {(time.perf_counter() - start) / 200 * 1e6:.1f} us")


if __name__ == "__main__":
    main()
