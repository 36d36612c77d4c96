"""adapters.deadline: a job that blocks costs one thread at most, and its end wakes the caller.

Jobs block on events the test controls (a stand-in for a read of a hung share, which the
integration test does for real); no sleeps. The deadline is short only so that the test does
not wait long for ``Late``; what is asserted is what happens, never how long it took.
"""

import threading

import pytest

from kvdev.guest.adapters.deadline import Deadline, Late

SHORT = 0.05  # seconds


def test_a_job_that_ends_in_time_gives_its_result_and_its_error():
    reads = Deadline(SHORT * 100)
    assert reads.run(lambda: 42) == 42
    with pytest.raises(ValueError, match="bad"):
        reads.run(lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert reads.run(lambda: "again") == "again"  # the same worker, still serving


def test_a_late_job_blocks_no_caller_and_no_second_thread_piles_up():
    woken = threading.Event()
    release = threading.Event()
    reads = Deadline(SHORT, wake=woken.set)
    assert isinstance(reads.run(release.wait), Late)
    threads = threading.active_count()
    called = []
    second = reads.run(lambda: called.append(1))
    assert isinstance(second, Late)
    assert "earlier read has not ended" in second.message
    assert called == []  # not started: the worker is still stuck in the first
    assert threading.active_count() == threads
    assert not woken.is_set()
    release.set()  # the share answers again
    assert woken.wait(60)  # only a guard: the late job's end wakes the caller
    assert reads.run(lambda: "fresh") == "fresh"  # its stale result was dropped
    assert reads.late_jobs == 1
