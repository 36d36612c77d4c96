"""The loop's passes and ``status.json``: a pass after which events already wait leaves the
write to the pass that follows, over the in-memory kernel (no root).

A burst of link events someone else causes would otherwise cost one atomic write (two fsyncs)
per pass, and a metadata change arriving meanwhile would queue behind them.
"""

import concurrent.futures
import json
import selectors
import socket

import pytest

from kvdev.guest.api.bridge import Ask
from kvdev.guest.loop import _Loop
from kvdev.guest.reconciler import STATUS_FILE, Reconciler
from memlab import example_config, example_kernel


class Events:
    """A waitable that is readable while a byte waits in it (as a netlink socket with events)."""

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)  # noqa: FBT003 - stdlib signature

    def fileno(self) -> int:
        return self.reader.fileno()

    def drain(self) -> int:
        try:
            return len(self.reader.recv(4096))
        except BlockingIOError:
            return 0

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


@pytest.fixture
def lab(tmp_path):
    cfg = example_config(tmp_path)
    the_loop = _Loop(Reconciler(cfg, example_kernel(), scan_devices=tuple), None)
    events = Events()
    the_loop.selector.register(events.fileno(), selectors.EVENT_READ, ("netlink", events))
    try:
        yield the_loop, events, cfg.state_dir / STATUS_FILE
    finally:
        the_loop.close()
        events.close()


def test_with_events_waiting_the_next_pass_writes_the_status(lab):
    the_loop, events, path = lab
    events.writer.send(b"x")  # link events already wait when the pass ends
    first = the_loop._pass(None, "start")
    assert first.results  # it configured the example
    assert not path.exists()
    events.drain()
    second = the_loop._pass(first, "metadata")
    saved = json.loads(path.read_text())
    assert saved["counts"] == second.status.counts


def test_stopping_writes_what_a_pass_left_to_the_next(lab):
    the_loop, events, path = lab
    events.writer.send(b"x")
    outcome = the_loop._pass(None, "start")
    assert not path.exists()
    the_loop.reconciler.save_status()  # what run() does when it stops
    assert json.loads(path.read_text())["converged"] == outcome.status.converged


def test_api_requests_alone_do_not_hold_the_write(lab):
    the_loop, _, path = lab
    api = Events()  # an API request waiting makes no pass: the write cannot wait for one
    the_loop.selector.register(api.fileno(), selectors.EVENT_READ, ("api", api))
    try:
        api.writer.send(b"x")
        the_loop._pass(None, "start")
        assert path.exists()
    finally:
        the_loop.selector.unregister(api.fileno())
        api.close()


def test_a_pass_answering_an_api_reconcile_writes_before_it_answers(lab):
    """Its asker may read ``status.json`` once answered (CI's output-bounds test did, and saw
    the state before the pass while the claims it had just written still raised file events)."""
    the_loop, events, path = lab
    events.writer.send(b"x")  # events wait when the pass ends, as file events do after a write
    ask = Ask("reconcile", concurrent.futures.Future())
    the_loop.asks.append(ask)
    outcome = the_loop._answer(None)
    assert ask.answer.result(timeout=0)["counts"] == outcome.status.counts
    assert json.loads(path.read_text())["counts"] == outcome.status.counts
    assert the_loop.answering is False
