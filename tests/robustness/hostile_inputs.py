"""Hostile inputs for the DRA allocator: each a file's text and the outcome it must get.

A case is a YAML/JSON text (classes, slices, one claim) and what must come of it: the
allocator's keyword (or ``allocated`` / ``unschedulable`` / ``invalid-input``) and words its
message must contain (the object and the field it names). Builders only; the suite that runs
them is test_allocator_hostile.py.
"""

import json
from dataclasses import dataclass

DRIVER = "d.example.com"
NODE = "n"


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    expect: str  # allocated, unschedulable, invalid-input or an allocator keyword
    words: tuple[str, ...] = ()
    long_only: bool = False


def device_class(expression=f'device.driver == "{DRIVER}"'):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "c"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def device(i, *, pool=0, values=7, capacity=None):
    dev = {
        "name": f"dev-{i}",
        "attributes": {
            "group": {"int": (pool * 1000 + i) % values},
            "uniq": {"int": pool * 1000 + i},
        },
    }
    if capacity is not None:
        dev["allowMultipleAllocations"] = True
        dev["capacity"] = {"mem": {"value": capacity}}
    return dev


def resource_slice(devices, *, pool=0, name=None):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"s-{pool}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": f"pool-{pool}", "generation": 1, "resourceSliceCount": 1},
            "nodeName": NODE,
            "devices": devices,
        },
    }


def claim(*, count=1, mode="ExactCount", constraints=(), capacity=None):
    exactly = {"deviceClassName": "c", "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if capacity is not None:
        exactly["capacity"] = {"requests": {"mem": capacity}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "cl", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": exactly}],
                "constraints": list(constraints),
            }
        },
    }


def as_list(*objects):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def pools(count, per, *, values=7):
    return [
        resource_slice([device(i, pool=p, values=values) for i in range(per)], pool=p)
        for p in range(count)
    ]


# --------------------------------------------------------------------------- CEL


def _nest(depth, inner, wrap):
    for i in range(depth, 0, -1):
        inner = wrap(i, inner)
    return inner


def literal(n):
    return "[" + ",".join("1" for _ in range(n)) + "]"


def cel_case(name, expression, expect, *words):
    text = as_list(device_class(expression), resource_slice([device(i) for i in range(4)]), claim())
    return Case(f"cel-{name}", text, expect, words)


def cel_cases():
    sel = "class c: spec.selectors[0].cel.expression"
    macros = _nest(400, "true", lambda i, e: f"[1].all(x{i}, {e})")
    binds_str = "cel.bind(v0, 'xxxxxxxx', " + _nest(
        30, "size(v30) > 0", lambda i, e: f"cel.bind(v{i}, v{i - 1} + v{i - 1}, {e})"
    )
    binds_list = "cel.bind(v0, [1, 2], " + _nest(
        30, "size(v30) > 0", lambda i, e: f"cel.bind(v{i}, [v{i - 1}, v{i - 1}], {e})"
    )
    binds_map = "cel.bind(v0, [1, 2], " + _nest(
        8, "size(v8) > 0", lambda i, e: f"cel.bind(v{i}, v{i - 1}.map(x, v{i - 1}), {e})"
    )
    hundred = literal(100)
    return [
        cel_case("deep-parens", "(" * 4000 + "true" + ")" * 4000, "cel-compile-error", sel),
        cel_case("deep-not", "!" * 9000 + "true", "allocated"),
        cel_case("deep-minus", "-" * 5000 + "1 == 1", "allocated"),
        cel_case("deep-macros", macros, "cel-compile-error", sel),
        cel_case("deep-lists", "size(" + "[" * 4000 + "]" * 4000 + ") == 1", "cel-compile-error"),
        cel_case("deep-member", "has(device" + ".a" * 4000 + ")", "cel-runtime-error", sel),
        cel_case("deep-ternary", "true ? true : " * 700 + "false", "cel-compile-error", sel),
        cel_case("long-and-chain", "true && " * 1200 + "true", "allocated"),
        # 2,001 additions: upstream's estimate (2001) allows it and it runs at once (upstream's
        # parser refuses it as too deep: a compile-time difference, not a cost one)
        cel_case("long-plus-chain", "1 + " * 2000 + "1 == 2001", "allocated"),
        cel_case("huge-string", 'device.driver != "' + "a" * 10200 + '"', "allocated"),
        cel_case(
            "over-10KiB",
            'device.driver != "' + "a" * (1 << 20) + '"',
            "invalid-input",
            "spec.selectors[0].cel.expression",
            "10240",
        ),
        cel_case("huge-list", f"size({literal(5000)}) > 0", "allocated"),
        cel_case(
            "cost-bomb-1e6",
            f"{hundred}.all(a, {hundred}.all(b, {hundred}.all(c, true)))",
            "cel-cost-limit",
            sel,
        ),
        cel_case("string-doubling", binds_str + ")", "cel-cost-limit", "estimated"),
        cel_case("list-nesting", binds_list + ")", "cel-cost-limit", "estimated"),
        cel_case("map-squaring", binds_map + ")", "cel-cost-limit", "estimated"),
        cel_case(
            "attribute-squaring",
            "device.attributes.map(d, device.attributes.map(e, device.attributes)).size() > 0",
            "cel-cost-limit",
        ),
        cel_case(  # a constant pattern is compiled with the selector, as upstream does
            "regex-too-big",
            'device.driver.matches("(a{1000}){1000}")',
            "cel-compile-error",
            "invalid matches pattern",
        ),
        cel_case(
            "quantity-digits",
            f'quantity("{"9" * 200}").isGreaterThan(quantity("1"))',
            "cel-runtime-error",
            "more than 128 digits",
        ),
        cel_case("semver-digits", f'semver("{"9" * 5000}.0.0").major() > 0', "cel-runtime-error"),
    ]


# --------------------------------------------------------------------------- scale


def scale_cases():
    unique = [{"matchAttribute": f"{DRIVER}/uniq"}]
    distinct = [{"distinctAttribute": f"{DRIVER}/group"}]
    return [
        Case(
            "slice-10000-devices",
            as_list(device_class(), resource_slice([device(i) for i in range(10_000)]), claim()),
            "invalid-input",
            ("ResourceSlice/s-0", "devices: at most 128", "10000"),
        ),
        Case(
            "128-pools-first-fit-32",
            as_list(device_class(), *pools(128, 79), claim(count=32)),
            "allocated",
        ),
        Case(
            "128-pools-all-mode",
            as_list(device_class(), *pools(128, 79), claim(mode="All")),
            "too-many-devices",
            ("claim default/cl", "32"),
        ),
        Case(
            "128-pools-match-nothing",  # every pair tried: 10,112**2 / 2 checks
            as_list(device_class(), *pools(128, 79), claim(count=2, constraints=unique)),
            "filter-timeout",
            ("default/cl", "timed out trying to allocate devices"),
        ),
        Case(
            "128-pools-distinct-8-of-7",  # every 8-subset of 10,112 devices
            as_list(device_class(), *pools(128, 79), claim(count=8, constraints=distinct)),
            "filter-timeout",
            ("default/cl", "timed out trying to allocate devices"),
            long_only=True,
        ),
        Case(
            "128-pools-distinct-32-of-31",
            as_list(
                device_class(), *pools(128, 79, values=31), claim(count=32, constraints=distinct)
            ),
            "filter-timeout",
            ("default/cl",),
            long_only=True,
        ),
    ]


# --------------------------------------------------------------------------- quantities and YAML

BAD_QUANTITIES = {
    "three-dots": "1.2.3",
    "double-sign": "--1",
    "bad-suffix": "1Kii",
    "empty": "",
    "nan": "NaN",
    "arabic-digits": "\u0661\u0660",
    "exponent-1001": "1e1001",
    "5000-digits": "9" * 5000,
    "5000-decimals": "0." + "0" * 5000 + "1",
    "float": 1.5,
    "space": " 1Gi",
}


def quantity_cases():
    out = []
    for name, bad in BAD_QUANTITIES.items():
        on_device = as_list(
            device_class(), resource_slice([device(0, capacity=bad)]), claim(capacity="1")
        )
        on_request = as_list(
            device_class(), resource_slice([device(0, capacity="4Gi")]), claim(capacity=bad)
        )
        out.append(
            Case(
                f"quantity-device-{name}",
                on_device,
                "invalid-input",
                ("ResourceSlice/s-0", "capacity.mem.value"),
            )
        )
        out.append(
            Case(
                f"quantity-request-{name}",
                on_request,
                "invalid-input",
                ("ResourceClaim/default/cl", "capacity.requests.mem"),
            )
        )
    huge_int = as_list(
        device_class(), resource_slice([device(0, capacity="4Gi")]), claim(capacity="1")
    ).replace('"4Gi"', "9" * 5000)
    out.append(Case("quantity-json-int-5000-digits", huge_int, "invalid-input", ("number",)))
    return out


def alias_bomb(levels=9):
    """~1 KB of YAML whose opaque parameters expand to 10**levels strings."""
    text = f"""apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: c}}
spec: {{selectors: [{{cel: {{expression: 'device.driver == "{DRIVER}"'}}}}]}}
---
{json.dumps(resource_slice([device(0)]))}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: cl, namespace: default}}
x0: &x0 ["a","a","a","a","a","a","a","a","a","a"]
"""
    for i in range(1, levels):
        text += f"x{i}: &x{i} [" + ",".join([f"*x{i - 1}"] * 10) + "]\n"
    return (
        text
        + f"""spec:
  devices:
    requests: [{{name: r, exactly: {{deviceClassName: c}}}}]
    config:
    - requests: [r]
      opaque: {{driver: {DRIVER}, parameters: {{bomb: *x{levels - 1}}}}}
"""
    )


def yaml_cases():
    return [
        Case("yaml-alias-bomb", alias_bomb(), "invalid-input", ("alias",)),
        Case("yaml-nesting-100000", "[" * 100_000 + "]" * 100_000, "invalid-input", ("nesting",)),
    ]


def all_cases(long_run):
    cases = [*cel_cases(), *scale_cases(), *quantity_cases(), *yaml_cases()]
    return [c for c in cases if long_run or not c.long_only]
