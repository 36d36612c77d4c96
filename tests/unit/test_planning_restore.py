"""An interrupted trade of names: planning gives a link its old name back, the journal's logic.

Regression: an agent killed while two links traded names left one on ``kvtmp<ifindex>``; when
its device then stopped asking for a name, the temporary name stayed for good.
"""

from test_planning import bound, described, fake_apply, hint, link

from kvdev.guest.adapters.state import RENAMES, Store
from kvdev.guest.core import journals
from kvdev.guest.core import steps as s
from kvdev.guest.core.matching import Matching
from kvdev.guest.core.observed import NetState
from kvdev.guest.core.planning import plan, temp_name


def renamed(p):
    return [(x.ifindex, x.new_name) for x in p.steps if isinstance(x, s.Rename)]


def test_a_link_left_on_its_temporary_name_gets_its_old_name_back():
    a = bound(described("vf-1"), 3, "kvtmp3", hint("vf-1", mtu=1500))  # no name wanted now
    state = NetState((link(3, "kvtmp3", up=False), link(4, "eth2", up=True)))
    p = plan(Matching((a,), ()), state, restore={3: "eth1"})
    assert renamed(p) == [(3, "eth1")]
    after = fake_apply(state, p.steps)
    assert after.link(3).ifname == "eth1"
    assert after.link(3).up
    assert plan(Matching((a,), ()), after, restore={}).empty
    assert renamed(plan(Matching((a,), ()), state)) == []  # without the journal: nothing known


def test_a_swap_cut_short_gives_the_stuck_link_the_name_the_other_freed():
    # eth1 <-> eth2 was under way: link 3 finished (now eth2), link 4 was left on kvtmp4
    a = bound(described("vf-1"), 3, "eth2", hint("vf-1", mtu=1500))
    b = bound(described("vf-2"), 4, "kvtmp4", hint("vf-2", mtu=1500))
    state = NetState((link(3, "eth2", up=False), link(4, "kvtmp4", up=False)))
    p = plan(Matching((a, b), ()), state, restore={3: "eth1", 4: "eth2"})
    assert renamed(p) == [(4, "eth1")]
    after = fake_apply(state, p.steps)
    assert {lk.ifname for lk in after.links} == {"eth1", "eth2"}
    assert all(lk.up for lk in after.links)


def test_a_name_the_hints_ask_for_wins_over_the_journal():
    a = bound(described("vf-1"), 3, "kvtmp3", hint("vf-1", interfaceName="data0"))
    state = NetState((link(3, "kvtmp3", up=False),))
    assert renamed(plan(Matching((a,), ()), state, restore={3: "eth1"})) == [(3, "data0")]


def test_an_old_name_taken_meanwhile_is_never_forced():
    a = bound(described("vf-1"), 3, "kvtmp3", hint("vf-1", mtu=1500))
    state = NetState((link(3, "kvtmp3", up=False), link(9, "eth1", up=True)))
    p = plan(Matching((a,), ()), state, restore={3: "eth1"})
    assert renamed(p) == []


def test_the_journal_records_names_before_temporary_renames_and_prunes_finished_ones():
    steps = [
        s.Rename(3, "eth1", "d", "trade", temp_name(3)),
        s.Rename(4, "eth2", "d", "trade", temp_name(4)),
        s.Rename(3, temp_name(3), "d", "final", "eth2"),
    ]
    journal = journals.record_renames({4: "first"}, steps)
    assert journal == {3: "eth1", 4: "first"}
    state = NetState((link(3, "eth2"), link(4, temp_name(4))))
    assert journals.prune_renames(journal, state) == journal  # unfinished: every freed name counts
    assert journals.prune_renames(journal, NetState((link(3, "eth2"), link(4, "eth1")))) == {}
    assert journals.prune_renames(journal, NetState()) == {}


def test_the_journal_file_round_trips_and_ignores_garbage(tmp_path):
    Store(tmp_path).put(RENAMES, {3: "eth1", 12: "data0"})
    assert Store(tmp_path).get(RENAMES) == {3: "eth1", 12: "data0"}
    Store(tmp_path).put(RENAMES, {})
    assert not (tmp_path / RENAMES.name).exists()
    assert Store(tmp_path).get(RENAMES) == {}
    (tmp_path / RENAMES.name).write_text('{"3": "eth1", "x": "y", "4": 5, "\u00b2": "z"}')
    assert Store(tmp_path).get(RENAMES) == {3: "eth1"}
    (tmp_path / RENAMES.name).write_text("[1, 2")
    assert Store(tmp_path).get(RENAMES) == {}
