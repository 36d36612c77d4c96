"""Regressions: schema bugs the test suite found, each fixed; the comment says what it was."""

import pytest
from builders import DEV0, V1BETA1, both, hint, hints_doc, stream, with_attrs, with_device

from kvdev.errors import SchemaError
from kvdev.schema import DEVICE_METADATA, Role, check_file, decode_stream, encode_stream, sniff_role
from kvdev.schema.stream import MAX_STREAM_BYTES


def _problems(data):
    with pytest.raises(SchemaError) as info:
        decode_stream(data, DEVICE_METADATA)
    return info.value.problems


# was: validate_by_name=True accepts snake_case JSON keys
def test_snake_case_key_is_not_the_union_member():
    # Upstream ignores the unknown key "int_", so the union has no member set: not a value a
    # conforming writer writes (a warning), and kvdev reads no int from it.
    got = decode_stream(stream(with_attrs({"x": {"int_": 5}})), DEVICE_METADATA)
    assert got.document.requests[0].devices[0].attributes["x"].int_ is None
    assert [w.path for w in got.warnings if w.upstream_invalid] == [f"{DEV0}.attributes.x"]


# was: validate_by_name=True accepts snake_case JSON keys
def test_snake_case_network_data_is_an_ignored_unknown_field():
    got = decode_stream(stream(with_device(network_data={"ips": ["10.0.0.1/24"]})), DEVICE_METADATA)
    assert got.document.requests[0].devices[0].network_data is None
    assert [w.path for w in got.warnings] == [f"{DEV0}.network_data"]


# was: encode_stream raises UnicodeEncodeError
def test_lone_surrogate_that_was_read_can_be_written():
    data = (
        b'{"apiVersion":"metadata.resource.k8s.io/v1beta1","kind":"DeviceMetadata",'
        b'"metadata":{"name":"c","uid":"\\ud800"}}'
    )
    doc = decode_stream(data, DEVICE_METADATA).document  # accepted
    assert encode_stream(doc, DEVICE_METADATA)


# was: invalid UTF-8 anywhere rejects the whole stream
def test_tear_inside_a_multibyte_character_is_only_a_warning():
    data = both(with_attrs({"model": {"string": "é"}}))
    torn = data[: data.rindex("é".encode()) + 1]  # v1alpha1 cut after the first byte of é
    got = decode_stream(torn, DEVICE_METADATA)
    assert got.api_version == V1BETA1
    assert len(got.warnings) == 1


# was: the size limit counts characters when given a str
def test_size_limit_counts_bytes_of_a_str():
    [p] = _problems("é" * (MAX_STREAM_BYTES // 2 + 1))  # 4 MiB + 2 bytes as UTF-8
    assert p.message.startswith(f"file is {MAX_STREAM_BYTES + 2} bytes")


# was: sniff_role lets RecursionError escape
def test_sniff_role_survives_deep_nesting():
    data = b"[" * 3000 + b'"guest.kvdev.io/v1alpha1"'
    assert sniff_role("x.json", data) is Role.DEVICE_METADATA


# was: tag length is checked in characters, TAG_MAX_BYTES=256
def test_hint_tag_limit_is_in_bytes():
    result = check_file(
        "h.json", Role.GUEST_HINTS, stream(hints_doc(hint(guest={"tag": "é" * 200})))
    )
    [p] = result.errors
    assert p.path == "devices[0].guest.tag"


# was: a zoned IPv6 gateway (fe80::1%eth0) was accepted in a hint route
def test_route_gateway_rejects_a_zone():
    result = check_file(
        "h.json",
        Role.GUEST_HINTS,
        stream(
            hints_doc(
                hint(network={"routes": [{"destination": "::/0", "gateway": "fe80::1%eth0"}]})
            )
        ),
    )
    [p] = result.errors
    assert p.path == "devices[0].network.routes[0].gateway"
    assert "zone" in p.message


# was: role_of called "-metadata.json" (no driver) a metadata file, metadata_location did not
def test_metadata_file_without_driver_is_unrelated():
    from kvdev.schema import role_of  # noqa: PLC0415

    assert role_of("resourceclaims/c/r/-metadata.json") is Role.UNRELATED


# was: duplicate keys in a config drive's meta_data.json were dropped silently
def test_config_drive_duplicate_keys_warn():
    result = check_file("meta_data.json", Role.CONFIG_DRIVE, b'{"devices": [], "devices": null}')
    assert result.ok
    assert [w.message for w in result.warnings] == ["duplicate key 'devices': the last value wins"]


# Found by upstream's reader (tests/unit/test_metadata_reader_oracle.py) on its first run.


# was: a key spelled ApiVersion / KIND (which Go's Interpret matches) is "missing"
@pytest.mark.parametrize(
    ("api_key", "kind_key"),
    [("ApiVersion", "kind"), ("APIVERSION", "KIND"), ("apiVer\u017fion", "\u212aind")],
)
def test_type_meta_keys_match_case_insensitively_as_go_reads_them(api_key, kind_key):
    doc = with_device()
    doc[api_key] = doc.pop("apiVersion")
    doc[kind_key] = doc.pop("kind")
    got = decode_stream(stream(doc), DEVICE_METADATA)
    assert got.api_version == V1BETA1
    assert got.document.requests[0].devices[0].name == "vf-0"


# was: invalid UTF-8 inside a string cuts the stream there (Go reads U+FFFD for each byte)
def test_invalid_utf8_in_a_string_is_one_replacement_character_per_byte():
    data = stream(with_device()).replace(b'"vf-0"', b'"vf-\xe2\x82\xff0"')
    got = decode_stream(data, DEVICE_METADATA)
    assert got.document.requests[0].devices[0].name == "vf-\ufffd\ufffd\ufffd0"
    assert any("not valid UTF-8 at byte" in w.message for w in got.warnings)


# was: a number of more than 4300 digits (Python's limit) makes the stream "not valid JSON"
def test_a_number_of_any_length_is_read():
    doc = with_device()
    doc["big"] = 0
    data = stream(doc).replace(b'"big": 0', b'"big": 1' + b"0" * 5000)
    assert decode_stream(data, DEVICE_METADATA).document.requests[0].devices[0].name == "vf-0"
    doc["metadata"]["generation"] = 0
    too_big = stream(doc).replace(b'"generation": 0', b'"generation": 1' + b"0" * 5000)
    assert "64-bit" in _problems(too_big)[0].message  # an int64 still refuses it, as in Go


# was: a key given twice keeps only its last value (Go decodes both into the same field)
def test_duplicate_keys_combine_as_go_decodes_them():
    doc = with_device(attributes={"x": {"int": 1}, "y": {"bool": True}})
    text = stream(doc).decode().rstrip("}\n")
    late = ', "metadata": {"generation": 2}, "requests": [{"devices": [{"attributes": '
    late += '{"x": {"string": "s"}}}]}]}'
    got = decode_stream((text + late + "\n").encode(), DEVICE_METADATA).document
    assert (got.metadata.name, got.metadata.uid, got.generation) == ("vm1-nics", "uid-1", 2)
    device = got.requests[0].devices[0]
    assert (got.requests[0].name, device.name) == ("nic", "vf-0")  # slice elements are reused
    assert device.attributes["x"].string == "s"  # a map entry is replaced whole
    assert device.attributes["x"].int_ is None
    assert device.attributes["y"].bool_ is True  # the map keeps its other entries
