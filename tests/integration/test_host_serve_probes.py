"""`kvdev-host serve --health-port / --metrics-address` as a process, with real clients.

The health service is asked with grpc_health's own stub over TCP; ``/metrics`` is scraped
over HTTP and parsed with prometheus_client's parser; claims are prepared over the real DRA
socket with a gRPC client (kubelet's own client drives serve in test_host_serve_kubelet.py).
"""

import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from hostlab import DRIVER, allocated_claim, start_serve_line, vf_slice
from kvdev.host.proto import dra_v1_pb2, dra_v1_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def root():
    path = Path(tempfile.mkdtemp(prefix="kvdev-probes-", dir="/tmp"))
    (path / "claims").mkdir()
    claims = [allocated_claim(i) for i in range(4)]
    (path / "claims" / "objects.yaml").write_text(yaml.safe_dump_all([vf_slice(4), *claims]))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(root: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """serve on ``root``'s directories; the process and its "serving" line."""
    args = [sys.executable, "-m", "kvdev.host", "serve", "--driver", DRIVER]
    args += ["--claims-dir", str(root / "claims"), "--plugin-data-dir", str(root / "plugin")]
    args += ["--cdi-dir", str(root / "cdi"), "--registry-dir", str(root / "registry")]
    return start_serve_line([*args, *extra])


def stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=60)  # a failure guard
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 0, err
    return err


def check(port: int, service: str = "") -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=service)
        return int(stub.Check(request, timeout=60, wait_for_ready=True).status)


@pytest.mark.parametrize("removed", ["dra", "registration"])
def test_health_serves_while_both_sockets_answer_and_not_once_one_is_gone(root, removed):
    port = free_port()
    proc, line = serve(root, "--health-port", str(port))
    assert line.rstrip().endswith(f" health={port}")
    try:
        assert check(port) == SERVING
        assert check(port, "liveness") == SERVING
        assert check(port, "readiness") == SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            check(port, "no-such-service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        sock = root / "plugin" / "dra.sock" if removed == "dra" else root / "registry"
        if removed == "registration":
            sock = sock / f"{DRIVER}-reg.sock"
        sock.unlink()
        assert check(port) == NOT_SERVING
        assert check(port, "liveness") == NOT_SERVING
    finally:
        err = stop(proc)
    assert f"health: not serving: {sock}" in err
    assert err.count("health: not serving") == 1  # logged when it changes, not per probe


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 - our own http URL
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def prepare(dra: Path, claims: list[dict]) -> dra_v1_pb2.NodePrepareResourcesResponse:
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(
                namespace=c["metadata"]["namespace"],
                name=c["metadata"]["name"],
                uid=c["metadata"]["uid"],
            )
            for c in claims
        ]
    )
    with grpc.insecure_channel(f"unix:{dra}") as channel:
        return dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=60)


def unprepare(dra: Path, claims: list[dict]) -> None:
    request = dra_v1_pb2.NodeUnprepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(namespace="vms", name=c["metadata"]["name"], uid=c["metadata"]["uid"])
            for c in claims
        ]
    )
    with grpc.insecure_channel(f"unix:{dra}") as channel:
        dra_v1_pb2_grpc.DRAPluginStub(channel).NodeUnprepareResources(request, timeout=60)


def test_metrics_count_each_claim_its_duration_and_errors_by_reason(root):
    proc, line = serve(root, "--metrics-address", "127.0.0.1:0")
    url = line.split(" metrics=")[1].strip()
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/metrics")
    try:
        before = scrape(url)
        good = [allocated_claim(i) for i in range(3)]
        stale = allocated_claim(3, uid="00000000-0000-4000-8000-00000000dead")
        answer = prepare(root / "plugin" / "dra.sock", [*good, stale])
        assert [answer.claims[c["metadata"]["uid"]].error for c in good] == ["", "", ""]
        assert "uid" in answer.claims[stale["metadata"]["uid"]].error
        prepared = scrape(url)
        unprepare(root / "plugin" / "dra.sock", good[:2])
        after = scrape(url)
    finally:
        stop(proc)

    def moved(name, labels=(), since=before, now=prepared):
        key = (name, tuple(sorted(labels)))
        return now[key] - since.get(key, 0.0)

    success, error = (("result", "success"),), (("result", "error"),)
    assert moved("kvdev_plugin_prepare_claims_total", success) == 3
    assert moved("kvdev_plugin_prepare_claims_total", error) == 1
    assert moved("kvdev_plugin_prepare_claim_duration_seconds_count") == 4
    assert moved("kvdev_plugin_prepare_claim_duration_seconds_bucket", (("le", "+Inf"),)) == 4
    assert moved("kvdev_plugin_prepare_claim_duration_seconds_sum") > 0
    reason = (("operation", "prepare"), ("reason", "uid_mismatch"))
    assert moved("kvdev_plugin_errors_total", reason) == 1
    assert prepared[("kvdev_plugin_prepared_claims", ())] == 3
    assert moved("kvdev_plugin_unprepare_claims_total", success, prepared, after) == 2
    assert moved("kvdev_plugin_unprepare_claim_duration_seconds_count", (), prepared, after) == 2
    assert after[("kvdev_plugin_prepared_claims", ())] == 1


def run_serve(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "kvdev.host", "serve", "--driver", DRIVER]
    args += ["--claims-dir", str(root / "claims"), "--plugin-data-dir", str(root / "plugin")]
    args += ["--cdi-dir", str(root / "cdi"), "--registry-dir", str(root / "registry")]
    return subprocess.run([*args, *extra], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--metrics-address", "8081", "--metrics-address '8081': must be HOST:PORT or :PORT"),
        ("--metrics-address", "h:99999", "--metrics-address 'h:99999'"),
        ("--health-port", "70000", "--health-port 70000: must be 1-65535, or 0 for off"),
    ],
)
def test_a_bad_flag_value_is_a_usage_error_naming_it(root, flag, value, message):
    done = run_serve(root, flag, value)
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize("flag", ["--metrics-address", "--health-port"])
def test_a_port_in_use_is_exit_1_naming_the_flag_and_leaves_no_socket(root, flag):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - what serve binds, taken first
        taken.listen()
        port = taken.getsockname()[1]
        value = f"127.0.0.1:{port}" if flag == "--metrics-address" else str(port)
        done = run_serve(root, flag, value)
    assert done.returncode == 1, done.stderr
    assert f"kvdev-host serve: {flag} " in done.stderr
    assert "cannot listen" in done.stderr
    assert not (root / "plugin" / "dra.sock").exists()
    assert not (root / "registry" / f"{DRIVER}-reg.sock").exists()
