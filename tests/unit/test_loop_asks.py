"""The loop answering the API's asks (plan, reconcile), over the in-memory kernel.

Regression (robustness probe, finding 1): a client that asked for ``GET /v1/plan`` (or root's
``POST /v1/reconcile``) and hung up before the answer left a cancelled future behind; the loop
then set its result, ``InvalidStateError`` escaped and the agent exited.
"""

import concurrent.futures

import pytest

from kvdev.guest.api.bridge import Ask
from kvdev.guest.loop import _Loop
from kvdev.guest.reconciler import Reconciler
from memlab import example_config, example_kernel


@pytest.fixture
def loop(tmp_path):
    kernel = example_kernel()
    the_loop = _Loop(Reconciler(example_config(tmp_path), kernel, scan_devices=tuple), None)
    try:
        yield the_loop, kernel
    finally:
        the_loop.close()


def ask(kind):
    return Ask(kind, concurrent.futures.Future())


@pytest.mark.parametrize("kind", ["plan", "reconcile"])
def test_an_ask_whose_client_hung_up_is_dropped_and_the_loop_goes_on(loop, kind):
    the_loop, kernel = loop
    outcome = the_loop._pass(None, "start")
    gone, waiting = ask(kind), ask(kind)
    assert gone.answer.cancel()  # what the server does when the client hangs up
    the_loop.asks = [gone, waiting]
    reads = kernel.reads
    the_loop._answer(outcome)  # raised InvalidStateError before the fix
    assert gone.answer.cancelled()
    assert waiting.answer.result()["kind"] == ("Plan" if kind == "plan" else "AgentStatus")
    assert kernel.reads == reads + 1  # one fresh observation, for the client still there


def test_a_running_ask_can_no_longer_be_cancelled(loop):
    the_loop, _ = loop
    outcome = the_loop._pass(None, "start")
    a = ask("plan")
    the_loop.asks = [a]
    the_loop._answer(outcome)
    assert not a.answer.cancel()  # answered: a late hang-up changes nothing
    assert a.answer.result()["kind"] == "Plan"


def test_many_asks_cost_one_plan_and_one_pass(loop):
    the_loop, kernel = loop
    outcome = the_loop._pass(None, "start")
    plans = [ask("plan") for _ in range(50)]
    passes = [ask("reconcile") for _ in range(50)]
    the_loop.asks = [*plans, *passes]
    reads, done = kernel.reads, the_loop.reconciler.passes
    the_loop._answer(outcome)
    assert the_loop.reconciler.passes == done + 1
    assert kernel.reads == reads + 2  # one observation for the plan, one for the pass
    assert {a.answer.result()["kind"] for a in plans} == {"Plan"}
    assert {a.answer.result()["kind"] for a in passes} == {"AgentStatus"}


def test_an_unknown_ask_is_answered_with_an_error(loop):
    the_loop, _ = loop
    outcome = the_loop._pass(None, "start")
    a = ask("dance")
    the_loop.asks = [a]
    the_loop._answer(outcome)
    with pytest.raises(Exception, match="cannot answer 'dance'"):
        a.answer.result()


def test_a_pass_logs_each_device_configured_once_with_its_message_id(loop, caplog):
    from kvdev.guest.core.alerts import CONFIGURED  # noqa: PLC0415

    the_loop, _ = loop
    with caplog.at_level("INFO", logger="kvdev.agent"):
        outcome = the_loop._pass(None, "start")
        the_loop._pass(outcome, "verify")  # nothing changed: nothing said again
    said = [r for r in caplog.records if getattr(r, "MESSAGE_ID", None) == CONFIGURED]
    configured = [d.ref for d in outcome.status.devices if d.phase.value == "Configured"]
    assert configured
    assert [r.getMessage() for r in said] == [f"{ref}: configured" for ref in configured]
    assert [(r.DEVICE, r.CLAIM) for r in said] == [(ref, ref.split("/")[0]) for ref in configured]
