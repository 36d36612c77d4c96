"""The caches change speed, never results: random small clusters, every cache combination."""

from hypothesis import given, settings
from hypothesis import strategies as st
from test_schedule_fakes import (
    GPU,
    NUMA,
    claim_spec,
    device_class,
    from_template,
    node,
    node_slice,
    pod,
    template,
)

from kvdev.host.allocation.allocator import Allocated, allocate
from kvdev.host.allocation.pools import NodeInfo, PoolIndex, gather_pools
from kvdev.host.scheduling import schedule

SELECTORS = [
    None,
    f'device.attributes["{GPU}"].model == "a"',
    f'device.attributes["{GPU}"].mem >= 2',
]


def _gpu(i, model, mem):
    return {
        "name": f"gpu-{i}",
        "attributes": {"model": {"string": model}, "mem": {"int": mem}, NUMA: {"int": i % 2}},
    }


@st.composite
def clusters(draw):
    objs = [device_class()]
    objs += [
        template(f"t{i}", spec=claim_spec(count=c, selector=s))
        for i, (c, s) in enumerate(
            draw(
                st.lists(
                    st.tuples(st.integers(1, 2), st.sampled_from(SELECTORS)), min_size=1, max_size=3
                )
            )
        )
    ]
    n_templates = len(objs) - 1
    for n in range(draw(st.integers(1, 3))):
        devices = [
            _gpu(i, draw(st.sampled_from("ab")), draw(st.integers(1, 3)))
            for i in range(draw(st.integers(0, 4)))
        ]
        objs.append(node(f"n{n}", allocatable={"cpu": str(draw(st.integers(1, 4)))}))
        if devices:
            objs.append(node_slice(f"n{n}", devices))
    for p in range(draw(st.integers(1, 10))):
        t = draw(st.integers(0, n_templates - 1))
        objs.append(pod(f"p{p}", [from_template("c", f"t{t}")], requests={"cpu": "1"}))
    return objs


def outcome(result):
    return (
        [(p.pod.metadata.name, p.node, p.claim_statuses) for p in result.placed],
        [(u.pod.metadata.name, u.reason) for u in result.unplaced],
        [c.to_json_dict() for c in result.claims],
    )


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_cache_on_equals_cache_off(objs):
    result = schedule(objs, selector_cache=False, filter_cache=False)
    reference = outcome(result)
    for selector_cache, filter_cache in ((True, True), (True, False), (False, True)):
        got = schedule(objs, selector_cache=selector_cache, filter_cache=filter_cache)
        assert outcome(got) == reference
    # and never a node oversubscribed (every pod asks for 1 cpu) nor a device given twice
    cpus = {o.metadata.name: int(o.status.allocatable["cpu"]) for o in objs if o.kind == "Node"}
    for name, cpu in cpus.items():
        assert sum(p.node == name for p in result.placed) <= cpu
    devices = [
        (r.pool, r.device) for c in result.claims for r in c.status.allocation.devices.results
    ]
    assert len(devices) == len(set(devices))


def test_the_selector_cache_is_what_keeps_cel_off_the_hot_path(monkeypatch):
    """With the cache a (selector, device) pair is evaluated once, without it once per check."""
    from kvdev.host.allocation.cel import _compiler as compiler  # noqa: PLC0415

    calls = []
    real = compiler.Selector.matches

    def counting(self, view):
        calls.append(self.expression)
        return real(self, view)

    monkeypatch.setattr(compiler.Selector, "matches", counting)
    objs = [device_class(), template(spec=claim_spec(selector=SELECTORS[1]))]
    models = ["b", "b", "a", "a"]  # the first two never match the request's selector
    objs += [node("n0"), node_slice("n0", [_gpu(i, m, 1) for i, m in enumerate(models)])]
    objs += [pod(f"p{i}", [from_template("c", "one-gpu")]) for i in range(2)]
    schedule(objs, selector_cache=True)
    on = len(calls)
    calls.clear()
    schedule(objs, selector_cache=False)
    off = len(calls)
    assert on == 8  # 4 GPUs x (class selector + request selector), each once
    # without: each pod re-checks the two rejected GPUs (in-use ones are skipped unevaluated)
    assert off == 6 + 6


def test_pool_index_finds_the_same_pools_as_a_full_scan():
    objs = [
        node_slice("n0", [_gpu(0, "a", 1)]),
        node_slice("n1", [_gpu(0, "b", 1)]),
        node_slice("n1", [_gpu(1, "b", 1)], driver="other.example.com"),
    ]
    index = PoolIndex(objs)
    for name in ("n0", "n1", "n2"):
        info = NodeInfo(name)
        assert [(p.id, [c.id for c in p.candidates]) for p in index.pools_for(info)] == [
            (p.id, [c.id for c in p.candidates]) for p in gather_pools(info, objs)
        ]


def test_allocate_with_given_pools_matches_allocate_with_slices():
    slices = [node_slice("n0", [_gpu(0, "b", 1), _gpu(1, "a", 1)])]
    claims = [template(spec=claim_spec(selector=SELECTORS[1]))]
    from kvdev.host.k8s import ResourceClaim  # noqa: PLC0415

    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": claims[0].spec.spec.to_json_dict(),
        }
    )
    info = NodeInfo("n0")
    classes = [device_class()]
    a = allocate(info, [claim], classes=classes, slices=slices)
    b = allocate(info, [claim], classes=classes, pools=PoolIndex(slices).pools_for(info))
    assert isinstance(a, Allocated)
    assert a == b


def test_pool_index_of_reuses_one_snapshot_and_follows_a_change():
    from kvdev.host.allocation.features import Features  # noqa: PLC0415

    one = [node_slice("n0", [_gpu(0, "a", 1)])]
    first = PoolIndex.of(one, Features())
    assert PoolIndex.of(list(one), Features()) is first
    two = [node_slice("n0", [_gpu(0, "a", 1), _gpu(1, "a", 1)])]
    second = PoolIndex.of(two, Features())
    assert second is not first
    ids = [c.id for p in second.pools_for(NodeInfo("n0")) for c in p.candidates]
    assert [d for _, _, d in ids] == ["gpu-0", "gpu-1"]
    assert PoolIndex.of(two, Features(DRAAdminAccess=False)) is not second
    assert PoolIndex.of(one, Features()) is not first  # one entry: the last snapshot only
