"""Hostile allocator inputs through ``allocate()`` and ``kvdev-host allocate`` (issue 8, item 5).

Every case of hostile_inputs.py (hostile CEL: deep nesting, huge strings and lists, cost
bombs by comprehension, string doubling, list nesting and map squaring; a 10,000-device
slice, 128 pools of 79 devices with constraints nobody can meet; malformed quantities; a YAML
alias bomb) runs twice: loaded and allocated in this process, and through the command line
in a child process whose peak RSS is its VmHWM (read every 20 ms: the mark only grows;
wait4's ru_maxrss would include this process's RSS at fork). Each must end in its expected outcome
(keyword, and a message naming the object and field) and, on the command line, stay within
MEMORY_BOUND of RSS, exit 0/1/2 and never print a Python traceback. Times are printed as
figures, not asserted (the allocator's filter timeout, FILTER_TIMEOUT, bounds the work). Then random
quantity strings and random CEL token soups must parse or fail with our own errors only.
"""

import json
import os
import random
import subprocess
import sys
import time
import traceback

import pytest
from hostile_inputs import DRIVER, NODE, all_cases, resource_slice

from kvdev.errors import SchemaError
from kvdev.host.allocation.allocator import (
    Allocated,
    Clock,
    Failed,
    NodeInfo,
    Unschedulable,
    allocate,
)
from kvdev.host.allocation.cel import CelError, compile_selector, device_view
from kvdev.host.k8s import DeviceClass, ResourceClaim, ResourceSlice, load, parse_quantity

pytestmark = pytest.mark.robustness

MEMORY_BOUND = 500  # MB of peak RSS of the kvdev-host process
HARD_TIMEOUT = 600.0  # a hang guard only: a run still going after this is killed (a failure)
FILTER_TIMEOUT = 2.0  # s: the allocator's own bound on a search (the scheduler's is 10 s)


def in_process(case):
    """(outcome, message) of load + allocate in this process."""
    try:
        objects = load(case.text, case.name)
    except SchemaError as e:
        return "invalid-input", "; ".join(str(p) for p in e.problems)
    outcome = allocate(
        NodeInfo(NODE, {}),
        [o for o in objects if isinstance(o, ResourceClaim)],
        classes=[o for o in objects if isinstance(o, DeviceClass)],
        slices=[o for o in objects if isinstance(o, ResourceSlice)],
        clock=Clock(now=time.monotonic, timeout=FILTER_TIMEOUT),
    )
    if isinstance(outcome, Allocated):
        return "allocated", ""
    if isinstance(outcome, Unschedulable):
        return "unschedulable", ""
    assert isinstance(outcome, Failed)
    return outcome.keyword, outcome.message


def via_cli(case, tmp_path):
    """(exit code, stdout, stderr, seconds, peak RSS in MB) of ``kvdev-host allocate``."""
    path = tmp_path / f"{case.name}.yaml"
    path.write_text(case.text, encoding="utf-8")
    out, err = tmp_path / f"{case.name}.out", tmp_path / f"{case.name}.err"
    cmd = [sys.executable, "-m", "kvdev.host", "allocate", "-f", str(path), "--node", NODE]
    cmd += ["--filter-timeout", f"{FILTER_TIMEOUT}s"]
    started = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen([*cmd, "-o", "json"], stdout=stdout, stderr=stderr)
        peak = 0
        while True:
            peak = max(peak, high_water_mark(proc.pid))
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > HARD_TIMEOUT:
                proc.kill()
                pid, status = os.waitpid(proc.pid, 0)
                break
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    seconds = time.monotonic() - started
    return proc.returncode, out.read_text(), err.read_text(), seconds, peak / 1024


def high_water_mark(pid):
    """The process's peak RSS so far (VmHWM, KB); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:  # noqa: PTH123
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def cli_outcome(code, stdout):
    if code == 0:
        return "allocated", ""
    try:
        body = json.loads(stdout.splitlines()[-1])
    except (ValueError, IndexError):
        return f"exit {code}, no JSON verdict", stdout[-300:]
    return body["reason"], body["message"]


def check(case, path, outcome, message, failures):
    if outcome != case.expect:
        failures.append(
            f"{case.name} ({path}): {outcome!r}, wanted {case.expect!r}: {message[:300]}"
        )
        return 1
    missing = [w for w in case.words if w not in message]
    if missing:
        failures.append(f"{case.name} ({path}): message lacks {missing}: {message[:400]}")
        return 1
    return 0


def test_hostile_inputs_are_bounded_and_clearly_refused(tmp_path, long_run, report):
    row = report("allocator-hostile (long)" if long_run else "allocator-hostile")
    failures: list[str] = []
    timings = []
    for case in all_cases(long_run):
        started = time.monotonic()
        try:
            outcome, message = in_process(case)
        except Exception:  # noqa: BLE001 - any escape is the finding
            row.crashes += 1
            failures.append(f"{case.name} (allocate): raised\n{traceback.format_exc()[-1500:]}")
            outcome, message = "crash", ""
        took = time.monotonic() - started
        row.inputs += 1
        if outcome != "crash":
            row.unintended += check(case, "allocate", outcome, message, failures)

        code, stdout, stderr, seconds, rss = via_cli(case, tmp_path)
        row.inputs += 1
        row.max_rss_mb = max(row.max_rss_mb, round(rss, 1))
        timings.append((case.name, round(took, 2), round(seconds, 2), round(rss)))
        if code not in (0, 1, 2) or "Traceback" in stderr:
            row.crashes += 1
            failures.append(f"{case.name} (cli): exit {code}\n{stderr[-1500:]}")
            continue
        if rss > MEMORY_BOUND:
            failures.append(f"{case.name} (cli): {rss:.0f} MB > {MEMORY_BOUND} MB")
        row.unintended += check(case, "cli", *cli_outcome(code, stdout), failures)
    print("\ncase, allocate() s, CLI s, CLI max RSS MB:")
    for line in timings:
        print("  ", *line)
    assert not failures, "\n".join(failures)


# --------------------------------------------------------------------------- random inputs

QUANTITY_ALPHABET = "0123456789.+-eEkKMGTPiumn \u0661x"
CEL_TOKENS = [
    *("device", "device.driver", "device.attributes", 'device.attributes["d.example.com"]'),
    *(".group", ".uniq", "[", "]", "(", ")", "{", "}", ",", ":", ".", "?", "!", "-"),
    *("+", "*", "/", "%", "==", "!=", "<", ">=", "&&", "||", "in", " "),
    *("1", "0", "-1", "1u", "2.5", "1e308", '"a"', "''", "true", "null", "b'x'", "x"),
    *(".all(x,", ".exists(x,", ".map(x,", ".filter(x,", "size(", "has(", "int(", "string("),
    *("quantity(", "semver(", "isQuantity(", ".matches(", "cel.bind(x,", "timestamp("),
    *(f"[{','.join('1' * 60)}]", '"9999999999999999999999"', "9223372036854775807"),
]


def test_random_quantities_and_cel_fail_only_with_our_errors(long_run, report):
    row = report("allocator-random (long)" if long_run else "allocator-random")
    rng = random.Random(8)  # noqa: S311 - reproducible test data
    one = resource_slice([{"name": "dev-0", "attributes": {"group": {"int": 1}}}])
    view = device_view(DRIVER, ResourceSlice.model_validate(one).spec.devices[0])
    escaped: list[str] = []
    slowest = 0.0
    for _ in range(20_000 if long_run else 2_000):
        text = "".join(rng.choice(QUANTITY_ALPHABET) for _ in range(rng.randrange(0, 24)))
        row.inputs += 1
        try:
            parse_quantity(text)
        except ValueError:
            pass
        except Exception as e:  # noqa: BLE001 - the finding
            escaped.append(f"parse_quantity({text!r}): {e!r}")
    for _ in range(5_000 if long_run else 600):
        expr = "".join(rng.choice(CEL_TOKENS) for _ in range(rng.randrange(1, 30)))
        row.inputs += 1
        started = time.monotonic()
        try:
            compile_selector(expr).matches(view)
        except CelError:
            pass
        except Exception as e:  # noqa: BLE001 - the finding
            row.crashes += 1
            escaped.append(f"{expr!r}: {e!r}")
        slowest = max(slowest, time.monotonic() - started)
    print(f"\nslowest random selector: {slowest * 1000:.1f} ms")
    assert not escaped, "\n".join(escaped[:20])
    assert slowest < 1.0
