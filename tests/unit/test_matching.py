"""guest.matching with plain values: every key, every conflict, evidence included."""

from kvdev.guest.core.matching import MAX_CANDIDATES, MatchState, hint_for, match
from kvdev.guest.core.observed import GuestDevice, Nic
from kvdev.schema.configdrive import TaggedDevice
from kvdev.schema.described import DescribedDevice
from kvdev.schema.hints import DeviceHint


def described(
    name="vf-0",
    *,
    mac=None,
    vendor=None,
    device=None,
    request="nics",
    claim="c1",
    pod_claim=None,
    driver="sriov.example.com",
):
    return DescribedDevice(
        claim=claim,
        namespace="vms",
        pod_claim_name=pod_claim,
        request=request,
        driver=driver,
        pool="node-a",
        name=name,
        generation=1,
        mac=mac,
        vendor_id=vendor,
        device_id=device,
    )


def pci(address, *, mac=None, perm=None, ifname="eth0", ifindex=2, vendor="15b3", device="101e"):
    nics = (Nic(ifname, ifindex, mac, perm),) if (mac or perm or ifname != "eth0") else ()
    return GuestDevice(address, vendor, device, "020000", "mlx5_core", None, (), nics)


def hint(*, device=None, pin=None, tag=None, request="nics", claim="c1", pod_claim=None):
    claim_ref = {"podClaimName": pod_claim} if pod_claim else {"resourceClaimName": claim}
    guest = {k: v for k, v in (("pciAddress", pin), ("tag", tag)) if v is not None}
    data = {"claim": claim_ref, "request": request, "guest": guest or None, "device": device}
    return DeviceHint.parse({k: v for k, v in data.items() if v is not None})


def only(result):
    (b,) = result.bindings
    return b


def test_pinned_address_binds_and_says_so():
    b = only(
        match([described()], [pci("0000:07:00.0"), pci("0000:08:00.0")], [hint(pin="0000:07:00.0")])
    )
    assert b.state is MatchState.BOUND
    assert b.guest.pci_address == "0000:07:00.0"
    assert [(e.kind, e.detail) for e in b.evidence] == [
        ("pinned", "guest PCI address 0000:07:00.0 from the hints")
    ]


def test_pinned_but_absent_is_missing_and_not_matched_by_mac():
    d = described(mac="02:00:00:00:00:01")
    guest = [pci("0000:08:00.0", mac="02:00:00:00:00:01", ifname="ens8")]
    b = only(match([d], guest, [hint(pin="0000:07:00.0")]))
    assert b.state is MatchState.MISSING
    assert "0000:07:00.0" in b.reason
    assert b.guest is None


def test_tag_resolves_through_config_drive():
    tagged = [
        TaggedDevice.parse(
            {"type": "hostdev", "bus": "pci", "address": "0000:09:00.0", "tags": ["gpu0"]}
        )
    ]
    b = only(match([described()], [pci("0000:09:00.0")], [hint(tag="gpu0")], tagged))
    assert b.state is MatchState.BOUND
    assert b.evidence[0].kind == "tag"


def test_tag_and_pin_disagreeing_is_ambiguous():
    tagged = [
        TaggedDevice.parse({"type": "nic", "bus": "pci", "address": "0000:09:00.0", "tags": ["t"]})
    ]
    b = only(
        match(
            [described()],
            [pci("0000:09:00.0"), pci("0000:07:00.0")],
            [hint(pin="0000:07:00.0", tag="t")],
            tagged,
        )
    )
    assert b.state is MatchState.AMBIGUOUS
    assert set(b.candidates) == {"0000:07:00.0", "0000:09:00.0"}


def test_unresolvable_tag_falls_through_to_mac():
    d = described(mac="02:00:00:00:00:01")
    b = only(
        match(
            [d],
            [pci("0000:08:00.0", mac="02:00:00:00:00:01", ifname="ens8")],
            [hint(tag="nowhere")],
        )
    )
    assert b.state is MatchState.BOUND
    assert b.evidence[0].kind == "mac"


def test_permanent_mac_beats_current_mac():
    d = described(mac="02:00:00:00:00:01")
    guest = [
        pci("0000:07:00.0", mac="02:00:00:00:00:01", ifname="ens7", ifindex=3),
        pci(
            "0000:08:00.0",
            mac="aa:aa:aa:aa:aa:aa",
            perm="02:00:00:00:00:01",
            ifname="ens8",
            ifindex=4,
        ),
    ]
    b = only(match([d], guest))
    assert b.guest.pci_address == "0000:08:00.0"
    assert b.evidence[0].kind == "permanent-mac"


def test_duplicate_guest_macs_mark_only_that_device():
    a = described("vf-0", mac="02:00:00:00:00:01")
    other = described("vf-1", mac="02:00:00:00:00:02")
    guest = [
        pci("0000:07:00.0", mac="02:00:00:00:00:01", ifname="a", ifindex=3),
        pci("0000:08:00.0", mac="02:00:00:00:00:01", ifname="b", ifindex=4),
        pci("0000:09:00.0", mac="02:00:00:00:00:02", ifname="c", ifindex=5),
    ]
    first, second = match([a, other], guest).bindings
    assert first.state is MatchState.AMBIGUOUS
    assert first.candidates == ("0000:07:00.0", "0000:08:00.0")
    assert second.state is MatchState.BOUND
    assert second.guest.pci_address == "0000:09:00.0"


def test_two_described_devices_with_one_mac_are_both_ambiguous():
    a = described("vf-0", mac="02:00:00:00:00:01")
    b = described("vf-1", mac="02:00:00:00:00:01")
    result = match([a, b], [pci("0000:07:00.0", mac="02:00:00:00:00:01", ifname="x")])
    assert [x.state for x in result.bindings] == [MatchState.AMBIGUOUS] * 2
    assert "also wanted by c1/nics/sriov.example.com/node-a/vf-1" in result.bindings[0].reason
    assert [g.pci_address for g in result.unmanaged] == ["0000:07:00.0"]


def test_missing_mac_is_missing_with_reason():
    b = only(
        match(
            [described(mac="02:00:00:00:00:09")],
            [pci("0000:07:00.0", mac="02:00:00:00:00:01", ifname="x")],
        )
    )
    assert b.state is MatchState.MISSING
    assert b.reason == "no guest NIC has MAC 02:00:00:00:00:09"


def test_vendor_device_one_to_one_binds():
    gpu = described("gpu-0", vendor="10de", device="20b0", driver="gpu.nvidia.com", request="gpu")
    guest = [pci("0000:09:00.0", vendor="10de", device="20b0"), pci("0000:07:00.0")]
    result = match([gpu], guest)
    assert result.bindings[0].state is MatchState.BOUND
    assert result.bindings[0].evidence[0].kind == "vendor-device"
    assert [g.pci_address for g in result.unmanaged] == ["0000:07:00.0"]


def test_vendor_device_two_and_two_is_ambiguous_not_ordered():
    gpus = [described(f"gpu-{i}", vendor="10de", device="20b0", request="gpu") for i in range(2)]
    guest = [pci(f"0000:0{i}:00.0", vendor="10de", device="20b0") for i in (8, 9)]
    result = match(gpus, guest)
    assert [b.state for b in result.bindings] == [MatchState.AMBIGUOUS] * 2
    assert "pin guest addresses or tags" in result.bindings[0].reason


def test_earlier_phase_removes_candidates_from_later_ones():
    pinned = described("gpu-0", vendor="10de", device="20b0", request="gpu")
    loose = described("gpu-1", vendor="10de", device="20b0", request="gpu")
    guest = [
        pci("0000:08:00.0", vendor="10de", device="20b0"),
        pci("0000:09:00.0", vendor="10de", device="20b0"),
    ]
    result = match(
        [pinned, loose], guest, [hint(request="gpu", device="gpu-0", pin="0000:08:00.0")]
    )
    assert [b.guest.pci_address for b in result.bindings] == ["0000:08:00.0", "0000:09:00.0"]
    assert result.unmanaged == ()


def test_nothing_to_match_on_is_missing():
    b = only(match([described()], [pci("0000:07:00.0")]))
    assert b.state is MatchState.MISSING
    assert b.reason.startswith("nothing to match on")


def test_nic_without_pci_parent_matches_by_mac():
    veth = GuestDevice(None, nics=(Nic("veth0", 7, "02:00:00:00:00:01"),))
    b = only(match([described(mac="02:00:00:00:00:01")], [veth]))
    assert b.state is MatchState.BOUND
    assert b.guest.key == "ifindex:7"
    assert b.nic.ifname == "veth0"


def test_hint_selection_prefers_the_most_specific_and_refuses_ties():
    d = described("vf-1")
    general, specific = hint(), hint(device="vf-1")
    assert hint_for(d, [general, specific]) is specific
    assert hint_for(d, [general, hint(request="nics", claim="c1")]) is None
    assert (
        hint_for(
            described(request="nic/rdma", pod_claim="fast"), [hint(request="nic", pod_claim="fast")]
        )
        is not None
    )
    assert hint_for(described(pod_claim="fast"), [hint(claim="c1")]) is None  # template claim


def test_a_hinted_mac_the_guest_sees_wins_over_the_hosts_hardware_address():
    # KubeVirt sets the VMI interface's macAddress on the VF: the guest never sees the MAC the
    # driver reported on the host.
    d = described(mac="02:00:00:00:00:01")
    h = DeviceHint.parse(
        {
            "claim": {"resourceClaimName": "c1"},
            "request": "nics",
            "guest": {"macAddress": "02:AA:00:00:00:09"},
        }
    )
    guest = [pci("0000:07:00.0", mac="02:aa:00:00:00:09"), pci("0000:08:00.0", mac=d.mac)]
    b = match([d], guest, [h]).bindings[0]
    assert (b.state, b.guest.pci_address) == (MatchState.BOUND, "0000:07:00.0")
    assert b.evidence[0].detail == "02:aa:00:00:00:09 (from the hints) on eth0"
    lost = match([d], [pci("0000:08:00.0", mac=d.mac)], [h]).bindings[0]
    assert lost.state is MatchState.MISSING  # the hinted MAC is authoritative
    assert lost.reason == "no guest NIC has MAC 02:aa:00:00:00:09 (from the hints)"


# ------------------------------------------------ what a binding says is bounded per device

MAC = "02:00:00:00:00:01"


def nic_device(i):
    return GuestDevice(None, nics=(Nic(f"eth{i}", i + 1, MAC),))


def text_size(result):
    return sum(len(b.reason) + sum(len(c) for c in b.candidates) for b in result.bindings)


def test_many_devices_wanting_one_nic_say_so_in_bounded_text():
    # Regression (finding 3): each Ambiguous reason listed every competitor: 600 such devices
    # made /v1/devices 7.2 MB and 2,000 made it 82 MB.
    result = match([described(f"vf-{i}", mac=MAC) for i in range(600)], [nic_device(0)])
    assert {b.state for b in result.bindings} == {MatchState.AMBIGUOUS}
    reason = result.bindings[0].reason
    assert reason == (
        "ifindex:1 is also wanted by c1/nics/sriov.example.com/node-a/vf-1, "
        "c1/nics/sriov.example.com/node-a/vf-2, c1/nics/sriov.example.com/node-a/vf-3 and "
        "596 more"
    )
    assert max(len(b.reason) for b in result.bindings) <= 200


def test_many_nics_sharing_one_mac_keep_a_bounded_candidate_list():
    result = match(
        [described(f"vf-{i}", mac=MAC) for i in range(3)], [nic_device(i) for i in range(600)]
    )
    for b in result.bindings:
        assert b.state is MatchState.AMBIGUOUS
        assert b.reason == f"600 guest devices have MAC {MAC}"
        assert len(b.candidates) == MAX_CANDIDATES
        assert b.candidates[0] == "ifindex:1"


def test_what_bindings_say_grows_linearly_with_the_devices():
    def size(n):
        return text_size(match([described(f"vf-{i}", mac=MAC) for i in range(n)], [nic_device(0)]))

    small, large = size(500), size(2000)
    print(f"reason and candidate text: {small} bytes for 500 devices, {large} for 2,000")
    assert large <= 4 * small * 1.05  # 4x the devices, 4x the text (names grow a digit)
