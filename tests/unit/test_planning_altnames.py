"""The altnames kvdev added: planning removes those no longer wanted, the journal's logic.

Regression: kvdev never removed an altname it added. A valid input whose claim name differed
(invalid UTF-8 in it, decoded to U+FFFD as Go does) got the link a second altname, and when the
good file came back the stale one stayed for good; an altname wanted on another link could
never move there. Planning now removes what the altname journal says kvdev added and the
metadata no longer wants, before any AddAltname, and never an altname it did not add.
"""

import json
import logging
from dataclasses import replace

from test_planning import bound, described, fake_apply, hint, link
from test_reconciler_conditions import Disk

from kvdev.guest.adapters.state import ALTNAMES, Store
from kvdev.guest.core import journals
from kvdev.guest.core import steps as s
from kvdev.guest.core.matching import Binding, Matching, MatchState
from kvdev.guest.core.observed import NetState, Route
from kvdev.guest.core.planning import Policy, plan
from kvdev.guest.core.steps import StepResult
from kvdev.guest.reconciler import Reconciler, converge
from memlab import example_config, example_kernel

NIC1 = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"

WANTED = "vm1-devices.nics.vf-1"
STALE = "vm1---devices.nics.vf-1-b254ee6017"
USERS = "uplink-a"  # a person's (or udev's): never kvdev's to remove


def altnames_of(p):
    return [(type(x).__name__, x.ifindex, x.altname) for x in p.steps if hasattr(x, "altname")]


def test_a_stale_altname_kvdev_added_goes_before_the_wanted_one_is_added():
    state = NetState((link(3, "eth1", up=True, altnames=(STALE, USERS)),))
    matching = Matching((bound(described(), 3, "eth1"),), ())
    p = plan(matching, state, altnames={3: {STALE}})
    assert altnames_of(p) == [("RemoveAltname", 3, STALE), ("AddAltname", 3, WANTED)]
    assert p.steps[0].reason == "kvdev added it and the metadata no longer asks for it"
    after = fake_apply(state, p.steps)
    assert sorted(after.link(3).altnames) == sorted([USERS, WANTED])  # exactly these
    assert plan(matching, after, altnames={3: {WANTED}}).empty


def test_an_altname_kvdev_did_not_add_is_never_removed():
    state = NetState((link(3, "eth1", up=True, altnames=(STALE, USERS)),))
    matching = Matching((bound(described(), 3, "eth1"),), ())
    for journal in (None, {}, {3: set()}, {4: {STALE}}):  # not recorded on this link
        assert altnames_of(plan(matching, state, altnames=journal)) == [("AddAltname", 3, WANTED)]


def test_the_wanted_altname_kvdev_added_stays():
    state = NetState((link(3, "eth1", up=True, altnames=(WANTED,)),))
    assert plan(Matching((bound(described(), 3, "eth1"),), ()), state, altnames={3: {WANTED}}).empty


def test_a_recorded_altname_the_link_no_longer_has_is_not_removed_again():
    state = NetState((link(3, "eth1", up=True, altnames=(WANTED,)),))
    matching = Matching((bound(described(), 3, "eth1"),), ())
    assert plan(matching, state, altnames={3: {WANTED, STALE}}).empty


def test_a_device_that_leaves_the_metadata_keeps_its_altname():
    state = NetState((link(3, "eth1", up=True, altnames=(WANTED,)),))
    assert plan(Matching((), ()), state, altnames={3: {WANTED}}).empty
    unbound = Binding(described(), MatchState.MISSING)
    assert plan(Matching((unbound,), ()), state, altnames={3: {WANTED}}).empty


def test_an_altname_moves_to_the_link_that_wants_it_now():
    # vf-1's altname was on link 3; its metadata now matches link 4, and link 3 is nobody's
    state = NetState(
        (link(3, "eth1", up=True, altnames=(WANTED,)), link(4, "eth2", up=True)),
    )
    p = plan(Matching((bound(described(), 4, "eth2"),), ()), state, altnames={3: {WANTED}})
    assert altnames_of(p) == [("RemoveAltname", 3, WANTED), ("AddAltname", 4, WANTED)]
    assert p.steps[0].reason == "kvdev added it and the metadata now asks for it on eth2"
    after = fake_apply(state, p.steps)  # the kernel refuses a name another link holds
    assert (after.link(3).altnames, after.link(4).altnames) == ((), (WANTED,))


def test_the_primary_nic_keeps_even_an_altname_kvdev_added_there():
    default = Route(3, "0.0.0.0/0", "10.0.0.1", None, 4)  # the guest's own (static)
    state = NetState(
        (link(3, "eth0", up=True, altnames=(WANTED,)), link(4, "eth2", up=True)), routes=(default,)
    )
    p = plan(Matching((bound(described(), 4, "eth2"),), ()), state, altnames={3: {WANTED}})
    assert [x for x in p.steps if isinstance(x, s.RemoveAltname)] == []
    state = NetState((link(3, "eth0", up=True, altnames=(STALE,)),), routes=(default,))
    p = plan(Matching((bound(described(), 3, "eth0"),), ()), state, altnames={3: {STALE}})
    assert p.steps == ()
    assert "default route" in p.blocked[0].reason


def test_a_stale_altname_of_its_own_no_longer_blocks_the_name_a_hint_asks_for():
    h = hint(interfaceName="data0")
    state = NetState((link(3, "eth1", up=True, altnames=("data0",)),))
    matching = Matching((bound(described(), 3, "eth1", h),), ())
    assert plan(matching, state).blocked[0].reason == "name 'data0' is an altname of eth1"
    p = plan(matching, state, altnames={3: {"data0"}})
    assert p.blocked == ()
    assert [type(x).__name__ for x in p.steps[:3]] == ["RemoveAltname", "SetDown", "Rename"]
    after = fake_apply(state, p.steps)
    assert (after.link(3).ifname, after.link(3).altnames) == ("data0", (WANTED,))


def test_without_altnames_the_ones_kvdev_added_go_and_no_other():
    state = NetState((link(3, "eth1", up=True, altnames=(WANTED, USERS)),))
    matching = Matching((bound(described(), 3, "eth1"),), ())
    p = plan(matching, state, policy=Policy(altnames=False), altnames={3: {WANTED}})
    assert altnames_of(p) == [("RemoveAltname", 3, WANTED)]


# ------------------------------------------------------------------ the journal's logic


def test_the_journal_records_before_adding_keeps_what_links_have_and_forgets_removals():
    add = s.AddAltname(3, "eth1", "d", "r", WANTED)
    journal = journals.record_altnames({}, [add, s.SetUp(3, "eth1", "d", "r")])
    assert journal == {3: frozenset({WANTED})}
    assert journals.prune_altnames(journal, NetState((link(3, "eth1"),))) == {}  # the add failed
    has = NetState((link(3, "eth1", altnames=(WANTED, USERS)),))
    assert journals.prune_altnames(journal, has) == journal
    assert journals.prune_altnames(journal, NetState((link(4, "eth1", altnames=(WANTED,)),))) == {}
    remove = s.RemoveAltname(3, "eth1", "d", "r", WANTED)
    assert journals.forget_altnames(journal, [StepResult(remove, ok=False)]) == journal
    assert journals.forget_altnames(journal, [StepResult(remove, ok=True)]) == {}


def test_a_links_entry_is_bounded():
    full = {3: frozenset(f"a{i}" for i in range(journals.MAX_PER_LINK))}
    more = journals.record_altnames(full, [s.AddAltname(3, "eth1", "d", "r", WANTED)])
    assert more == full  # not recorded: the reconciler does not add it


def test_the_journal_reads_back_what_was_saved_and_is_removed_when_empty(tmp_path):
    journal = {3: frozenset({WANTED, STALE}), 12: frozenset({"x"})}
    Store(tmp_path).put(ALTNAMES, journal)
    assert Store(tmp_path).get(ALTNAMES) == journal
    Store(tmp_path).put(ALTNAMES, {})
    assert not (tmp_path / ALTNAMES.name).exists()
    assert Store(tmp_path).get(ALTNAMES) == {}


def test_a_hand_edited_journal_keeps_only_ifindexes_with_names_within_the_bound(tmp_path):
    names = [f"a{i}" for i in range(100)]
    (tmp_path / ALTNAMES.name).write_text(
        '{"3": ' + str(names).replace("'", '"') + ', "x": ["y"], "4": "z", "5": [1, ""]}'
    )
    assert Store(tmp_path).get(ALTNAMES) == {3: frozenset(names[: journals.MAX_PER_LINK])}


def test_a_corrupt_journal_is_set_aside_once(tmp_path, caplog):
    path = tmp_path / ALTNAMES.name
    path.write_bytes(b'{"3": ["vm1')
    with caplog.at_level(logging.WARNING, logger="kvdev.agent"):
        assert Store(tmp_path).get(ALTNAMES) == {}
        assert Store(tmp_path).get(ALTNAMES) == {}  # the next start
    [record] = caplog.records
    assert "altname journal" in record.getMessage()
    assert (tmp_path / f"{ALTNAMES.name}.corrupt").read_bytes() == b'{"3": ["vm1'


# --------------------------------------------------------------- the pass, in memory


def claim_named(cfg, name):
    """nic-1's metadata file with another claim name (still valid: a file-level input)."""
    path = cfg.metadata_root / NIC1
    text = path.read_text()  # a stream of versions, each naming the claim
    assert '"name": "vm1-devices"' in text
    path.write_text(text.replace('"name": "vm1-devices"', json.dumps({"name": name})[1:-1]))


def test_a_pass_journals_each_altname_before_adding_it(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    kernel = example_kernel()
    seen = []

    def check(step):
        if isinstance(step, s.AddAltname):
            seen.append(step.altname in Store(cfg.state_dir).get(ALTNAMES).get(step.ifindex, ()))

    kernel.fault = check
    assert converge(Reconciler(cfg, kernel, scan_devices=tuple)).status.converged
    assert seen == [True, True, True]
    assert Store(cfg.state_dir).get(ALTNAMES) == {
        i: frozenset(kernel.state.link(i).altnames) for i in (1, 2, 3)
    }


def test_a_changed_claim_name_leaves_exactly_the_wanted_altnames(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    kernel = example_kernel()
    kernel.state = replace(  # a person's altname on vf-1's link, there before kvdev
        kernel.state,
        links=tuple(
            replace(lk, altnames=(USERS,)) if lk.ifindex == 1 else lk for lk in kernel.state.links
        ),
    )
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    converge(r)
    good = {lk.ifindex: sorted(lk.altnames) for lk in kernel.state.links}
    assert good[1] == sorted([USERS, "vm1-devices.nic-1.vf-1"])
    original = (cfg.metadata_root / NIC1).read_bytes()
    claim_named(cfg, "vm1---devices")
    converge(r)
    assert sorted(kernel.state.link(1).altnames) == sorted([USERS, "vm1---devices.nic-1.vf-1"])
    (cfg.metadata_root / NIC1).write_bytes(original)
    assert converge(r).status.converged
    assert {lk.ifindex: sorted(lk.altnames) for lk in kernel.state.links} == good
    (cfg.metadata_root / NIC1).write_text("{")  # invalid: the last good state stays
    converge(r)
    assert {lk.ifindex: sorted(lk.altnames) for lk in kernel.state.links} == good
    # a fresh agent (a restart) reads what the journal says it added
    (cfg.metadata_root / NIC1).write_bytes(original)
    claim_named(cfg, "vm2-devices")
    converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert sorted(kernel.state.link(1).altnames) == sorted([USERS, "vm2-devices.nic-1.vf-1"])


def test_no_altname_is_added_without_its_journal_on_disk(tmp_path, monkeypatch):
    cfg = example_config(tmp_path, gpu=False)
    disk = Disk(monkeypatch, names=(ALTNAMES.name,))
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    outcome = converge(r)
    assert not [x for x in kernel.applied if isinstance(x, s.AddAltname)]
    assert all(lk.altnames == () for lk in kernel.state.links)
    assert kernel.state.link(1).mtu == 9000  # the rest went ahead
    journal = cfg.state_dir / ALTNAMES.name
    vf1 = next(d for d in outcome.status.devices if d.name == "vf-1")
    assert vf1.phase.value == "Pending"  # ENOSPC: retried
    assert vf1.reason.startswith(
        f"not done: cannot save the altname journal {journal}: No space left on device; "
        "no altname is added without its journal"
    )
    assert "StateNotSaved" in {c.type for c in outcome.status.conditions}
    assert outcome.retry
    disk.full = False
    assert converge(r).status.converged
    assert all(len(lk.altnames) == 1 for lk in kernel.state.links)
    assert Store(cfg.state_dir).get(ALTNAMES) == {
        lk.ifindex: frozenset(lk.altnames) for lk in kernel.state.links
    }
