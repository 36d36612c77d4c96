"""What KubeVirt's own code answered for kvdev's VMIs (tests/data/kubevirt), read without KubeVirt.

The recordings are made by ``make record-kubevirt KUBEVIRT=DIR`` (tests/kubevirt/record.sh) from
a KubeVirt checkout; here they must still answer the tree's questions (their inputs' hashes),
cover every shipped and documented VMI, and say that KubeVirt admits each VMI for the version
it is documented for.
"""

from __future__ import annotations

import json

import pytest

import kubevirtlab

VERSIONS = kubevirtlab.recorded_versions()


def test_every_supported_kubevirt_version_is_recorded() -> None:
    recorded = {kubevirtlab.versions_key(v) for v in VERSIONS}
    assert set(kubevirtlab.supported()) <= recorded, (
        f"no recording for {sorted(set(kubevirtlab.supported()) - recorded)}: {kubevirtlab.RECORD}"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_recording_answers_the_tree(version: str) -> None:
    """A VMI, a gate or the judge changed since the recording: it must be made again."""
    rec = kubevirtlab.recording(version)
    by_name = {c["name"]: c for c in rec["cases"]}
    stale = [
        c.name
        for c in kubevirtlab.cases()
        if by_name.get(c.name, {}).get("inputs") != kubevirtlab.case_digest(version, c)
    ]
    gone = sorted(set(by_name) - {c.name for c in kubevirtlab.cases()})
    commit = rec["kubevirt"]["commit"]
    assert (stale, gone, rec["inputs"]) == ([], [], kubevirtlab.inputs_digest(version)), (
        f"tests/data/kubevirt/{version} was recorded for other inputs (changed or new: {stale}; "
        f"gone: {gone}; or the judge's sources changed): re-record with "
        f"make record-kubevirt KUBEVIRT=<KubeVirt checkout of {version}, {commit}>"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_documented_vmis_are_admitted_by_their_version(version: str) -> None:
    rec = kubevirtlab.recording(version)
    key = kubevirtlab.versions_key(version)
    refused = {
        c["name"]: (c.get("mutateError") or c["admission"])
        for c in rec["cases"]
        if key in c["documentedFor"] and not (c["admission"] or {}).get("allowed")
    }
    assert refused == {}, f"KubeVirt {version} refuses documented VMIs: change the docs"


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_files_are_there(version: str) -> None:
    rec = kubevirtlab.recording(version)
    assert rec["kubevirt"]["version"] == version
    assert len(rec["kubevirt"]["commit"]) == 40
    for c in rec["cases"]:
        for name in c["files"]:
            assert (kubevirtlab.DATA / version / c["dir"] / name).is_file(), (c["name"], name)
        if (c["admission"] or {}).get("allowed"):
            assert {"domain.xml", "devices.json"} <= set(c["files"]), c


def test_a_changed_vmi_changes_its_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    case = kubevirtlab.cases()[0]
    before = kubevirtlab.case_digest("main", case)
    changed = json.loads(json.dumps(case.vmi))
    changed["spec"]["domain"].setdefault("devices", {})["autoattachSerialConsole"] = False
    after = kubevirtlab.case_digest("main", kubevirtlab.Case(case.name, case.source, changed))
    assert before != after
    monkeypatch.setattr(kubevirtlab, "BINDINGS", {})
    assert kubevirtlab.case_digest("main", case) != before


def test_cases_come_from_the_shipped_files() -> None:
    sources = {c.source for c in kubevirtlab.cases()}
    assert {
        "packaging/kubernetes/vmi-example.yaml",
        "packaging/examples/host/vmi.yaml",
        "docs/quickstart/local-operator/vm1.yaml",
        "tests/e2e/inputs/kubevirt/vmi.yaml",
    } <= sources
    for c in kubevirtlab.cases():
        assert "status" not in c.vmi
        assert "uid" not in c.vmi["metadata"]


@pytest.mark.parametrize("version", VERSIONS)
def test_documented_refusals_are_refused_and_quoted(version: str) -> None:
    """A VMI documented for no version shows a refusal: KubeVirt's words are on its page."""
    rec = kubevirtlab.recording(version)
    examples = [c for c in rec["cases"] if not c["documentedFor"]]
    assert examples
    for c in examples:
        admission = c["admission"]
        assert admission is not None
        assert not admission["allowed"], c["name"]
        page = (kubevirtlab.ROOT / c["source"]).read_text()
        for cause in admission["causes"]:
            assert cause["message"] in page, (c["source"], cause["message"])
