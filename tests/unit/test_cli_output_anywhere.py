"""`kvdev`'s -o/--output is taken before or after the command, by every command that takes it
(as kubectl does), `metadata validate` included; run in-process on files written here."""

import json

import pytest
from builders import metadata_doc, stream

from kvdev.guest.cli import main as cli

AGENT_COMMANDS = {  # every command that asks the agent, with the arguments it needs
    "status": [],
    "devices": [],
    "explain": ["vf-1"],
    "plan": [],
    "wait": [],
    "reconcile": [],
    "metrics": [],
    "collect": [],
}


def test_every_command_of_the_parser_is_covered_here():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(commands) == {*AGENT_COMMANDS, "metadata"}


@pytest.mark.parametrize("command", sorted(AGENT_COMMANDS))
@pytest.mark.parametrize("option", [["-o", "json"], ["--output", "json"], ["--output=json"]])
def test_the_agent_commands_take_o_before_and_after_the_command(command, option):
    parser = cli.build_parser()
    rest = AGENT_COMMANDS[command]
    before = parser.parse_args([*option, command, *rest])
    after = parser.parse_args([command, *rest, *option])
    assert before.output == after.output == "json"
    assert parser.parse_args([command, *rest]).output is None


@pytest.fixture
def tree(tmp_path):
    path = tmp_path / "resourceclaims" / "vm1-nics" / "nic" / "sriov.example.com-metadata.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(stream(metadata_doc()))
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["-o", "json", "metadata", "validate"],
        ["--output", "json", "metadata", "validate"],
        ["metadata", "validate", "-o", "json"],
        ["metadata", "validate", "--output=json"],
        ["metadata", "validate", "--json"],
        ["--json", "metadata", "validate"],
    ],
)
def test_metadata_validate_prints_json_wherever_o_json_is(argv, tree, capsys):
    code = cli.main([*argv, str(tree)])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["kind"] == "MetadataValidation"
    assert [f["valid"] for f in report["files"]] == [True]


def test_metadata_validate_without_o_prints_the_text_report(tree, capsys):
    assert cli.main(["metadata", "validate", "--color", "never", str(tree)]) == 0
    out = capsys.readouterr().out
    assert "1 valid, 0 invalid" in out
    assert not out.startswith("{")


def test_an_output_validate_cannot_print_is_an_error_naming_it(tree, capsys):
    assert cli.main(["-o", "yaml", "metadata", "validate", str(tree)]) == 2
    assert "not -o yaml" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli.main(["metadata", "validate", "-o", "wide", str(tree)])
    assert usage.value.code == 2
    assert "invalid choice: 'wide'" in capsys.readouterr().err
