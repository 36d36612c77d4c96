"""guest.daemon's scheduling helpers with hand-built outcomes: retries, verify passes, timeouts."""

import time

import pytest

from kvdev.guest.core import steps as s
from kvdev.guest.core.planning import Plan
from kvdev.guest.core.status import Status
from kvdev.guest.loop import _Clock, _schedule
from kvdev.guest.loop import _timeout as timeout
from kvdev.guest.reconciler import RETRY_FIRST, RETRY_MAX, VERIFY_PASSES, Outcome

STEP = s.SetUp(3, "eth1", "c/r/d/p/vf-0", "a managed link is up")
OK = s.StepResult(STEP, ok=True)
BUSY = s.StepResult(STEP, ok=False, error="busy", retryable=True)
INVALID = s.StepResult(STEP, ok=False, error="invalid", retryable=False)


def outcome(*results, failed=False):
    return Outcome(Status(1, (), (), ()), Plan((), (), ()), list(results), failed=failed)


def test_constants():
    assert (RETRY_FIRST, RETRY_MAX, VERIFY_PASSES) == (0.25, 30.0, 3)


@pytest.mark.parametrize(
    ("results", "changed", "retry"),
    [
        ((), False, False),
        ((OK,), True, False),
        ((INVALID,), False, False),
        ((OK, BUSY), True, True),
        ((INVALID, BUSY), False, True),
        ((s.StepResult(STEP, ok=True, retryable=True),), True, False),
    ],
)
def test_outcome_changed_and_retry(results, changed, retry):
    assert outcome(*results, failed=True).retry is True
    o = outcome(*results)
    assert (o.changed, o.retry) == (changed, retry)


def scheduled(clock, o):
    """``_schedule``'s verdict, with the monotonic clock read just before and just after."""
    before = time.monotonic()
    dirty = _schedule(o, clock)
    after = time.monotonic()
    return dirty, before, after


def test_retryable_failure_sets_retry_at_and_doubles_the_delay():
    clock = _Clock()
    dirty, before, after = scheduled(clock, outcome(OK, BUSY))
    assert dirty is False
    assert before + 0.25 <= clock.retry_at <= after + 0.25
    assert (clock.retry_delay, clock.busy_passes) == (0.5, 0)


def test_a_failed_pass_is_retried_later_not_verified():
    clock = _Clock(busy_passes=2)
    dirty, before, after = scheduled(clock, outcome(failed=True))
    assert dirty is False
    assert before + RETRY_FIRST <= clock.retry_at <= after + RETRY_FIRST
    assert (clock.retry_delay, clock.busy_passes) == (0.5, 2)


def test_retry_delay_doubles_up_to_the_maximum():
    clock = _Clock()
    used = []
    for _ in range(10):
        delay = clock.retry_delay
        dirty, before, after = scheduled(clock, outcome(BUSY))
        assert dirty is False
        assert before + delay <= clock.retry_at <= after + delay
        used.append(delay)
    assert used == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert clock.retry_delay == RETRY_MAX


def test_changing_passes_verify_then_back_off():
    clock = _Clock()
    changed = outcome(OK)
    verdicts = [_schedule(changed, clock) for _ in range(VERIFY_PASSES - 1)]
    assert verdicts == [True, True]
    assert (clock.busy_passes, clock.retry_at, clock.retry_delay) == (2, None, RETRY_FIRST)
    dirty, before, after = scheduled(clock, changed)
    assert dirty is False
    assert clock.busy_passes == 3
    assert before + RETRY_FIRST <= clock.retry_at <= after + RETRY_FIRST
    assert clock.retry_delay == 0.5
    dirty, before, after = scheduled(clock, changed)
    assert (dirty, clock.busy_passes, clock.retry_delay) == (False, 4, 1.0)
    assert before + 0.5 <= clock.retry_at <= after + 0.5


def test_a_quiet_pass_resets_the_backoff():
    clock = _Clock(retry_at=123.0, retry_delay=16.0, busy_passes=5, ping_at=7.0)
    assert _schedule(outcome(), clock) is False
    assert (clock.busy_passes, clock.retry_delay) == (0, RETRY_FIRST)
    assert (clock.retry_at, clock.ping_at) == (123.0, 7.0)  # a pending retry stays due


def test_after_a_quiet_pass_changes_are_verified_again():
    clock = _Clock()
    for _ in range(VERIFY_PASSES):
        _schedule(outcome(OK), clock)
    _schedule(outcome(), clock)
    assert _schedule(outcome(OK), clock) is True
    assert clock.busy_passes == 1


def test_a_retry_does_not_count_as_a_busy_pass():
    clock = _Clock(busy_passes=1)
    _schedule(outcome(OK, BUSY), clock)
    assert clock.busy_passes == 1
    assert _schedule(outcome(OK), clock) is True


def test_a_permanent_failure_alone_waits_for_new_input():
    clock = _Clock()
    assert _schedule(outcome(INVALID), clock) is False
    assert (clock.retry_at, clock.busy_passes) == (None, 0)


@pytest.mark.parametrize(
    ("dirty", "retry_at", "ping_at", "now", "expected"),
    [
        (True, None, None, 100.0, 0.0),
        (True, 150.0, 120.0, 100.0, 0.0),
        (False, None, None, 100.0, None),
        (False, 102.5, None, 100.0, 2.5),
        (False, None, 110.0, 100.0, 10.0),
        (False, 130.0, 110.0, 100.0, 10.0),
        (False, 104.0, 110.0, 100.0, 4.0),
        (False, 90.0, 110.0, 100.0, 0.0),
        (False, None, 100.0, 100.0, 0.0),
    ],
)
def test_timeout(dirty, retry_at, ping_at, now, expected):
    assert timeout(dirty, _Clock(retry_at=retry_at, ping_at=ping_at), now) == expected
