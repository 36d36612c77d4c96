"""Derived names (``k8s.names``): no uncut name is ever a cut one, for ConfigMaps and labels.

The collision this rules out: a 253-character VMI name cut to ``kvdev-<start>-<hash>`` is also
``kvdev-`` and a 247-character VMI name, whose owner's ConfigMap it then was.
"""

import hashlib
import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvdev.host.contract import configmap_name, vmi_label
from kvdev.host.k8s.names import bounded_label, bounded_name, is_subdomain

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
SETTINGS = settings(max_examples=400, deadline=None)

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
_label = st.builds(
    lambda first, middle, last: first + middle + last if middle or last else first,
    st.sampled_from(_ALNUM),
    st.text(_ALNUM + "-", max_size=61),
    st.sampled_from(["", *_ALNUM]),
)
# DNS-1123 subdomains of every length up to 253, most of them long enough to be cut
subdomains = (
    st.lists(_label, min_size=1, max_size=8)
    .map(".".join)
    .flatmap(
        lambda short: st.integers(0, 253).map(
            lambda n: (short + ("." + short) * 60)[:n].rstrip("-.") or short[:1]
        )
    )
    .filter(is_subdomain)
)


def old_configmap_name(name):
    """The rule before: kvdev-<name> cut to 242 characters, '-', the hash."""
    whole = f"kvdev-{name}"
    if len(whole) <= 253:
        return whole
    return f"{whole[:242].rstrip('-._')}-{hashlib.sha256(whole.encode()).hexdigest()[:10]}"


def test_the_collision_of_two_vmi_names_is_gone():
    long = "v" * 253
    short = old_configmap_name(long)[len("kvdev-") :]  # 247 characters, a valid VMI name
    assert is_subdomain(short)
    assert old_configmap_name(short) == old_configmap_name(long)  # what it was
    assert configmap_name(short) != configmap_name(long)


@SETTINGS
@given(subdomains, subdomains)
@example("v" * 253, ("v" * 236) + "-" + hashlib.sha256(b"kvdev-" + b"v" * 253).hexdigest()[:10])
def test_no_uncut_configmap_name_equals_a_cut_one(a, b):
    for name in (a, b):
        cm = configmap_name(name)
        assert len(cm) <= 253
        assert DNS_SUBDOMAIN.match(cm), cm
        assert (cm == f"kvdev-{name}") == (len(name) <= 247)
    if configmap_name(a) == configmap_name(b):
        assert a == b
    # the one name whose uncut form a cut name would be: never a VMI name, or a different one
    cut = configmap_name(b)
    if cut != f"kvdev-{b}":
        rest = cut.removeprefix("kvdev-")
        assert not is_subdomain(rest) or configmap_name(rest) != cut


@SETTINGS
@given(subdomains, subdomains)
def test_no_uncut_label_equals_a_cut_one(a, b):
    for name in (a, b):
        label = vmi_label(name)
        assert len(label) <= 63
        assert LABEL_VALUE.match(label), label
        assert (label == name) == (len(name) <= 63)
    if vmi_label(a) == vmi_label(b):
        assert a == b
    cut = vmi_label(b)
    if cut != b:
        assert not is_subdomain(cut)  # no VMI (or node) can have it as its name


@SETTINGS
@given(st.text(_ALNUM + "-", min_size=1, max_size=20).filter(lambda p: p[0] != "-"), subdomains)
def test_any_prefix_and_limit_keep_the_rule(prefix, name):
    for limit in (63, 100, 253):
        out = bounded_name(prefix, name, limit)
        assert len(out) <= limit
        if out != prefix + name:
            assert out[len(prefix)] == "-"
        else:
            assert out[len(prefix)] in _ALNUM
        label = bounded_label(name, min(limit, 63))
        assert LABEL_VALUE.match(label), label


def test_a_name_that_is_not_a_subdomain_is_told_apart():
    assert is_subdomain("vm1")
    assert is_subdomain("a" * 253)
    assert not is_subdomain("a" * 254)
    for bad in ("-vm", "vm-", "Vm", "vm_1", "vm..1", ".vm", ""):
        assert not is_subdomain(bad), bad
