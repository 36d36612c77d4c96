"""guest.config: merging flat keys and loading real TOML files, with errors naming file and key."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvdev.errors import UsageError
from kvdev.guest.adapters.config import AgentConfig, from_toml, merge

KNOWN = (
    "altnames, config-drive, config-root, hints, link-dir, log-level, match-kinds, metadata-root, "
    "poll-interval, read-deadline, socket, state-dir"
)

AGENT = [sys.executable, "-m", "kvdev.guest"]  # the module: the .deb's build tests run from source
POLL = "poll-interval must be 'auto' or a number of seconds from 0 (off) to 3600"


@pytest.mark.parametrize(
    ("key", "value", "attr", "expected"),
    [
        ("metadata-root", "/srv/meta", "metadata_root", Path("/srv/meta")),
        ("hints", "/etc/kvdev/hints.json", "hints", Path("/etc/kvdev/hints.json")),
        ("config-drive", "/mnt/cd/meta_data.json", "config_drive", Path("/mnt/cd/meta_data.json")),
        ("socket", "/run/k.sock", "socket", Path("/run/k.sock")),
        ("state-dir", "relative/state", "state_dir", Path("relative/state")),
        ("link-dir", "/etc/systemd/network", "link_dir", Path("/etc/systemd/network")),
        ("altnames", False, "altnames", False),
        ("match-kinds", ["veth", "dummy"], "match_kinds", ("veth", "dummy")),
        ("match-kinds", [], "match_kinds", ()),
        ("log-level", "debug", "log_level", "debug"),
        ("log-level", "warning", "log_level", "warning"),
        ("log-level", "error", "log_level", "error"),
        ("poll-interval", "auto", "poll_interval", None),
        ("poll-interval", 0, "poll_interval", 0.0),
        ("poll-interval", 0.5, "poll_interval", 0.5),
    ],
)
def test_merge_sets_one_key(key, value, attr, expected):
    merged = merge(AgentConfig(), {key: value}, source="t.toml")
    assert getattr(merged, attr) == expected
    assert type(getattr(merged, attr)) is type(expected)
    others = [f for f in AgentConfig.__slots__ if f != attr]
    assert [getattr(merged, f) for f in others] == [getattr(AgentConfig(), f) for f in others]


def test_merge_keeps_what_the_base_had():
    base = AgentConfig(once=True, dry_run=True, log_level="debug")
    merged = merge(base, {"altnames": False}, source="t.toml")
    assert merged == AgentConfig(once=True, dry_run=True, log_level="debug", altnames=False)


def test_merge_of_nothing_is_the_base():
    base = AgentConfig(metadata_root=Path("/m"))
    assert merge(base, {}, source="t.toml") == base


@pytest.mark.parametrize("key", ["bogus", "once", "dry-run", "metadataRoot"])
def test_unknown_key_names_the_source_the_key_and_the_known_keys(key):
    with pytest.raises(UsageError) as e:
        merge(AgentConfig(), {key: True}, source="/etc/kvdev/agent.toml")
    assert str(e.value) == f"/etc/kvdev/agent.toml: unknown key {key!r} (known: {KNOWN})"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("metadata-root", 5, "metadata-root must be a non-empty path string"),
        ("link-dir", "", "link-dir must be a non-empty path string"),
        ("hints", ["/a"], "hints must be a non-empty path string"),
        ("altnames", "yes", "altnames must be true or false"),
        ("altnames", 1, "altnames must be true or false"),
        ("match-kinds", "veth", 'match-kinds must be a list of link kinds, e.g. ["veth"]'),
        ("match-kinds", ["veth", 3], 'match-kinds must be a list of link kinds, e.g. ["veth"]'),
        ("log-level", "verbose", "log-level must be debug, info, warning or error"),
        ("log-level", "INFO", "log-level must be debug, info, warning or error"),
        ("log-level", 10, "log-level must be debug, info, warning or error"),
        ("poll-interval", -1, POLL),
        ("poll-interval", "fast", POLL),
        ("poll-interval", True, POLL),
        ("poll-interval", "nan", POLL),
        ("poll-interval", 7200, POLL),
    ],
)
def test_wrong_type_names_the_source_and_the_key(key, value, message):
    with pytest.raises(UsageError) as e:
        merge(AgentConfig(), {key: value}, source="a.toml")
    assert str(e.value) == f"a.toml: {message}"


@pytest.mark.parametrize(
    "text", ['log-level = ["debug"]\n', 'log-level = { level = "debug" }\n'], ids=["array", "table"]
)
def test_unhashable_log_level_is_a_usage_error(tmp_path, text):
    # Regression: `value not in {...}` on an array or table raised TypeError, not UsageError.
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as e:
        from_toml(path, required=True)
    assert str(e.value) == f"{path}: log-level must be debug, info, warning or error"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_from_toml_reads_every_key(tmp_path):
    path = write(
        tmp_path / "agent.toml",
        """\
metadata-root = "/srv/meta"
hints = "/srv/hints.json"
config-drive = "/mnt/cd/openstack/latest/meta_data.json"
socket = "/run/x.sock"
state-dir = "/var/lib/x"
link-dir = "/etc/systemd/network"
altnames = false
match-kinds = ["veth"]
log-level = "warning"
""",
    )
    assert from_toml(path, required=True) == AgentConfig(
        metadata_root=Path("/srv/meta"),
        hints=Path("/srv/hints.json"),
        config_drive=Path("/mnt/cd/openstack/latest/meta_data.json"),
        socket=Path("/run/x.sock"),
        state_dir=Path("/var/lib/x"),
        link_dir=Path("/etc/systemd/network"),
        altnames=False,
        match_kinds=("veth",),
        log_level="warning",
    )


@pytest.mark.parametrize("required", [False, True])
def test_empty_file_gives_defaults(tmp_path, required):
    path = write(tmp_path / "agent.toml", "# nothing set\n")
    assert from_toml(path, required=required) == AgentConfig()


def test_missing_default_file_gives_defaults(tmp_path):
    assert from_toml(tmp_path / "absent.toml", required=False) == AgentConfig()


def test_missing_explicit_file_is_a_usage_error(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(UsageError) as e:
        from_toml(path, required=True)
    assert str(e.value) == f"{path}: no such config file"


@pytest.mark.parametrize(
    "text",
    [b'metadata-root = "/srv\n', b"altnames = \n", b"[x\n", b"\xff\xfe bad bytes\n"],
)
def test_unparseable_file_is_a_usage_error_naming_it(tmp_path, text):
    path = tmp_path / "agent.toml"
    path.write_bytes(text)
    with pytest.raises(UsageError) as e:
        from_toml(path, required=False)
    assert str(e.value).startswith(f"{path}: ")
    assert len(str(e.value)) > len(f"{path}: ")


def test_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError) as e:
        from_toml(tmp_path, required=False)
    assert str(e.value) == f"{tmp_path}: [Errno 21] Is a directory: '{tmp_path}'"


def test_unknown_key_in_a_file_names_the_file(tmp_path):
    path = write(tmp_path / "agent.toml", 'metadata-root = "/m"\nmetdata-root = "/n"\n')
    with pytest.raises(UsageError) as e:
        from_toml(path, required=True)
    assert str(e.value) == f"{path}: unknown key 'metdata-root' (known: {KNOWN})"


def test_a_table_is_an_unknown_key(tmp_path):
    path = write(tmp_path / "agent.toml", '[agent]\nmetadata-root = "/m"\n')
    with pytest.raises(UsageError) as e:
        from_toml(path, required=True)
    assert str(e.value) == f"{path}: unknown key 'agent' (known: {KNOWN})"


def test_wrong_type_in_a_file_names_the_file(tmp_path):
    path = write(tmp_path / "agent.toml", 'altnames = "no"\n')
    with pytest.raises(UsageError) as e:
        from_toml(path, required=True)
    assert str(e.value) == f"{path}: altnames must be true or false"


@pytest.mark.parametrize(
    ("config", "hints_path"),
    [
        (
            AgentConfig(),
            Path("/var/run/kubernetes.io/dra-device-attributes/kvdev/guest-hints.json"),
        ),
        (AgentConfig(metadata_root=Path("/srv/m")), Path("/srv/m/kvdev/guest-hints.json")),
        (AgentConfig(metadata_root=Path("/srv/m"), hints=Path("/h.json")), Path("/h.json")),
    ],
)
def test_hints_path_defaults_under_the_metadata_root(config, hints_path):
    assert config.hints_path == hints_path


def test_hints_path_follows_a_metadata_root_from_a_file(tmp_path):
    path = write(tmp_path / "agent.toml", 'metadata-root = "/srv/meta"\n')
    assert from_toml(path, required=True).hints_path == Path("/srv/meta/kvdev/guest-hints.json")


@pytest.mark.parametrize(
    ("flag", "expected"), [("auto", None), ("0", 0.0), ("2.5", 2.5), (None, None)]
)
def test_poll_interval_flag(flag, expected):
    from kvdev.guest.__main__ import build_parser, load_config  # noqa: PLC0415 - the entry point

    argv = ["--config", "/dev/null"] + (["--poll-interval", flag] if flag else [])
    assert load_config(build_parser().parse_args(argv)).poll_interval == expected


def test_poll_interval_flag_refuses_nonsense():
    from kvdev.guest.__main__ import build_parser, load_config  # noqa: PLC0415 - the entry point

    with pytest.raises(UsageError) as e:
        load_config(build_parser().parse_args(["--config", "/dev/null", "--poll-interval", "-1"]))
    assert str(e.value) == (
        "--poll-interval must be 'auto' or a number of seconds from 0 (off) to 3600"
    )


@pytest.mark.parametrize("value", [0, -1, "soon", True, 3601])
def test_a_read_deadline_that_is_no_positive_number_names_the_key(value):
    with pytest.raises(UsageError, match=r"agent.toml: read-deadline must be a number of seconds"):
        merge(AgentConfig(), {"read-deadline": value}, source="agent.toml")
    assert merge(AgentConfig(), {"read-deadline": 2}, source="f").read_deadline == 2.0


def test_agent_help_shows_the_real_defaults(monkeypatch):
    from kvdev.guest.__main__ import build_parser  # noqa: PLC0415

    monkeypatch.setenv("COLUMNS", "300")  # one line per option: nothing wrapped
    text = " ".join(build_parser().format_help().split())
    assert "default None" not in text
    for shown in (
        "metadata tree (default /var/run/kubernetes.io/dra-device-attributes)",
        "local API socket (default /run/kvdev/agent.sock)",
        "state directory (default /var/lib/kvdev)",
        "(default info)",
    ):
        assert shown in text


# ---------------------------------------------------------------- layers, drop-ins, the example

EXAMPLE = Path(__file__).resolve().parents[2] / "packaging/etc/agent.toml"


def test_the_shipped_example_is_the_defaults_and_documents_every_key_with_its_default():
    from kvdev.guest.adapters.config import KEYS  # noqa: PLC0415

    assert from_toml(EXAMPLE, required=True) == AgentConfig()  # everything commented out
    text = EXAMPLE.read_text()
    for key in KEYS:
        line = next(line for line in text.splitlines() if line.startswith(f"#{key} = "))
        alone = merge(AgentConfig(), tomllib.loads(line[1:]), source="example")
        if key not in {"hints", "config-drive"}:  # unset by default: the example shows a value
            assert alone == AgentConfig(), f"{line}: not the default"
        comment = text[: text.index(line)].rstrip().rsplit("\n\n", 1)[-1]
        assert comment.startswith("# "), f"{key} has no explanation above it"


def layers(tmp_path, *, env=None, flags=None, **files):
    from kvdev.guest.adapters.config import layered  # noqa: PLC0415

    config = tmp_path / "agent.toml"
    for name, text in files.items():
        path = config if name == "main" else tmp_path / "agent.toml.d" / f"{name}.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    return layered(config, required=False, env=env or {}, flags=flags or {})


def test_drop_ins_merge_in_name_order_over_the_file_and_each_value_says_where_from(tmp_path):
    got = layers(
        tmp_path,
        main='log-level = "warning"\nstate-dir = "/srv/state"\n',
        **{"20-b": 'log-level = "error"\n', "10-a": 'log-level = "debug"\naltnames = false\n'},
    )
    drop = tmp_path / "agent.toml.d"
    assert (got.config.log_level, got.config.state_dir, got.config.altnames) == (
        "error",
        Path("/srv/state"),
        False,
    )
    assert got.origins["log-level"] == f"drop-in {drop}/20-b.toml"
    assert got.origins["altnames"] == f"drop-in {drop}/10-a.toml"
    assert got.origins["state-dir"] == f"file {tmp_path}/agent.toml"
    assert got.origins["socket"] == "default"


def test_only_toml_drop_ins_are_read(tmp_path):
    got = layers(tmp_path, main="", **{"10-a": 'log-level = "debug"\n'})
    (tmp_path / "agent.toml.d" / "20-b.toml.dpkg-old").write_text('log-level = "error"\n')
    assert layers(tmp_path).config.log_level == got.config.log_level == "debug"


def test_the_environment_beats_the_files_and_the_command_line_beats_both(tmp_path):
    env = {"KVDEV_AGENT_LOG_LEVEL": "warning", "KVDEV_AGENT_MATCH_KINDS": "veth, dummy"}
    env |= {"KVDEV_AGENT_ALTNAMES": "no", "KVDEV_AGENT_POLL_INTERVAL": "0"}
    got = layers(tmp_path, env=env, flags={"log_level": "error"}, main='log-level = "debug"\n')
    assert (got.config.log_level, got.config.match_kinds) == ("error", ("veth", "dummy"))
    assert (got.config.altnames, got.config.poll_interval) == (False, 0.0)
    assert got.origins["log-level"] == "command line --log-level"
    assert got.origins["match-kinds"] == "environment KVDEV_AGENT_MATCH_KINDS"


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"10-bad": "log-level = 3\n"}, "agent.toml.d/10-bad.toml: log-level must be debug"),
        ({"10-bad": "nope = 1\n"}, "agent.toml.d/10-bad.toml: unknown key 'nope'"),
        ({"env": {"KVDEV_AGENT_ALTNAMES": "maybe"}}, "environment KVDEV_AGENT_ALTNAMES: altnames"),
    ],
)
def test_a_bad_drop_in_or_variable_is_named(tmp_path, where, message):
    env = where.pop("env", None)
    with pytest.raises(UsageError, match=re.escape(message)):
        layers(tmp_path, env=env, **where)


def test_dump_config_is_toml_the_agent_reads_back_with_each_origin(tmp_path):
    from kvdev.guest.adapters.config import dump  # noqa: PLC0415

    got = layers(tmp_path, flags={"socket": Path("/run/a b.sock")}, main="altnames = false\n")
    text = dump(got)
    assert f"altnames = false  # file {tmp_path}/agent.toml" in text.splitlines()
    assert 'socket = "/run/a b.sock"  # command line --socket' in text.splitlines()
    assert merge(AgentConfig(), tomllib.loads(text), source="dump") == got.config


def agent(*args, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KVDEV_AGENT_")}
    return subprocess.run(
        [*AGENT, *args],
        capture_output=True,
        text=True,
        env=environ | (env or {}),
        timeout=60,
        check=False,
    )


def test_kvdev_agent_dump_config_and_a_bad_configuration_exits_2(tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text('log-level = "debug"\n')
    done = agent(
        "--config", str(config), "--dump-config", "--json", env={"KVDEV_AGENT_SOCKET": "/x"}
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["log-level"] == {"value": "debug", "source": f"file {config}"}
    assert body["socket"] == {"value": "/x", "source": "environment KVDEV_AGENT_SOCKET"}
    (tmp_path / "agent.toml.d").mkdir()
    (tmp_path / "agent.toml.d" / "50-x.toml").write_text("log-level = [\n")
    bad = agent("--config", str(config), "--once")
    assert bad.returncode == 2  # RestartPreventExitStatus=2 in kvdev-agent.service
    assert bad.stderr.startswith(f"kvdev-agent: {tmp_path}/agent.toml.d/50-x.toml: ")
