"""guest.daemon's scheduling helpers with hand-built outcomes: retries, verify passes, timeouts.

Regressions (issue 25 "First", issue 23 §5): one streak counted every pass that changed
something, so a metadata-driven pass during a backoff that link events had started was not
verified (and doubled the backoff), and a metadata storm logged "links keep changing back" on
every pass. Each cause now has its own streak, the clock is given (no sleeps), and the warning
names the cause, a bounded number of times.
"""

import logging
import time

import pytest

from kvdev.guest.core import steps as s
from kvdev.guest.core.planning import Plan
from kvdev.guest.core.status import Status
from kvdev.guest.loop import _Clock, _schedule, _Streak
from kvdev.guest.loop import _timeout as timeout
from kvdev.guest.reconciler import RETRY_FIRST, RETRY_MAX, VERIFY_PASSES, Outcome

STEP = s.SetUp(3, "eth1", "c/r/d/p/vf-0", "a managed link is up")
OK = s.StepResult(STEP, ok=True)
BUSY = s.StepResult(STEP, ok=False, error="busy", retryable=True)
INVALID = s.StepResult(STEP, ok=False, error="invalid", retryable=False)


def outcome(*results, failed=False, new_metadata=False):
    status, plan = Status(1, (), (), ()), Plan((), (), ())
    return Outcome(status, plan, list(results), failed=failed, new_metadata=new_metadata)


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
    assert (clock.retry_delay, clock.drift.passes) == (0.5, 0)


def test_a_failed_pass_is_retried_later_not_verified():
    clock = _Clock(drift=_Streak(passes=2))
    dirty, before, after = scheduled(clock, outcome(failed=True))
    assert dirty is False
    assert before + RETRY_FIRST <= clock.retry_at <= after + RETRY_FIRST
    assert (clock.retry_delay, clock.drift.passes) == (0.5, 2)


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
    assert (clock.drift.passes, clock.drift.at, clock.drift.delay) == (2, None, RETRY_FIRST)
    assert _schedule(changed, clock, now=100.0) is False
    assert (clock.drift.passes, clock.drift.at, clock.drift.delay) == (3, 100.25, 0.5)
    assert _schedule(changed, clock, now=200.0) is False
    assert (clock.drift.passes, clock.drift.at, clock.drift.delay) == (4, 200.5, 1.0)
    assert clock.retry_at is None  # no failure: no retry


def test_a_quiet_pass_resets_the_backoff():
    drift = _Streak(passes=5, at=123.0, delay=16.0)
    clock = _Clock(retry_delay=16.0, drift=drift, ping_at=7.0)
    assert _schedule(outcome(), clock) is False
    assert (clock.drift.passes, clock.drift.delay, clock.retry_delay) == (
        0,
        RETRY_FIRST,
        RETRY_FIRST,
    )
    assert (clock.drift.at, clock.ping_at) == (123.0, 7.0)  # a pending pass stays due


def test_after_a_quiet_pass_changes_are_verified_again():
    clock = _Clock()
    for _ in range(VERIFY_PASSES):
        _schedule(outcome(OK), clock)
    _schedule(outcome(), clock)
    assert _schedule(outcome(OK), clock) is True
    assert clock.drift.passes == 1


def test_a_retry_does_not_count_as_a_busy_pass():
    clock = _Clock(drift=_Streak(passes=1))
    _schedule(outcome(OK, BUSY), clock)
    assert clock.drift.passes == 1
    assert _schedule(outcome(OK), clock) is True


def test_a_permanent_failure_alone_waits_for_new_input():
    clock = _Clock()
    assert _schedule(outcome(INVALID), clock) is False
    assert (clock.retry_at, clock.drift.passes, clock.drift.at) == (None, 0, None)


# --------------------------------------------------------------- one streak per cause


def test_new_metadata_during_a_link_drift_backoff_is_verified_at_once():
    clock = _Clock()
    for k in range(VERIFY_PASSES + 2):  # the links keep changing back: backing off
        _schedule(outcome(OK), clock, now=float(k))
    backoff = clock.drift.at
    assert backoff is not None
    # new metadata arrives: its pass is verified by the next one at once, the drift's
    # pending pass and its delay stay as they were (link events started them, not metadata)
    assert _schedule(outcome(OK, new_metadata=True), clock, now=10.0) is True
    assert _schedule(outcome(OK, new_metadata=True), clock, now=10.1) is True
    assert (clock.drift.at, clock.drift.passes) == (backoff, VERIFY_PASSES + 2)
    assert clock.metadata.passes == 2


def test_links_changed_back_during_a_metadata_storm_are_verified_at_once():
    clock = _Clock()
    for k in range(VERIFY_PASSES + 2):
        _schedule(outcome(OK, new_metadata=True), clock, now=float(k))
    assert clock.metadata.at is not None
    assert _schedule(outcome(OK), clock, now=10.0) is True  # a link changed back: verify now
    assert (clock.drift.passes, clock.metadata.passes) == (1, 0)


def test_a_metadata_storm_says_so_a_bounded_number_of_times(caplog):
    clock = _Clock()
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        for k in range(90):  # 90 new versions of the metadata, each applied
            _schedule(outcome(OK, new_metadata=True), clock, now=k / 9)
    lines = [r.getMessage() for r in caplog.records]
    assert not [m for m in lines if "links keep changing back" in m]
    assert lines
    assert all(m.startswith("the metadata keeps changing: ") for m in lines)
    assert len(lines) <= 8  # at 3, 4, 8, 16, 32, 64 passes
    assert clock.drift.passes == 0


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
    for cause in ("drift", "metadata"):  # a deferred verifying pass is a deadline too
        clock = _Clock(ping_at=ping_at, **{cause: _Streak(passes=3, at=retry_at)})
        assert timeout(dirty, clock, now) == expected


def test_due_clears_what_is_due_and_only_that():
    clock = _Clock(retry_at=5.0, drift=_Streak(passes=3, at=3.0), metadata=_Streak(at=9.0))
    assert clock.due(4.0) is True
    assert (clock.retry_at, clock.drift.at, clock.metadata.at) == (5.0, None, 9.0)
    assert clock.due(4.5) is False
    assert clock.due(9.0) is True
    assert (clock.retry_at, clock.metadata.at) == (None, None)
