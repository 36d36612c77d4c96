"""The Helm chart's admission policies speak ``kvdev.host.contract``'s literals, no cluster needed.

``helm template`` renders the chart with its defaults. Every string and number literal of every
CEL expression of its admission policies is a value of ``kvdev.host.contract`` or one of
Kubernetes' and KubeVirt's own (listed below, each a field, an operation or a JSON Patch word),
and the expressions that build a name build it as the contract's functions do. A literal that
changes on one side only fails here, before any cluster runs the policy.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvdev.host import contract

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "packaging" / "helm" / "kvdev"
HELM = REPO / "build" / "helm" / "bin" / "helm"
NS = "kvdev-system"
POLICIES = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
# The contract's values: every upper-case constant of the module.
CONTRACT = {
    value for name, value in vars(contract).items() if name.isupper() and isinstance(value, str)
}
NUMBERS = {
    value for name, value in vars(contract).items() if name.isupper() and isinstance(value, int)
}
# Literals that are Kubernetes' or KubeVirt's, not kvdev's: admission operations, object
# fields, JSON Patch words and paths of a VMI's spec, CEL's empty string and separators.
THEIRS = {
    "",
    ".",
    "CREATE",
    "UPDATE",
    "DELETE",
    "status",
    "metadata.name",
    "In",
    "add",
    "name",
    "configMap",
    "optional",
    "virtiofs",
    "filesystems",
    "/spec/volumes",
    "/spec/volumes/-",
    "/spec/domain/devices",
    "/spec/domain/devices/filesystems",
    "/spec/domain/devices/filesystems/-",
}
# A service account's user name: the chart's own names, rendered in.
SERVICE_ACCOUNT = re.compile(rf"system:serviceaccount:{NS}:[-a-z0-9]+")
needs_helm = pytest.mark.skipif(
    shutil.which("go") is None and not HELM.exists(), reason="helm is built by Go"
)


@functools.cache
def rendered() -> tuple[dict[str, Any], ...]:
    """The chart's objects as ``helm template`` renders its defaults."""
    if not HELM.exists():  # make unit builds it first (tests/helm/build.sh)
        subprocess.run([REPO / "tests" / "helm" / "build.sh"], check=True, capture_output=True)
    done = subprocess.run(
        [HELM, "template", "kvdev", CHART, "-n", NS, "--kube-version", "1.37.2"],
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def policy(kind: str, name_part: str) -> dict[str, Any]:
    """The one rendered policy of ``kind`` whose name holds ``name_part``."""
    (found,) = (d for d in rendered() if d["kind"] == kind and name_part in d["metadata"]["name"])
    return found


def expressions(spec: dict[str, Any]) -> Iterator[str]:
    """Every CEL expression of a policy that decides (messages are prose: not these)."""
    for group in ("matchConditions", "variables", "validations"):
        for entry in spec.get(group, []):
            yield entry["expression"]
    for mutation in spec.get("mutations", []):
        yield mutation["jsonPatch"]["expression"]


def strings(expression: str) -> set[str]:
    return {a or b for a, b in re.findall(r"'([^']*)'|\"([^\"]*)\"", expression)}


def numbers(expression: str) -> set[int]:
    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", expression)
    return {int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", bare)}


@needs_helm
def test_every_literal_of_every_admission_policy_is_the_contracts_or_kubernetes():
    found = [d for d in rendered() if d["kind"] in POLICIES]
    assert len(found) >= 4  # the relay's, the plugin's, the VMI wiring's two
    for doc in found:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        for expression in expressions(doc["spec"]):
            texts = {s for s in strings(expression) if not SERVICE_ACCOUNT.fullmatch(s)}
            assert texts <= CONTRACT | THEIRS, (where, texts - CONTRACT - THEIRS)
            assert numbers(expression) <= NUMBERS | {0}, (where, expression)


@needs_helm
def test_the_relay_policy_binds_name_label_and_annotation_as_the_contract_builds_them():
    spec = policy("ValidatingAdmissionPolicy", "relay")["spec"]
    exprs = {v["name"]: v["expression"] for v in spec["variables"]}
    checks = " ".join(v["expression"] for v in spec["validations"])
    found = set().union(*(strings(e) for e in [*exprs.values(), checks]))
    assert {
        contract.NODE_ANNOTATION,
        contract.NODE_LABEL,
        contract.CLAIM_UID_LABEL,
        contract.MANAGED_BY,
        contract.RELAY,
        contract.RECORD_PREFIX,
        contract.UID_PATTERN,
        contract.LABEL_PREFIX_PATTERN,
        contract.LEGACY_NAME_PATTERN,
        contract.TOKEN_NODE_KEY,
    } <= found
    assert f"substring(0, {contract.LABEL_MAX})" in exprs["userNodeLabel"]
    # The name: the prefix, the claim UID label, '.', the token's node, on both sides.
    for side, obj in (("new", "object"), ("old", "oldObject")):
        named = re.sub(r"\s+", " ", exprs[f"{side}Named"])
        uid = f"variables.{side}Uid"
        assert f'{obj}.metadata.name == "{contract.RECORD_PREFIX}" + {uid} + "." + ' in named
        assert "+ variables.userNodeName" in named
        assert "== variables.userNodeLabel" in named
    assert "variables.newNamed && variables.oldNamed" in checks
    assert contract.record_name("n", "u") == contract.RECORD_PREFIX + "u" + "." + "n"
    ops = spec["matchConstraints"]["resourceRules"][0]["operations"]
    assert sorted(ops) == ["CREATE", "DELETE", "UPDATE"]


@needs_helm
def test_the_vmi_wiring_names_the_configmap_as_the_contract_does_up_to_its_bound():
    mutating = policy("MutatingAdmissionPolicy", "vmi-wiring")["spec"]
    volume = next(v["expression"] for v in mutating["variables"] if v["name"] == "volume")
    assert f'"{contract.CONFIGMAP_PREFIX}" + object.metadata.name' in volume
    assert contract.METADATA_VOLUME in strings(volume)
    fits = next(c["expression"] for c in mutating["matchConditions"] if c["name"] == "nameFits")
    assert numbers(fits) == {contract.WIRED_NAME_MAX}
    validating = policy("ValidatingAdmissionPolicy", "vmi-wiring")["spec"]
    checks = " ".join(v["expression"] for v in validating["validations"])
    assert numbers(checks) == {contract.WIRED_NAME_MAX}
    # The bound is where the contract's name stops being the prefix and the name.
    longest = "v" * contract.WIRED_NAME_MAX
    assert contract.configmap_name(longest) == contract.CONFIGMAP_PREFIX + longest
    assert contract.configmap_name(longest + "v") != contract.CONFIGMAP_PREFIX + longest + "v"


@needs_helm
def test_the_plugin_policy_reads_the_node_from_the_token_key_of_the_contract():
    spec = policy("ValidatingAdmissionPolicy", "plugin")["spec"]
    exprs = {v["name"]: v["expression"] for v in spec["variables"]}
    assert strings(exprs["userNodeName"]) == {contract.TOKEN_NODE_KEY, ""}


def test_a_literal_the_contract_lacks_is_caught():
    """The judge itself: a label renamed in the chart only is not the contract's."""
    changed = "object.metadata.?labels[?'kvdev.io/relay-node-x'].orValue('')"
    assert not strings(changed) <= CONTRACT | THEIRS
    assert not numbers("size(object.metadata.name) <= 248") <= NUMBERS | {0}
