"""Exponential back-off with jitter, for re-lists, re-watches and failed reconciles (pure).

``Backoff.next()`` gives the next delay: ``base * factor**n`` capped at ``cap``, then scaled by
a random factor in ``[1 - jitter, 1]`` (so many controllers do not retry in step); ``reset()``
after a success. The random source is injected, so tests get fixed delays. No clock, no sleep:
the caller waits.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays that double (``factor``) from ``base`` up to ``cap`` seconds."""

    base: float = 0.5
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    uniform: Callable[[], float] = field(default=random.random, repr=False)
    failures: int = 0

    def next(self) -> float:
        """The delay before the next try; counts a failure."""
        raw = min(self.cap, self.base * self.factor ** min(self.failures, 64))
        self.failures += 1
        return raw * (1.0 - self.jitter * self.uniform())

    def reset(self) -> None:
        """After a success: the next failure waits ``base`` again."""
        self.failures = 0
