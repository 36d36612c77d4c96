"""A client-side token bucket, as client-go's flowcontrol rate limiter (pure, clock injected).

``TokenBucket(qps, burst)`` starts full (``burst`` tokens) and refills at ``qps`` tokens a
second up to ``burst``. ``wait()`` takes one token, sleeping first when none is left: a
request that finds the bucket empty reserves the next token (the count may go below zero),
so callers queue in order and none starves, as ``golang.org/x/time/rate`` does for client-go.
Defaults are client-go's ``rest.Config`` defaults (qps 5, burst 10). The clock and the sleep
are injected: tests count the waits without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

DEFAULT_QPS: Final = 5.0
DEFAULT_BURST: Final = 10


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` at once; ``wait()`` takes one."""

    def __init__(
        self,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0:
            msg = f"qps must be positive, not {qps}"
            raise ValueError(msg)
        if burst < 1:
            msg = f"burst must be at least 1, not {burst}"
            raise ValueError(msg)
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()
        self.waits = 0  # how many takes had to sleep
        self.waited = 0.0  # seconds slept in all

    def reserve(self) -> float:
        """Take a token now; the seconds until it is really there (0: at once)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            delay = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            if delay > 0:
                self.waits += 1
                self.waited += delay
            return delay

    def wait(self) -> float:
        """Take a token, sleeping until it is there; the seconds slept."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay
