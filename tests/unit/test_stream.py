import json

import pytest
from builders import (
    DEV0,
    V1,
    V1ALPHA1,
    V1BETA1,
    V2,
    alpha,
    both,
    device,
    metadata_doc,
    stream,
    with_attrs,
    with_device,
)

from agentlab import json_objects
from kvdev.errors import SchemaError, Severity
from kvdev.schema import (
    DEVICE_METADATA,
    Role,
    check_file,
    decode_stream,
    encode_stream,
)
from kvdev.schema.stream import MAX_DEPTH, MAX_STREAM_BYTES

SRC = "vm1-nics/nic/sriov.example.com-metadata.json"


def read(data, kind=DEVICE_METADATA):
    return decode_stream(data, kind, source=SRC)


def upstream_invalid(got):
    """(path, message) of each warning that says a conforming writer would not write this."""
    return [(w.path, w.message) for w in got.warnings if w.upstream_invalid]


def one_problem(data, kind=DEVICE_METADATA):
    with pytest.raises(SchemaError) as info:
        decode_stream(data, kind, source=SRC)
    [p] = info.value.problems
    assert (p.source, p.severity) == (SRC, Severity.ERROR)
    return p


# --------------------------------------------------------------------------- versions


def test_reads_newest_version_of_a_valid_stream():
    got = read(both(metadata_doc(2)))
    assert (got.api_version, got.index, got.skipped, got.warnings) == (V1BETA1, 0, (), ())
    assert got.document.to_json_dict() == metadata_doc(2)


def test_skips_unknown_future_version():
    future = {"apiVersion": V2, "kind": "DeviceMetadata", "spec": {"shape": ["new"]}}
    got = read(stream(future, metadata_doc(), alpha(metadata_doc())))
    assert got.api_version == V1BETA1
    assert got.index == 1
    assert got.skipped == (V2,)
    assert got.warnings == ()


def test_reads_v1alpha1_alone():
    got = read(stream(alpha(metadata_doc())))
    assert (got.api_version, got.index) == (V1ALPHA1, 0)


def test_a_value_a_conforming_writer_would_not_write_is_read_with_a_warning():
    got = read(stream(with_device(name="Bad_Name"), alpha(metadata_doc())))
    assert (got.api_version, got.index, got.fallback) == (V1BETA1, 0, ())
    assert got.document.requests[0].devices[0].name == "Bad_Name"
    [(path, message)] = upstream_invalid(got)
    assert path == f"{DEV0}.name"
    assert "'Bad_Name' is not a DNS label" in message


def test_a_known_version_that_does_not_decode_falls_back_to_the_next_known_one():
    broken = metadata_doc()
    broken["metadata"]["generation"] = "7"  # a string where Go has an int64: it cannot decode
    got = read(stream({"apiVersion": V2}, broken, alpha(metadata_doc())))
    assert (got.api_version, got.index, got.skipped) == (V1ALPHA1, 2, (V2,))
    assert [(p.index, p.path) for p in got.fallback] == [(1, "metadata.generation")]
    notes = [w.message for w in got.warnings]
    assert f"read as {V1ALPHA1} (stream[2]): a newer version in the stream is unusable" in notes
    assert any(m.startswith("not used: Input should be a valid integer") for m in notes)


def test_no_known_version_that_decodes_is_an_error_naming_each():
    broken = metadata_doc()
    broken["metadata"]["generation"] = "7"
    older = alpha(metadata_doc())
    older["requests"] = {"not": "a list"}
    with pytest.raises(SchemaError) as info:
        read(stream(broken, older))
    assert [(p.index, p.path) for p in info.value.problems] == [
        (0, "metadata.generation"),
        (1, "requests"),
    ]


@pytest.mark.parametrize("index", [0, 1])
def test_object_without_api_version_is_an_error(index):
    doc = metadata_doc()
    del doc["apiVersion"]
    objects = [{"apiVersion": V2}, doc][-index - 1 :]
    p = one_problem(stream(*objects))
    assert (p.index, p.path, p.message) == (index, "apiVersion", "required field is missing")


@pytest.mark.parametrize("data", [b"", b" \n\t\r\n"])
def test_empty_stream_is_an_error(data):
    p = one_problem(data)
    assert (p.index, p.path) == (None, "")
    assert p.message == "the stream holds no object (empty file?)"


def test_stream_of_unknown_versions_names_them():
    p = one_problem(stream({"apiVersion": V2}, {"apiVersion": "other.example.com/v1"}))
    assert p.index is None
    assert p.message == (
        f"no object of a supported version: found {V2}, other.example.com/v1; "
        f"kvdev reads {V1}, {V1BETA1}, {V1ALPHA1}"
    )


def test_torn_later_version_is_a_warning():
    data = both(metadata_doc())
    torn = data[: data.index(b"\n") + 40]
    got = read(torn)
    assert (got.api_version, got.index) == (V1BETA1, 0)
    [w] = got.warnings
    assert (w.severity, w.index, w.source, w.path) == (Severity.WARNING, 1, SRC, "")
    assert w.message.startswith("ignored after the object used: not valid JSON")
    assert "torn or partial write" in w.message


def test_later_version_with_different_content_is_a_warning():
    other = alpha(metadata_doc())
    other["metadata"]["generation"] = 2
    got = read(stream(metadata_doc(), other))
    assert got.document.metadata.generation == 1
    assert [(w.severity, w.index, w.message) for w in got.warnings] == [
        (
            Severity.WARNING,
            1,
            f"{V1ALPHA1} says something different from {V1BETA1} (stream[0], which is used)",
        )
    ]


def test_invalid_later_version_is_a_warning():
    later = alpha(metadata_doc())
    later["requests"][0]["devices"][0]["pool"] = 7
    got = read(stream(metadata_doc(), later))
    [w] = got.warnings
    assert (w.severity, w.index, w.path) == (Severity.WARNING, 1, f"{DEV0}.pool")
    assert w.message.startswith("ignored later version: Input should be a valid string")


def test_unknown_fields_are_warned_about_and_dropped_on_write():
    doc = with_device(futureField={"x": 1}, attributes={"a": {"int": 1, "unit": "GiB"}})
    doc["extraTop"] = True
    got = read(stream(doc))
    assert [(w.severity, w.index, w.path, w.message) for w in got.warnings] == [
        (Severity.WARNING, 0, "extraTop", "unknown field, ignored"),
        (Severity.WARNING, 0, f"{DEV0}.futureField", "unknown field, ignored"),
        (Severity.WARNING, 0, f"{DEV0}.attributes.a.unit", "unknown field, ignored"),
    ]
    written = encode_stream(got.document, DEVICE_METADATA, versions=[V1BETA1])
    assert json.loads(written) == with_attrs({"a": {"int": 1}})
    assert b"futureField" not in written


def test_duplicate_keys_warn_and_the_last_wins():
    text = json.dumps(metadata_doc()).replace('"generation": 1', '"generation": 1, "generation": 7')
    got = read(text.encode())
    assert got.document.metadata.generation == 7
    assert [(w.severity, w.index, w.message) for w in got.warnings] == [
        (Severity.WARNING, 0, "duplicate key 'generation': the last value wins")
    ]


def test_str_input_is_accepted():
    assert read(both(metadata_doc()).decode()).api_version == V1BETA1


# --------------------------------------------------------------------------- limits and paths


def test_33_attributes_are_read_with_a_warning():
    attrs = {f"vendor.example.com/a{i}": {"int": i} for i in range(33)}
    got = read(stream(with_attrs(attrs)))
    assert len(got.document.requests[0].devices[0].attributes) == 33
    assert upstream_invalid(got) == [(DEV0, "attributes: at most 32 allowed, got 33")]
    del attrs["vendor.example.com/a32"]
    assert read(stream(with_attrs(attrs))).warnings == ()


@pytest.mark.parametrize(("value", "size"), [("x" * 65, 65), ("é" * 33, 66)])
def test_long_string_attribute_is_read_with_a_warning(value, size):
    got = read(stream(with_attrs({"vendor.example.com/s": {"string": value}})))
    assert got.document.requests[0].devices[0].attribute("vendor.example.com/s").string == value
    assert upstream_invalid(got) == [
        (
            'requests[0].devices[0].attributes["vendor.example.com/s"].string',
            f"must be at most 64 bytes, got {size}",
        )
    ]


def test_64_byte_string_attribute_is_accepted():
    got = read(stream(with_attrs({"vendor.example.com/s": {"string": "é" * 32}})))
    assert got.document.requests[0].devices[0].attribute("vendor.example.com/s").string == "é" * 32
    assert got.warnings == ()


def test_17_ips_are_read_with_a_warning_and_all_used():
    ips = [f"10.0.0.{i}/24" for i in range(1, 18)]
    result = check_file(SRC, Role.DEVICE_METADATA, stream(with_device(networkData={"ips": ips})))
    assert result.ok
    assert result.described[0].ips == tuple(ips)
    [w] = [w for w in result.warnings if w.upstream_invalid]
    assert (w.source, w.index, w.path) == (SRC, 0, f"{DEV0}.networkData.ips")
    assert "at most 16 items" in w.message


def test_a_bare_ip_on_the_second_device_is_a_host_address_and_the_file_is_used():
    ips = ["10.0.0.1/24", "10.0.0.2/24", "10.0.0.3", "10.0.0.4/24"]
    result = check_file(
        SRC, Role.DEVICE_METADATA, stream(with_device(1, 2, networkData={"ips": ips}))
    )
    assert result.ok
    first, second = result.described
    assert (first.usable, second.usable) == (True, True)
    assert second.ips == ("10.0.0.1/24", "10.0.0.2/24", "10.0.0.3/32", "10.0.0.4/24")
    paths = {w.path: w for w in result.warnings}
    note = paths["requests[0].devices[1].networkData.ips[2]"]
    assert note.message == "'10.0.0.3' has no prefix length: used as the host address 10.0.0.3/32"


@pytest.mark.parametrize(
    ("ips", "used", "message"),
    [
        (
            ["2001:DB8::5/64"],
            ("2001:db8::5/64",),
            "is not in canonical form: used as 2001:db8::5/64",
        ),
        (["fd00::5"], ("fd00::5/128",), "used as the host address fd00::5/128"),
        (
            ["10.0.0.1/24", "10.0.0.1/24"],
            ("10.0.0.1/24",),
            "10.0.0.1/24 is listed twice: added once",
        ),
    ],
)
def test_ips_kvdev_can_act_on_safely_are_normalized_with_a_warning(ips, used, message):
    result = check_file(SRC, Role.DEVICE_METADATA, stream(with_device(networkData={"ips": ips})))
    assert result.ok
    assert result.described[0].usable
    assert result.described[0].ips == used
    assert any(message in w.message and not w.upstream_invalid for w in result.warnings)
    assert any(w.upstream_invalid for w in result.warnings)  # upstream's validation refuses it


def test_an_ip_that_is_no_address_costs_only_its_device():
    doc = metadata_doc(2)
    doc["requests"][0]["devices"][1]["networkData"] = {"ips": ["10.0.0.1/24", "banana"]}
    doc["requests"][0]["devices"][0]["networkData"] = {"ips": ["10.0.0.9/24"]}
    result = check_file(SRC, Role.DEVICE_METADATA, stream(doc))
    assert result.ok
    good, bad = result.described
    assert good.usable
    assert good.ips == ("10.0.0.9/24",)
    assert not bad.usable
    [p] = bad.problems
    assert (p.path, p.message) == (
        "requests[0].devices[1].networkData.ips[1]",
        "'banana' is not an IP address; the device is left as it is",
    )


def test_hardware_address_that_is_no_mac_is_kept_with_a_warning():
    data = both(with_device(networkData={"hardwareAddress": "not-a-mac"}))
    result = check_file(SRC, Role.DEVICE_METADATA, data)
    assert result.ok
    assert result.document.requests[0].devices[0].network_data.hardware_address == "not-a-mac"
    [w] = result.warnings
    assert (w.severity, w.source, w.index) == (Severity.WARNING, SRC, 0)
    assert w.path == f"{DEV0}.networkData.hardwareAddress"
    assert w.message == "'not-a-mac' is not a MAC address; the device cannot be matched by MAC"
    assert result.described[0].mac is None
    assert b'"hardwareAddress": "not-a-mac"' in encode_stream(result.document, DEVICE_METADATA)


def test_33_devices_per_claim_are_read_with_a_warning():
    doc = metadata_doc(17)
    doc["requests"].append({"name": "other", "devices": [device(i) for i in range(16)]})
    got = read(stream(doc))
    assert sum(len(r.devices) for r in got.document.requests) == 33
    assert upstream_invalid(got) == [("", "requests: at most 32 devices per claim in all, got 33")]


# --------------------------------------------------------------------------- bad input


def _set(path, value):
    def mutate(doc):
        *parents, last = path
        target = doc
        for key in parents:
            target = target[key]
        target[last] = value
        return doc

    return mutate


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [  # what Go's decoder itself refuses: the object does not decode
        (_set(["kind"], "ResourceClaim"), "kind", f"must be 'DeviceMetadata' for {V1BETA1}"),
        (_set(["metadata", "generation"], "1"), "metadata.generation", "valid integer"),
        (_set(["metadata", "generation"], 1.0), "metadata.generation", "valid integer"),
        (_set(["metadata", "generation"], value=True), "metadata.generation", "valid integer"),
        (_set(["metadata", "generation"], 2**63), "metadata.generation", "64-bit"),
        (_set(["metadata", "name"], 5), "metadata.name", "valid string"),
        (_set(["requests", 0, "devices"], {}), "requests[0].devices", "valid list"),
    ],
)
def test_wrong_types_are_errors_at_their_path(mutate, path, message):
    p = one_problem(stream(mutate(metadata_doc())))
    assert (p.source, p.index, p.path) == (SRC, 0, path)
    assert message in p.message


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [  # what Go's decoder accepts: kvdev reads it, and says a conforming writer would not
        (_set(["metadata", "generation"], -1), "metadata.generation", "greater than or equal"),
        (_set(["requests", 0, "name"], "a/b/c"), "requests[0].name", "more than one '/'"),
        (_set(["metadata"], None), "metadata", "valid dictionary"),
        (_set(["podClaimName"], "Pod"), "podClaimName", "is not a DNS label"),
        (lambda d: d.pop("metadata") and d, "metadata", "required field is missing"),
    ],
)
def test_wrong_values_are_warnings_at_their_path(mutate, path, message):
    got = read(stream(mutate(metadata_doc())))
    [(where, text)] = upstream_invalid(got)
    assert where == path
    assert message in text


def _nested(depth):
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_at_max_depth_is_accepted():
    doc = metadata_doc()
    doc["deep"] = _nested(MAX_DEPTH - 1)  # the object itself is level 1
    assert [w.path for w in read(stream(doc)).warnings] == ["deep"]


@pytest.mark.parametrize(
    ("data", "index", "message"),
    [
        (b'{"apiVersion": NaN}', 0, "not valid JSON: NaN is not valid JSON"),
        (b'{"a": Infinity}', 0, "not valid JSON: Infinity is not valid JSON"),
        (b'{"a": -Infinity}', 0, "not valid JSON: -Infinity is not valid JSON"),
        (b'{"apiVersion": "x"', 0, "not valid JSON: Expecting ',' delimiter (line 1 column 19)"),
        (b"\xff{}", 0, "not valid JSON"),  # U+FFFD outside a string, as Go reads it
        (b'{"a": "\xc3"}', 0, "required field is missing"),  # "a" is "\ufffd", as in Go
        (b" " * (MAX_STREAM_BYTES + 1), None, f"file is {MAX_STREAM_BYTES + 1} bytes"),
        (b'{"a": ' + b"[" * 10001 + b"]" * 10001 + b"}", 0, "nested deeper than 10000 levels"),
        (b"[" * 100_000, 0, "nested deeper than 10000 levels"),
        (stream([metadata_doc()]), 0, "expected a JSON object, found an array"),
        (b'"metadata.resource.k8s.io/v1beta1"', 0, "expected a JSON object, found a string"),
        (b"null", 0, "expected a JSON object, found null"),
        (b"42", 0, "expected a JSON object, found a number"),
        (stream({"apiVersion": V2}) + b"true", 1, "expected a JSON object, found a boolean"),
        (stream({"apiVersion": 1}), 0, "must be a non-empty string"),
        (stream({"kind": "DeviceMetadata"}), 0, "required field is missing"),
    ],
)
def test_bad_streams_are_schema_errors(data, index, message):
    p = one_problem(data)
    assert p.index == index
    assert message in p.message


def test_stream_of_exactly_max_bytes_is_read():
    line = stream(metadata_doc())
    assert read(line + b" " * (MAX_STREAM_BYTES - len(line))).api_version == V1BETA1


# --------------------------------------------------------------------------- attributes


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ({"string": ""}, ""),
        ({"int": -(2**63)}, -(2**63)),
        ({"int": 2**63 - 1}, 2**63 - 1),
        ({"bool": False}, False),
        ({"version": "1.0.0-rc.1+build.5"}, "1.0.0-rc.1+build.5"),
        ({"strings": ["a", "b"]}, ["a", "b"]),
        ({"ints": [1, -2]}, [1, -2]),
        ({"bools": [True, False]}, [True, False]),
        ({"versions": ["1.2.3", "0.0.1"]}, ["1.2.3", "0.0.1"]),
    ],
)
def test_attribute_forms_are_accepted(attribute, value):
    got = read(stream(with_attrs({"dra.net/x": attribute})))
    [key] = attribute
    read_as = got.document.requests[0].devices[0].attributes["dra.net/x"]
    assert getattr(read_as, {"int": "int_", "bool": "bool_"}.get(key, key)) == value
    assert got.document.to_json_dict() == with_attrs({"dra.net/x": attribute})
    assert got.warnings == ()


@pytest.mark.parametrize(
    ("attribute", "path", "message"),
    [
        ({}, "", "exactly one of string, int, bool, version, strings, ints, bools, versions"),
        ({}, "", "(found: none)"),
        ({"int": 1, "bool": True}, "", "(found: int, bool)"),
        ({"string": None}, "", "(found: none)"),
        ({"strings": []}, ".strings", "a list-typed attribute must have at least one value"),
        ({"versions": []}, ".versions", "at least one value"),
        ({"version": "v1.2.3"}, ".version", "'v1.2.3' is not a semantic version"),
        ({"strings": ["ok", "x" * 65]}, ".strings[1]", "must be at most 64 bytes, got 65"),
    ],
)
def test_attribute_values_a_writer_must_not_write_are_warnings(attribute, path, message):
    got = read(stream(with_attrs({"x": attribute})))
    assert got.document.requests[0].devices[0].attributes["x"] is not None
    found = upstream_invalid(got)
    assert any(p == f"{DEV0}.attributes.x{path}" and message in m for p, m in found), found


@pytest.mark.parametrize(
    ("attribute", "path", "message"),
    [
        ({"int": 2**63}, ".int", "9223372036854775808 does not fit in a 64-bit signed integer"),
        ({"int": -(2**63) - 1}, ".int", "does not fit in a 64-bit signed integer"),
        ({"ints": [1, 2**64]}, ".ints[1]", "does not fit in a 64-bit signed integer"),
        ({"int": 1.5}, ".int", "valid integer"),
        ({"int": "3"}, ".int", "valid integer"),
        ({"bool": "true"}, ".bool", "valid boolean"),
        ({"bools": [1]}, ".bools[0]", "valid boolean"),
    ],
)
def test_attribute_values_go_cannot_decode_are_errors(attribute, path, message):
    p = one_problem(stream(with_attrs({"x": attribute})))
    assert p.path == f"{DEV0}.attributes.x{path}"
    assert message in p.message


def test_more_than_48_attribute_values_are_read_with_a_warning():
    attrs = {"a": {"strings": ["s"] * 24}, "b": {"ints": list(range(23))}, "c": {"bool": True}}
    assert read(stream(with_attrs(attrs))).warnings == ()
    attrs["d"] = {"version": "1.0.0"}
    assert upstream_invalid(read(stream(with_attrs(attrs)))) == [
        (DEV0, "attributes: at most 48 values in total (list items count one each), got 49")
    ]


def test_bad_attribute_name_is_reported_on_the_key():
    [(path, message)] = upstream_invalid(read(stream(with_attrs({"dra.net/a-b": {"int": 1}}))))
    assert path == f'{DEV0}.attributes["dra.net/a-b"](key)'
    assert "is not a C identifier" in message


# --------------------------------------------------------------------------- writing


def test_encode_writes_one_indented_object_per_version_newest_first():
    doc = read(stream(metadata_doc(2))).document
    data = encode_stream(doc, DEVICE_METADATA)
    objects = json_objects(data)
    assert [o["apiVersion"] for o in objects] == [V1BETA1, V1ALPHA1]
    assert data.count(b"\n}\n") == 2  # each object ends with a newline
    assert data.startswith(b'{\n  "kind": "DeviceMetadata",\n  "apiVersion": "')
    assert objects[1] == alpha(metadata_doc(2))


@pytest.mark.parametrize(
    ("versions", "written"),
    [([V1ALPHA1], [V1ALPHA1]), ([V1BETA1], [V1BETA1]), ([V1ALPHA1, V1BETA1], [V1BETA1, V1ALPHA1])],
)
def test_encode_versions_restricts_and_orders(versions, written):
    doc = read(stream(metadata_doc())).document
    out = encode_stream(doc, DEVICE_METADATA, versions=versions)
    assert [o["apiVersion"] for o in json_objects(out)] == written


def test_encode_refuses_unknown_versions():
    doc = read(stream(metadata_doc())).document
    with pytest.raises(ValueError, match=r"cannot write DeviceMetadata as metadata\.resource"):
        encode_stream(doc, DEVICE_METADATA, versions=[V2])


def test_encode_keeps_non_ascii_text_readable():
    doc = read(stream(with_attrs({"model": {"string": "Grafikkarte €"}}))).document
    assert "Grafikkarte €".encode() in encode_stream(doc, DEVICE_METADATA)


@pytest.mark.parametrize("field", ["driver", "pool", "name"])
def test_a_device_that_cannot_be_told_from_others_is_unusable_alone(field):
    doc = metadata_doc(2)
    doc["requests"][0]["devices"][0][field] = None  # Go: the empty string
    result = check_file(SRC, Role.DEVICE_METADATA, stream(doc))
    assert result.ok
    first, second = result.described
    assert not first.usable
    assert second.usable
    assert [(p.path, p.message) for p in first.problems] == [
        (f"{DEV0}.{field}", "is empty: the device cannot be told from others")
    ]


def test_nesting_past_max_depth_up_to_gos_limit_is_read_and_emptied():
    # upstream's reader (encoding/json) reads 10000 levels; what kvdev reads is never that deep
    doc = metadata_doc()
    doc["deep"] = []
    deep = b"[" * 9999 + b"]" * 9999  # with the object itself: 10000 levels, Go's limit
    got = read(stream(doc).replace(b'"deep": []', b'"deep": ' + deep))
    assert [w.path for w in got.warnings] == ["deep"]
    assert got.document.requests[0].devices[0].name == "vf-0"


def test_encode_writes_each_version_as_a_whole_encode_of_it_would():
    """Each version after the first is the first's text with its apiVersion (encoded once)."""
    from kvdev.schema import gojson  # noqa: PLC0415
    from kvdev.schema.stream import _with_api_version  # noqa: PLC0415

    doc = read(stream(with_attrs({"apiVersion": {"string": '"apiVersion": "x"\n  <&>'}}))).document
    layout = DEVICE_METADATA.go_layout
    whole = "".join(
        gojson.marshal_indent(gojson.go_value(doc.to_json_dict() | {"apiVersion": v}, layout))
        + "\n"
        for v in (V1BETA1, V1ALPHA1)
    )
    assert encode_stream(doc, DEVICE_METADATA).decode() == whole
    # compact: only a first apiVersion key is replaced; anything else is encoded again
    assert _with_api_version('{"apiVersion":"a","x":{"apiVersion":"a"}}', "a", "b") == (
        '{"apiVersion":"b","x":{"apiVersion":"a"}}'
    )
    assert _with_api_version('{"x":{"apiVersion":"a"},"apiVersion":"a"}', "a", "b") is None
    assert _with_api_version('{\n  "x": {\n    "apiVersion": "a"\n  }\n}', "a", "b") is None
