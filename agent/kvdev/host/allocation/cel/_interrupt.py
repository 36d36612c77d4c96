"""Stopping an evaluation from inside: the check the caller installs, and its verdict.

The library has no cost budget and no interruption hook: ``Program.execute`` holds the GIL
and runs comprehensions in Rust. What it does call back is ours: every function
:mod:`._functions` registers (``matches`` included, since the compiler routes it to our
RE2 function). Each of those calls :func:`checkpoint` first, which runs the check the caller
installed with :func:`interruptible` for this thread (a deadline, a cancel flag another
thread sets, a step count). When the check raises, the exception is kept and every later
checkpoint of the same evaluation fails at once (CEL's ``||``/``&&`` can absorb one error, so
the rest of the evaluation only unwinds), and the evaluator raises the kept exception, the
caller's own, when ``execute`` returns. Between two checkpoints the library runs at most what
the static cost estimate allows (``COST_LIMIT`` units), so an evaluation stops within that
many steps of its check firing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Check = Callable[[], None]


@dataclass(slots=True)
class _Guard:
    check: Check
    raised: BaseException | None = field(default=None)


_GUARD: contextvars.ContextVar[_Guard | None] = contextvars.ContextVar("kvdev_cel_guard")


@contextlib.contextmanager
def interruptible(check: Check) -> Iterator[None]:
    """Evaluations in this context call ``check`` at every checkpoint; what it raises stops them.

    ``check`` returns normally to let the evaluation go on; whatever it raises reaches the
    caller of :meth:`Selector.matches` / :meth:`Selector.value` unchanged.
    """
    token = _GUARD.set(_Guard(check))
    try:
        yield
    finally:
        _GUARD.reset(token)


def checkpoint() -> None:
    """Run the installed check (module docstring); raise if it did, now or earlier."""
    guard = _GUARD.get(None)
    if guard is None:
        return
    if guard.raised is not None:
        raise RuntimeError("evaluation interrupted")
    try:
        guard.check()
    except BaseException as exc:
        guard.raised = exc
        raise


def take_interruption() -> BaseException | None:
    """The exception a check raised during the evaluation that just ended (cleared)."""
    guard = _GUARD.get(None)
    if guard is None or guard.raised is None:
        return None
    raised, guard.raised = guard.raised, None
    return raised
