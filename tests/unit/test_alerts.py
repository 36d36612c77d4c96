"""guest.core.alerts: which status changes get a fixed MESSAGE_ID, and the journal fields."""

import logging
import re
import uuid

from kvdev.errors import Problem
from kvdev.guest.adapters import systemd
from kvdev.guest.core import alerts as a
from kvdev.guest.core.matching import Binding, Evidence, Matching, MatchState
from kvdev.guest.core.observed import GuestDevice, Nic
from kvdev.guest.core.planning import Blocked, Plan
from kvdev.guest.core.status import MetadataState, summarize
from kvdev.schema.described import DescribedDevice

REF = "vm1-nics/nic/sriov.example.com/node-a/vf-0"


def status(*, bound=True, errors=()):
    d = DescribedDevice("vm1-nics", "vms", None, "nic", "sriov.example.com", "node-a", "vf-0", 3)
    nic = GuestDevice("0000:07:00.0", nics=(Nic("eth1", 11, "02:00:00:00:00:01"),))
    binding = (
        Binding(d, MatchState.BOUND, nic, (Evidence("mac", "on eth1"),))
        if bound
        else Binding(d, MatchState.MISSING, reason="no guest NIC has its MAC")
    )
    return summarize(
        Matching((binding,), ()),
        Plan((), (), ()),
        [],
        MetadataState(errors=tuple(errors)),
        reconcile=1,
    )


def test_the_ids_are_distinct_uuids_as_journald_spells_them():
    ids = [a.CONFIGURED, a.REFUSED, a.METADATA_INVALID]
    assert len(set(ids)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) and uuid.UUID(i).version == 4 for i in ids)


def test_a_device_that_becomes_configured_is_said_once():
    missing, configured = status(bound=False), status()
    (alert,) = a.alerts(missing, configured, (), ())
    assert (alert.message_id, alert.level, alert.text) == (
        a.CONFIGURED,
        "info",
        f"{REF}: configured",
    )
    assert alert.fields == {"MESSAGE_ID": a.CONFIGURED, "DEVICE": REF, "CLAIM": "vm1-nics"}
    assert a.alerts(configured, configured, (), ()) == []  # still configured: nothing new


def test_an_invalid_metadata_file_is_said_when_it_becomes_invalid():
    bad = status(errors=[Problem("stream[0]: bad", "/run/dra/x.json")])
    (alert,) = a.alerts(status(), bad, (), ())
    assert (alert.message_id, alert.level) == (a.METADATA_INVALID, "warning")
    assert alert.text.startswith("metadata invalid: ")
    assert "/run/dra/x.json" in alert.text
    assert a.alerts(bad, bad, (), ()) == []


def test_a_refusal_is_said_when_it_is_new():
    refused = (Blocked(REF, "eth0", "eth0 is the primary NIC: never touched"),)
    (alert,) = a.alerts(status(), status(), (), refused)
    assert alert.text == f"{REF}: refused on eth0: eth0 is the primary NIC: never touched"
    assert alert.fields["MESSAGE_ID"] == a.REFUSED
    assert a.alerts(status(), status(), refused, refused) == []


def test_the_stderr_log_line_names_the_fields(monkeypatch):
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)  # stderr, not the journal
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    record = logging.LogRecord("kvdev.agent", logging.INFO, __file__, 1, "x configured", (), None)
    for key, value in {"DEVICE": REF, "CLAIM": "vm1-nics", "STEP": "SetMtu"}.items():
        setattr(record, key, value)
    line = systemd.log_handler().format(record)
    assert line == f"INFO x configured (DEVICE={REF}, CLAIM=vm1-nics, STEP=SetMtu)"


def test_the_man_page_lists_every_message_id_and_step_kind():
    from pathlib import Path  # noqa: PLC0415

    from kvdev.guest.core import steps  # noqa: PLC0415

    page = (Path(__file__).resolve().parents[2] / "packaging/man/kvdev-agent.8").read_text()
    for message_id in (a.CONFIGURED, a.REFUSED, a.METADATA_INVALID):
        assert page.count(message_id) >= 2, message_id  # described, and in an example
    kinds = [
        c.__name__
        for c in vars(steps).values()
        if isinstance(c, type) and issubclass(c, steps.Step)
    ]
    assert all(k in page for k in kinds if k != "Step")
