"""Builders the host-side tests share: a slice of SR-IOV VFs and claims allocated from it.

``vf_slice(n)`` publishes ``vf-0`` .. ``vf-<n-1>`` of driver ``DRIVER`` on node-a;
``allocated_claim(i)`` is ``vms/claim-<i>``, allocated ``vf-<i>`` for request ``nic``.
``fill(path)`` writes until the file system is full (for small-tmpfs tests).
``start_serve(args)`` starts ``kvdev-host serve`` and returns once its sockets listen
(``start_serve_line``: and the line it printed then).
"""

import subprocess
import uuid

import pytest

DRIVER = "sriov.example.com"


def uid_of(i: int, base: int = 0xC1A1) -> str:
    """A stable claim UID for index ``i`` (``base`` keeps suites' UIDs apart)."""
    return str(uuid.UUID(int=base << 64 | i))


def vf_slice(count: int) -> dict:
    """One ResourceSlice with ``count`` VFs, each with its PCI address."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-vfs"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-a",
            "devices": [
                {
                    "name": f"vf-{i}",
                    "attributes": {
                        "resource.kubernetes.io/pciBusID": {
                            "string": f"0000:{0x3B + i // 8:02x}:02.{i % 8}"
                        }
                    },
                }
                for i in range(count)
            ],
        },
    }


def allocated_claim(i: int, *, uid: str | None = None, name: str | None = None) -> dict:
    """ResourceClaim ``vms/claim-<i>`` with ``vf-<i>`` allocated to its request ``nic``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name or f"claim-{i}", "namespace": "vms", "uid": uid or uid_of(i)},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "vf"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "nic", "driver": DRIVER, "pool": "node-a", "device": f"vf-{i}"}
                    ]
                }
            }
        },
    }


def fill(path) -> int:
    """Write to ``path`` until the file system is full; the errno that stopped it."""
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(b"x" * 4096)
            except OSError as e:
                return e.errno


class NeverRun:
    """Stands in for a compiled CEL program that must not be evaluated; counts attempts."""

    runs = 0

    def execute(self, _context):
        self.runs += 1
        raise AssertionError("the CEL program was evaluated")


def start_serve(args: list[str]) -> subprocess.Popen[str]:
    """Run ``args`` (a ``kvdev-host serve`` command line); return once both sockets listen."""
    return start_serve_line(args)[0]


def start_serve_line(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """``start_serve``, and the "serving" line it printed (with its health and metrics ports)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once both sockets listen
    if not line.startswith("serving"):
        proc.kill()
        pytest.fail(f"serve did not start: {line!r} {proc.communicate()[1]}")
    return proc, line
