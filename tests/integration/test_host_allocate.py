"""`kvdev-host allocate` end to end: every allocator fixture case through the command line.

Each case becomes one YAML file of objects: its DeviceClasses and ResourceSlices, a Node from
``node``, its claims, and the input state (``allocatedDevices`` / ``allocatedCapacity``) as
already-allocated claims carrying ``status.allocation`` (the README's "Deriving the input
state from existing claims"). The output is compared with the case's expectation by the unit
runner's own ``mismatch``.
"""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvdev.host import cli
from kvdev.host.allocation.allocator import Allocated, Failed, Unschedulable
from kvdev.host.k8s import ResourceClaim, load
from kvdev.host.k8s.claim import AllocationResult

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data" / "allocator"
FILES = sorted(FIXTURES.glob("*.yaml"))
KVDEV_HOST = shutil.which("kvdev-host") or str(Path(sys.executable).parent / "kvdev-host")

_spec = importlib.util.spec_from_file_location(
    "allocator_fixture_runner", REPO / "tests" / "unit" / "host" / "test_allocator_fixtures.py"
)
assert _spec is not None
assert _spec.loader is not None
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)

IN_USE_PREFIX = "kvdev-test-in-use"


def _in_use_claims(case):
    """Already-allocated claims holding the case's allocatedDevices / allocatedCapacity."""
    results = [
        {"request": "held", "driver": d["driver"], "pool": d["pool"], "device": d["device"]}
        for d in case.get("allocatedDevices") or []
    ]
    for i, d in enumerate(case.get("allocatedCapacity") or []):
        result = {"request": "held", "driver": d["driver"], "pool": d["pool"]}
        result["device"] = d["device"]
        result["shareID"] = f"00000000-0000-4000-8000-{i:012d}"
        if d.get("consumedCapacity"):
            result["consumedCapacity"] = {k: str(v) for k, v in d["consumedCapacity"].items()}
        results.append(result)
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"{IN_USE_PREFIX}-{n}", "namespace": "default"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results[start : start + 32]}}},
        }
        for n, start in enumerate(range(0, len(results), 32))
    ]


def write_case(case, path):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": case["node"]["name"]}}
    if case["node"].get("labels"):
        node["metadata"]["labels"] = case["node"]["labels"]
    objects = [
        node,
        *case["deviceClasses"],
        *case["resourceSlices"],
        *_in_use_claims(case),
        *case["claims"],
    ]
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    return path


def _gates(case):
    return ",".join(f"{k}={str(v).lower()}" for k, v in (case.get("features") or {}).items())


def _args(case, path, output="json"):
    args = ["allocate", "-f", str(path), "--node", case["node"]["name"], "-o", output]
    if case.get("features"):
        args += ["--feature-gates", _gates(case)]
    return args


def outcome_from(code, stdout):
    """The allocator outcome the command printed (``-o json``)."""
    data = json.loads(stdout)
    if code == 0:
        return Allocated(
            {
                item["metadata"]["name"]: AllocationResult.model_validate(
                    item["status"]["allocation"]
                )
                for item in data["items"]
            }
        )
    if code == 1:
        assert data["reason"] == "unschedulable"
        return Unschedulable()
    return Failed(data["reason"], data["message"])


def _problem(case, outcome):
    problem = runner.mismatch(outcome, case["expect"])
    quirk = "alternativeExpect" in case and "upstream-quirk" in (case.get("tags") or [])
    if problem and quirk and runner.mismatch(outcome, case["alternativeExpect"]) is None:
        return None
    return problem


def _code(expect):
    if expect.get("unschedulable"):
        return 1
    return 2 if "error" in expect else 0


def _expected_codes(case):
    codes = {_code(case["expect"])}
    if "alternativeExpect" in case and "upstream-quirk" in (case.get("tags") or []):
        codes.add(_code(case["alternativeExpect"]))
    return codes


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_fixture_through_cli(path, tmp_path, capsys):
    case = yaml.safe_load(path.read_text(encoding="utf-8"))
    objects = write_case(case, tmp_path / "objects.yaml")
    code = cli.main(_args(case, objects))
    out, err = capsys.readouterr()
    assert code in _expected_codes(case), err
    problem = _problem(case, outcome_from(code, out))
    assert problem is None, problem
    if code == 1:
        assert "claim" in err or "do not fit" in err


SUBPROCESS_CASES = ["001", "007", "011", "808", "E02"]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_console_script(case_id, tmp_path):
    path = next(p for p in FILES if p.stem.startswith(case_id))
    case = yaml.safe_load(path.read_text(encoding="utf-8"))
    objects = write_case(case, tmp_path / "objects.yaml")
    done = subprocess.run(
        [KVDEV_HOST, *_args(case, objects)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in _expected_codes(case), done.stderr
    assert _problem(case, outcome_from(done.returncode, done.stdout)) is None


def _case(prefix):
    path = next(p for p in FILES if p.stem.startswith(prefix))
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_yaml_output_parses_back_as_claims(tmp_path, capsys):
    case = _case("010")
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main(_args(case, objects, output="yaml")) == 0
    out = capsys.readouterr().out
    claims = load(out, "<stdout>")
    assert len(claims) == len(case["claims"]) > 1
    assert all(isinstance(c, ResourceClaim) for c in claims)
    assert all(c.status and c.status.allocation for c in claims)
    # Fed back in, the claims are in use: nothing is left to allocate.
    state = write_case({**case, "claims": []}, tmp_path / "state.yaml")
    again = tmp_path / "again.yaml"
    again.write_text(out, encoding="utf-8")
    node = case["node"]["name"]
    assert cli.main(["allocate", "-f", str(state), "-f", str(again), "--node", node]) == 0
    done = capsys.readouterr()
    assert done.out == ""
    assert "nothing to do" in done.err


def test_allocated_output_feeds_back_as_in_use(tmp_path, capsys):
    case = _case("001")
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main(_args(case, objects, output="yaml")) == 0
    held = tmp_path / "held.yaml"
    held.write_text(capsys.readouterr().out.replace("name: ", "name: held-", 1), encoding="utf-8")
    # The same claim again, with its first allocation in use: the next device is taken.
    code = cli.main(["allocate", "-f", str(objects), "-f", str(held), "--node", "node-a"])
    out = capsys.readouterr().out
    if code == 0:
        first = next(yaml.safe_load_all(held.read_text(encoding="utf-8")))
        second = next(yaml.safe_load_all(out))
        taken = first["status"]["allocation"]["devices"]["results"][0]["device"]
        assert second["status"]["allocation"]["devices"]["results"][0]["device"] != taken
    else:
        assert code == 1


def test_invalid_input_names_object_and_field(tmp_path, capsys):
    case = _case("001")
    case["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main(_args(case, objects)) == 2
    out, err = capsys.readouterr()
    name = case["claims"][0]["metadata"]["name"]
    assert f"ResourceClaim/default/{name}" in err or f"ResourceClaim/{name}" in err
    assert "spec.devices.requests[0].exactly.count" in err
    assert json.loads(out)["reason"] == "invalid-input"


def test_unknown_feature_gate_is_a_usage_error(tmp_path, capsys):
    case = _case("001")
    objects = write_case(case, tmp_path / "objects.yaml")
    code = cli.main([*_args(case, objects), "--feature-gates", "DRANoSuchGate=false"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "DRANoSuchGate" in err
    assert json.loads(out)["reason"] == "usage"


def test_malformed_feature_gate(tmp_path, capsys):
    case = _case("001")
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main([*_args(case, objects), "--feature-gates", "DRADeviceTaints"]) == 2
    assert "GATE=true" in capsys.readouterr().err


def test_node_must_match_a_node_object(tmp_path, capsys):
    case = _case("001")
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main(["allocate", "-f", str(objects), "--node", "nowhere"]) == 2
    assert "no Node object" in capsys.readouterr().err


def test_unschedulable_says_which_request(tmp_path, capsys):
    case = _case("007")
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main(_args(case, objects, output="yaml")) == 1
    err = capsys.readouterr().err
    assert "claims claim-a, claim-b do not fit together on node node-a" in err


def test_unschedulable_names_the_request(tmp_path, capsys):
    case = _case("601")  # the only device has an untolerated taint
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main(_args(case, objects, output="yaml")) == 1
    name = case["claims"][0]["metadata"]["name"]
    assert f"claim {name}: no device fits request" in capsys.readouterr().err


def test_explain_gives_per_device_reasons(tmp_path, capsys):
    case = _case("601")  # an untolerated taint
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main([*_args(case, objects), "--explain"]) == 1
    err = capsys.readouterr().err
    assert "taint: a taint is not tolerated" in err
    assert "device(s) fit on their own" in err


def test_explain_reports_other_node_and_in_use(tmp_path, capsys):
    case = _case("011")
    objects = write_case(case, tmp_path / "objects.yaml")
    assert cli.main([*_args(case, objects), "--explain"]) == 0
    err = capsys.readouterr().err
    assert "in-use" in err


def test_taint_rule_taints_selected_devices(tmp_path, capsys):
    case = _case("001")
    objects = write_case(case, tmp_path / "objects.yaml")
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {"deviceSelector": {}, "taint": {"key": "maintenance", "effect": "NoSchedule"}},
    }
    rules = tmp_path / "rule.yaml"
    rules.write_text(yaml.safe_dump(rule), encoding="utf-8")
    args = ["allocate", "-f", str(objects), "-f", str(rules), "--node", "node-a"]
    assert cli.main(args) == 1  # an empty selector selects every device
    capsys.readouterr()
    assert cli.main([*args, "--feature-gates", "DRADeviceTaints=false"]) == 0
    capsys.readouterr()
    del rule["spec"]["deviceSelector"]  # a missing selector selects none
    rules.write_text(yaml.safe_dump(rule), encoding="utf-8")
    assert cli.main(args) == 0
    capsys.readouterr()
    rule["spec"]["deviceSelector"] = {"driver": "other.example.com"}
    rules.write_text(yaml.safe_dump(rule), encoding="utf-8")
    assert cli.main(args) == 0


def test_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["allocate", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "exit status" in out
    assert "examples:" in out


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [("106", "pool-incomplete"), ("114", "other-node"), ("707", "other-node")],
)
def test_explain_reports_devices_the_search_never_sees(prefix, reason, tmp_path, capsys):
    case = _case(prefix)
    objects = write_case(case, tmp_path / "objects.yaml")
    cli.main([*_args(case, objects), "--explain"])
    assert f": {reason}: " in capsys.readouterr().err


def test_pods_are_ignored_and_unknown_kinds_warned(tmp_path, capsys):
    case = _case("001")
    objects = write_case(case, tmp_path / "objects.yaml")
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c"}]},
                },
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
            ]
        ),
        encoding="utf-8",
    )
    assert cli.main([*_args(case, objects), "-f", str(extra)]) == 0
    assert "warning: " in capsys.readouterr().err


def test_without_node_objects_the_node_has_no_labels(tmp_path, capsys):
    case = _case("001")  # a nodeName slice: labels do not matter
    objects = write_case(case, tmp_path / "objects.yaml")
    docs = [
        d for d in yaml.safe_load_all(objects.read_text(encoding="utf-8")) if d["kind"] != "Node"
    ]
    objects.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert cli.main(_args(case, objects)) == 0
    assert json.loads(capsys.readouterr().out)["items"]


def _gpu_pod(quantity, name="gpu-pod"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"example.com/gpu": quantity}}}]
        },
    }


def _extended_case(tmp_path, quantity):
    """The 001 slices with a second device, a class mapping example.com/gpu, and a Pod."""
    case = _case("001")
    case["claims"] = []
    case["deviceClasses"][0]["spec"]["extendedResourceName"] = "example.com/gpu"
    devices = case["resourceSlices"][0]["spec"]["devices"]
    devices.append({**devices[0], "name": "gpu-1"})
    objects = write_case(case, tmp_path / "objects.yaml")
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(_gpu_pod(quantity)), encoding="utf-8")
    return ["allocate", "-f", str(objects), "-f", str(pod), "--node", "node-a", "-o", "json"]


def test_pod_extended_resource_gets_a_special_claim(tmp_path, capsys):
    assert cli.main(_extended_case(tmp_path, 2)) == 0
    out, err = capsys.readouterr()
    [claim] = json.loads(out)["items"]
    assert claim["metadata"]["name"].startswith("gpu-pod-extended-resources-")
    [request] = claim["spec"]["devices"]["requests"]
    assert request["name"] == "container-0-request-0"
    assert request["exactly"]["count"] == 2
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    assert {r["request"] for r in results} == {"container-0-request-0"}
    assert "extendedResourceClaimStatus" in err


def test_pod_asking_more_than_exist_does_not_fit(tmp_path, capsys):
    assert cli.main(_extended_case(tmp_path, 3)) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["reason"] == "unschedulable"
    assert "container-0-request-0" in err


def test_extended_resource_gate_off_ignores_pods(tmp_path, capsys):
    args = _extended_case(tmp_path, 3)
    assert cli.main([*args, "--feature-gates", "DRAExtendedResource=false"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["items"] == []
    assert "nothing to do" in err


def test_output_name_and_the_json_alias(tmp_path, capsys):
    case = _case("010")
    objects = write_case(case, tmp_path / "objects.yaml")
    node = case["node"]["name"]
    assert cli.main(["allocate", "-f", str(objects), "--node", node, "-o", "name"]) == 0
    names = capsys.readouterr().out.splitlines()
    want = [f"resourceclaim.resource.k8s.io/{c['metadata']['name']}" for c in case["claims"]]
    assert names == want
    assert cli.main(["allocate", "-f", str(objects), "--node", node, "--json"]) == 0
    as_json = capsys.readouterr().out
    assert cli.main(["allocate", "-f", str(objects), "--node", node, "-o", "json"]) == 0
    assert as_json == capsys.readouterr().out
    assert json.loads(as_json)["kind"] == "List"


@pytest.mark.parametrize(
    "command", ["allocate", "schedule", "status", "controller", "prepare", "bundle"]
)
def test_every_host_command_that_prints_takes_o_and_json(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert "-o {" in text
    assert "--json" in text
    assert "the same as -o json" in text
