"""core/journals: what the rename, address and altname journals hold, and which steps wait.

Pure values in and out; the passes that write the journals before their steps are in
``test_reconciler``, ``test_reconciler_conditions`` and ``test_planning_altnames``.
"""

from test_planning import link

from kvdev.guest.core import journals
from kvdev.guest.core import steps as s
from kvdev.guest.core.observed import KVDEV_PROTO, Address, NetState
from kvdev.guest.core.planning import temp_name
from kvdev.guest.core.steps import StepResult


def ok(step):
    return StepResult(step, ok=True)


def test_prune_gives_the_journals_a_pass_acts_on():
    state = NetState(
        (link(3, temp_name(3)), link(4, "eth2", altnames=("a",))),
        (Address(4, "10.1.0.5/24", None), Address(4, "10.1.0.6/24", KVDEV_PROTO)),
    )
    kept = journals.prune(
        {3: "eth1"},
        {4: frozenset({"10.1.0.5/24", "10.1.0.6/24", "10.1.0.7/24"})},
        {4: frozenset({"a", "b"}), 9: frozenset({"c"})},
        state,
    )
    assert kept == journals.InForce(
        {3: "eth1"}, {4: frozenset({"10.1.0.5/24"})}, {4: frozenset({"a"})}
    )


def test_the_first_name_recorded_wins_and_only_moves_to_temporary_names_count():
    steps = [
        s.Rename(3, "eth1", "d", "trade", temp_name(3)),
        s.Rename(5, "eth5", "d", "plain", "data5"),
        s.Rename(3, temp_name(3), "d", "again", temp_name(3)),
    ]
    assert journals.record_renames({}, steps) == {3: "eth1"}


def test_a_trade_held_for_its_journal_holds_its_renames_and_link_downs_only():
    rename = s.Rename(3, "eth1", "d", "trade", temp_name(3))
    down = s.SetDown(3, "eth1", "d", "before a rename")
    mtu = s.SetMtu(3, "eth1", "d", "r", 9000)
    held = journals.hold_renames([down, rename, mtu], "cannot save X: EROFS", retryable=False)
    assert [r.step for r in held] == [down, rename]
    assert {r.error for r in held} == {
        "not done: cannot save X: EROFS; no link is renamed without its journal"
    }
    assert not any(r.ok or r.retryable for r in held)


def test_the_address_journal_records_kvdevs_adds_and_drops_its_removals():
    mine = s.AddAddress(1, "eth1", "d", "r", "10.1.0.9/24", protocol=KVDEV_PROTO)
    other = s.AddAddress(1, "eth1", "d", "r", "10.1.0.8/24", protocol=None)
    gone = s.RemoveAddress(1, "eth1", "d", "r", "10.1.0.5/24")
    failed = s.AddAddress(2, "eth2", "d", "r", "10.2.0.1/24", protocol=KVDEV_PROTO)
    journal = {1: frozenset({"10.1.0.5/24"})}
    results = [ok(mine), ok(other), ok(gone), StepResult(failed, ok=False)]
    assert journals.record_addresses(journal, results) == {1: frozenset({"10.1.0.9/24"})}


def test_a_journaled_address_without_a_protocol_is_given_kvdevs():
    bare = Address(1, "10.1.0.9/24", None)
    admin = Address(1, "10.9.9.9/24", None)
    state = NetState((link(1, "eth1"),), (bare, admin))
    seen = journals.attribute(state, {1: frozenset({"10.1.0.9/24"})})
    assert seen.addresses == (Address(1, "10.1.0.9/24", KVDEV_PROTO), admin)
    assert journals.attribute(state, {}) is state


def test_an_altname_past_the_bound_or_without_its_journal_waits():
    full = {3: frozenset(f"a{i}" for i in range(journals.MAX_PER_LINK))}
    add = s.AddAltname(3, "eth1", "d", "r", "wanted")
    elsewhere = s.AddAltname(4, "eth2", "d", "r", "fine")
    journal = journals.record_altnames(full, [add, elsewhere])
    [held] = journals.hold_altnames([add, elsewhere], journal, None, retryable=True)
    assert held.step is add
    assert held.error == (
        f"not done: the altname journal holds {journals.MAX_PER_LINK} "
        "altnames kvdev added to eth1 already"
    )
    assert not held.retryable
    unsaved = journals.hold_altnames([add, elsewhere], journal, "cannot save Y", retryable=True)
    assert [r.step for r in unsaved] == [add, elsewhere]
    assert all(r.retryable for r in unsaved)
    assert unsaved[1].error == "not done: cannot save Y; no altname is added without its journal"
