"""guest.sources: the last good content of each file stays in force; errors are data."""

import json

import pytest
from builders import hint, hints_doc, metadata_doc, stream

from kvdev.errors import Problem
from kvdev.guest.core.observed import RawFile
from kvdev.guest.core.sources import Sources, update
from kvdev.schema.tree import Role

ROOT = "/run/dra"
M1 = "resourceclaims/vm1-nics/nic/sriov.example.com-metadata.json"
M2 = "resourceclaims/vm1-nics/nic/zz.example.com-metadata.json"
HINTS = "kvdev/guest-hints.json"
DRIVE = "/mnt/config-2/openstack/latest/meta_data.json"


def metadata(n_devices=1, driver="sriov.example.com"):
    doc = metadata_doc(n_devices)
    for d in doc["requests"][0]["devices"]:
        d["driver"] = driver
    return stream(doc)


GOOD = metadata(1)
GOOD2 = metadata(2)
TORN = GOOD[: len(GOOD) // 2]
WRONG = stream({**metadata_doc(), "requests": "nope"})
UNREADABLE = None  # the file was listed but could not be read


def raw(rel, data, role=Role.DEVICE_METADATA):
    source = rel if rel.startswith("/") else f"{ROOT}/{rel}"
    if data is UNREADABLE:
        problem = Problem("cannot read: Input/output error", source)
        return RawFile(source, rel, role, None, problem)
    return RawFile(source, rel, role, data)


def scan(files, *, complete=True):
    return [raw(rel, data) for rel, data in files.items()], complete


def run(*scans):
    sources = Sources()
    for raws, complete in scans:
        sources = update(sources, raws, listing_complete=complete)
    return sources


def names(sources):
    return [d.name for d in sources.described()]


def error_files(sources):
    return [source.removeprefix(ROOT + "/") for source in sources.errors()]


@pytest.mark.parametrize(
    ("scans", "devices", "errors"),
    [
        pytest.param([scan({M1: GOOD})], ["vf-0"], [], id="valid"),
        pytest.param([scan({M1: GOOD}), scan({M1: TORN})], ["vf-0"], [M1], id="valid-then-torn"),
        pytest.param(
            [scan({M1: GOOD}), scan({M1: WRONG})], ["vf-0"], [M1], id="valid-then-invalid"
        ),
        pytest.param(
            [scan({M1: GOOD}), scan({M1: UNREADABLE})], ["vf-0"], [M1], id="valid-then-unreadable"
        ),
        pytest.param(
            [scan({M1: GOOD}), scan({M1: WRONG}), scan({M1: GOOD2})],
            ["vf-0", "vf-1"],
            [],
            id="valid-again-clears-the-error",
        ),
        pytest.param(
            [scan({M1: GOOD}), scan({}, complete=False)], ["vf-0"], [], id="absent-listing-failed"
        ),
        pytest.param([scan({M1: GOOD}), scan({})], [], [], id="absent-listing-complete"),
        pytest.param([scan({M1: WRONG})], [], [M1], id="never-valid"),
        pytest.param([scan({M1: UNREADABLE})], [], [M1], id="never-readable"),
        pytest.param(
            [scan({M1: WRONG}), scan({}, complete=False)], [], [M1], id="bad-kept-listing-failed"
        ),
        pytest.param([scan({M1: WRONG}), scan({})], [], [], id="bad-removed-listing-complete"),
        pytest.param(
            [scan({M1: GOOD2, M2: GOOD}), scan({M2: WRONG})],
            ["vf-0"],
            [M2],
            id="one-removed-one-bad",
        ),
    ],
)
def test_update(scans, devices, errors):
    sources = run(*scans)
    assert names(sources) == devices
    assert error_files(sources) == errors
    assert sources.scan == len(scans)


def test_error_is_in_force_next_to_the_last_good_content():
    sources = run(scan({M1: GOOD}), scan({M1: GOOD}), scan({M1: WRONG}), scan({M1: WRONG}))
    (entry,) = sources.entries
    assert entry.used is not None
    assert entry.used.ok
    assert (entry.used_since, entry.rejected_since, entry.generation) == (1, 3, 1)
    assert entry.problems
    assert all(p.source == f"{ROOT}/{M1}" for p in entry.problems)
    assert sources.errors() == {f"{ROOT}/{M1}": entry.problems}


def test_used_since_moves_only_when_the_content_does():
    sources = run(scan({M1: GOOD}), scan({M1: GOOD}), scan({M1: GOOD2}), scan({M1: GOOD2}))
    assert sources.entry(f"{ROOT}/{M1}").used_since == 3


def test_described_devices_come_in_path_order():
    files = {M2: metadata(1, "zz.example.com"), M1: GOOD2}
    sources = run(scan(files))
    assert [(d.driver, d.name) for d in sources.described()] == [
        ("sriov.example.com", "vf-0"),
        ("sriov.example.com", "vf-1"),
        ("zz.example.com", "vf-0"),
    ]


def test_unrelated_files_are_ignored():
    raws = [RawFile(f"{ROOT}/notes.txt", "notes.txt", Role.UNRELATED), raw(M1, GOOD)]
    sources = update(Sources(), raws, listing_complete=True)
    assert [e.source for e in sources.entries] == [f"{ROOT}/{M1}"]


def hints_raw(*devices, data=None):
    return raw(HINTS, data or stream(hints_doc(*devices)), Role.GUEST_HINTS)


def test_hints_invalid_keep_the_previous_hints():
    first = [raw(M1, GOOD), hints_raw(hint(network={"mtu": 9000}))]
    sources = update(Sources(), first, listing_complete=True)
    assert [h.network.mtu for h in sources.hints()] == [9000]
    bad = [raw(M1, GOOD), hints_raw(hint(network={"mtu": 1}))]
    sources = update(sources, bad, listing_complete=True)
    assert [h.network.mtu for h in sources.hints()] == [9000]
    assert error_files(sources) == [HINTS]
    torn = [raw(M1, GOOD), hints_raw(data=b'{"apiVersion": "guest.kv')]
    sources = update(sources, torn, listing_complete=True)
    assert [h.network.mtu for h in sources.hints()] == [9000]
    assert names(sources) == ["vf-0"]


def test_hints_that_were_never_valid_give_no_hints():
    sources = update(Sources(), [hints_raw(data=b"{")], listing_complete=True)
    assert sources.hints() == ()
    assert error_files(sources) == [HINTS]


CONFIG_DRIVE = {
    "uuid": "6d3c",
    "devices": [{"type": "nic", "bus": "pci", "address": "0000:07:00.0", "tags": ["a"]}],
}


def test_config_drive_tagged_devices_and_last_good():
    good = raw(DRIVE, json.dumps(CONFIG_DRIVE).encode(), Role.CONFIG_DRIVE)
    sources = update(Sources(), [good], listing_complete=True)
    assert [t.pci_address for t in sources.tagged()] == ["0000:07:00.0"]
    bad = raw(DRIVE, b'{"devices": 3}', Role.CONFIG_DRIVE)
    sources = update(sources, [bad], listing_complete=True)
    assert [t.pci_address for t in sources.tagged()] == ["0000:07:00.0"]
    assert list(sources.errors()) == [DRIVE]
    assert sources.entry(DRIVE).generation is None


def test_sources_is_a_value():
    raws, _ = scan({M1: GOOD})
    assert update(Sources(), raws, listing_complete=True) == update(
        Sources(), raws, listing_complete=True
    )


def test_hints_of_two_files_that_clash_are_errors_on_the_later_one():
    a = stream(hints_doc(hint(device="vf-1", network={"interfaceName": "data0"})))
    b = stream(
        hints_doc(hint(device="vf-1"), hint(device="vf-2", network={"interfaceName": "data0"}))
    )
    both = [raw(HINTS, a, Role.GUEST_HINTS), raw("/etc/hints.json", b, Role.GUEST_HINTS)]
    sources = run((both, True))
    first, later = sorted(e.source for e in sources.entries)  # path order: /etc first
    assert first == "/etc/hints.json"
    assert [(p.source, p.path, p.message) for p in sources.hint_conflicts()] == [
        (later, "devices[0]", f"devices[0] selects the same device(s) as devices[0] of {first}"),
        (
            later,
            "devices[0]",
            f"devices[0] asks for interface name 'data0', as devices[1] of {first}",
        ),
    ]
    assert run(([both[0]], True)).hint_conflicts() == ()


def test_unchanged_bytes_are_not_checked_again_and_changed_ones_are(monkeypatch):
    import kvdev.guest.core.sources as sources_module  # noqa: PLC0415 - the check, counted

    checks = []
    real = sources_module.check_raw
    monkeypatch.setattr(sources_module, "check_raw", lambda r: checks.append(r.source) or real(r))
    sources = run(scan({M1: GOOD}), scan({M1: GOOD}))
    assert len(checks) == 1  # the second scan's bytes were the first's
    assert names(sources) == ["vf-0"]
    sources = update(sources, scan({M1: TORN})[0], listing_complete=True)
    assert len(checks) == 2
    assert names(sources) == ["vf-0"]  # the last good content stays; the torn read is an error
    assert error_files(sources) == [M1]
    sources = update(sources, scan({M1: GOOD2})[0], listing_complete=True)
    assert len(checks) == 3
    assert names(sources) == ["vf-0", "vf-1"]
    assert error_files(sources) == []
    sources = update(sources, scan({M1: GOOD2})[0], listing_complete=True)
    assert len(checks) == 3
    assert names(sources) == ["vf-0", "vf-1"]
    moved = update(sources, scan({M2: GOOD2})[0], listing_complete=True)  # other place: checked
    assert len(checks) == 4
    assert [e.source for e in moved.entries] == [f"{ROOT}/{M2}"]
