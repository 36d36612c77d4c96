"""guest.views: the JSON shape scripts rely on and the aligned table people read."""

import json
import re

import pytest

from kvdev.errors import Problem
from kvdev.guest.core import steps as s
from kvdev.guest.core.matching import Evidence
from kvdev.guest.core.planning import Desired, DesiredRoute
from kvdev.guest.core.status import DeviceStatus, Phase, Status
from kvdev.guest.views.encode import STATUS_API_VERSION, device_json, status_json
from kvdev.guest.views.tables import DEVICES_COLUMNS, PASS_COLUMNS, devices_table, pass_text

REF = "vm1-nics/nic/sriov.example.com/node-a/vf-0"
DESIRED = Desired(
    REF,
    11,
    "net0",
    "vm1-nics.nic.vf-0",
    9000,
    ("10.1.0.5/24", "fd00::5/64"),
    (DesiredRoute("10.3.0.0/16", "10.1.0.1", 100), DesiredRoute("0.0.0.0/0")),
)
AT = (11, "eth1", REF)
STEPS = (
    s.Rename(*AT, "the hints ask for this name", "net0"),
    s.AddAddress(*AT, "listed in the metadata", "10.1.0.5/24"),
    s.AddRoute(*AT, "listed in the hints", "0.0.0.0/0", None, 0),
)


def dev(name, phase, **kw):
    fields = {"claim": "vm1-nics", "request": "nic", "driver": "sriov.example.com"}
    ref = f"vm1-nics/nic/sriov.example.com/node-a/{name}"
    return DeviceStatus(ref, phase, **fields, pool="node-a", name=name, generation=2, **kw)


PENDING = dev(
    "vf-0",
    Phase.PENDING,
    guest_pci_address="0000:07:00.0",
    ifname="net0",
    mac="02:00:00:00:00:01",
    evidence=(Evidence("pinned", "guest PCI address 0000:07:00.0 from the hints"),),
    reason="3 step(s) to apply",
    desired=DESIRED,
    pending_steps=STEPS,
)
MISSING = dev(
    "vf-1", Phase.MISSING, candidates=("0000:08:00.0",), reason="no guest NIC has MAC 02:00"
)


def test_pending_device_json_exactly():
    assert device_json(PENDING) == {
        "ref": REF,
        "phase": "Pending",
        "claim": "vm1-nics",
        "podClaimName": None,
        "request": "nic",
        "driver": "sriov.example.com",
        "pool": "node-a",
        "device": "vf-0",
        "generation": 2,
        "guestPciAddress": "0000:07:00.0",
        "interface": "net0",
        "mac": "02:00:00:00:00:01",
        "evidence": [{"kind": "pinned", "detail": "guest PCI address 0000:07:00.0 from the hints"}],
        "candidates": [],
        "reason": "3 step(s) to apply",
        "warnings": [],
        "desired": {
            "interface": "net0",
            "altname": "vm1-nics.nic.vf-0",
            "mtu": 9000,
            "addresses": ["10.1.0.5/24", "fd00::5/64"],
            "routes": [
                {"destination": "10.3.0.0/16", "gateway": "10.1.0.1", "metric": 100},
                {"destination": "0.0.0.0/0", "gateway": None, "metric": None},
            ],
        },
        "pendingSteps": [
            {
                "type": "Rename",
                "ifname": "eth1",
                "newName": "net0",
                "reason": "the hints ask for this name",
            },
            {
                "type": "AddAddress",
                "ifname": "eth1",
                "address": "10.1.0.5/24",
                "reason": "listed in the metadata",
            },
            {
                "type": "AddRoute",
                "ifname": "eth1",
                "destination": "0.0.0.0/0",
                "metric": 0,  # zero is a value; the absent gateway is left out
                "reason": "listed in the hints",
            },
        ],
    }


def test_device_without_desired_state_or_steps_has_no_such_keys():
    out = device_json(MISSING)
    assert "desired" not in out
    assert "pendingSteps" not in out
    assert (out["phase"], out["candidates"], out["interface"], out["mac"]) == (
        "Missing",
        ["0000:08:00.0"],
        None,
        None,
    )


def test_status_json_top_level_shape():
    status = Status(4, (PENDING, MISSING), ("eth3",), (Problem("bad", "m.json", 0),), dry_run=True)
    out = status_json(status)
    assert {k: v for k, v in out.items() if k != "devices"} == {
        "apiVersion": STATUS_API_VERSION,
        "kind": "AgentStatus",
        "reconcile": 4,
        "converged": False,
        "dryRun": True,
        "summary": "1 missing, 1 pending; 1 metadata error(s), last good metadata in force",
        "counts": {"Pending": 1, "Missing": 1},
        "unmanaged": ["eth3"],
        "metadataErrors": ["m.json: stream[0]: bad"],
        "metadataWarnings": [],
        "conditions": [],
        "claims": [],
    }
    assert STATUS_API_VERSION == "kvdev.io/v1alpha1"
    assert out["devices"] == [device_json(PENDING), device_json(MISSING)]
    assert json.loads(json.dumps(out)) == out


def keys(value):
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_every_json_key_is_camel_case():
    out = status_json(Status(4, (PENDING, MISSING), ("eth3",), (), dry_run=False))
    assert out.pop("counts") == {"Pending": 1, "Missing": 1}  # keyed by phase, not fields
    assert {k for k in keys(out) if "_" in k or k[0].isupper()} == set()


def test_empty_status_json_is_converged():
    out = status_json(Status(1, (), (), ()))
    assert (out["converged"], out["summary"], out["devices"], out["counts"]) == (
        True,
        "no devices described",
        [],
        {},
    )


CONFIGURED = dev(
    "vf-22",
    Phase.CONFIGURED,
    guest_pci_address="0000:09:00.0",
    ifname="eth2",
    mac="02:00:00:00:00:22",
    evidence=(Evidence("permanent-mac", "x"), Evidence("tag", "y")),
    desired=DESIRED,
)


def status_table(status):
    """What ``kvdev-agent --once`` prints for ``status``: the JSON document, drawn as text."""
    return pass_text(status_json(status))


def test_table_exactly():
    table = status_table(Status(1, (CONFIGURED, MISSING), (), ()))
    assert table.splitlines() == [
        (
            "DEVICE                                       PHASE       INTERFACE  GUEST PCI     "
            "MAC                MATCHED BY         DETAIL"
        ),
        (
            "vm1-nics/nic/sriov.example.com/node-a/vf-22  Configured  eth2       0000:09:00.0  "
            "02:00:00:00:00:22  permanent-mac,tag  addresses 10.1.0.5/24,fd00::5/64"
        ),
        (
            "vm1-nics/nic/sriov.example.com/node-a/vf-1   Missing     -          -             "
            "-                  -                  no guest NIC has MAC 02:00"
        ),
        "1 configured, 1 missing",
    ]
    assert table.endswith("\n")


def test_every_row_starts_each_column_at_the_headers_offset():
    status = Status(1, (CONFIGURED, MISSING, PENDING), (), ())
    header, *rows = status_table(status).splitlines()[:4]
    phase_at, iface_at = header.index("PHASE"), header.index("INTERFACE")
    assert phase_at == len(CONFIGURED.ref) + 2
    assert [row[phase_at:].split()[0] for row in rows] == ["Configured", "Missing", "Pending"]
    assert [row[iface_at:].split()[0] for row in rows] == ["eth2", "-", "net0"]
    assert all(row[phase_at - 2 : phase_at] == "  " for row in rows)


def test_table_with_no_devices_is_the_summary_alone():
    assert status_table(Status(1, (), (), ())) == "no devices described\n"


@pytest.mark.parametrize("dry_run", [False, True])
def test_table_footer_unmanaged_errors_and_dry_run(dry_run):
    errors = (Problem("bad json", "a.json"), Problem("no kind", "b.json", 1, "kind"))
    lines = status_table(Status(1, (MISSING,), ("eth3", "eth4"), errors, dry_run)).splitlines()
    assert lines[2:5] == [
        "unmanaged (never touched): eth3, eth4",
        "metadata error: a.json: bad json",
        "metadata error: b.json: stream[1]: kind: no kind",
    ]
    summary = "1 missing; 2 metadata error(s), last good metadata in force"
    assert lines[5:] == [("dry run: " if dry_run else "") + summary]


def cells(text):
    """Each row of an aligned table as {header: cell}, cut at the header's offsets."""
    header, *rows = text.splitlines()
    names = [h for h in re.split(r"\s{2,}", header) if h]
    starts = [header.index(h) for h in names] + [None]
    return [
        {n: row[a:b].strip() for n, a, b in zip(names, starts, starts[1:], strict=False)}
        for row in rows
    ]


def test_once_and_kvdev_devices_draw_the_same_cells_for_the_same_device():
    body = status_json(Status(1, (CONFIGURED, MISSING, PENDING), (), ()))
    once = cells(pass_text(body))[:3]
    devices = cells(devices_table(body["devices"]))
    shared = set(PASS_COLUMNS) & set(DEVICES_COLUMNS)
    assert shared == {"DEVICE", "PHASE", "INTERFACE", "GUEST PCI", "MAC"}
    for a, b in zip(once, devices, strict=True):
        assert {k: a[k] for k in shared} == {k: b[k] for k in shared}
