"""Names from metadata never drive a terminal: the escaping rule and every human rendering.

``kvdev.printable`` escapes C0 and C1 controls, DEL and bidi overrides; the agent's ``--once``
text, the applied-step log line, the agent's and ``kvdev-host``'s text logs and ``kvdev-host``'s
human output go through it. JSON stays exact (``kvdev-host --json``).
"""

import io
import json
import logging
import re
import sys
from pathlib import Path

from kvdev.guest.adapters import systemd
from kvdev.guest.views import tables
from kvdev.host import cli as host_cli
from kvdev.host import logs
from kvdev.printable import PrintableStream, escape, escape_tree

TITLE, CLEAR, CLIPBOARD = "\x1b]0;pwned\x07", "\x1b[2J", "\x1b]52;c;cHduZWQ=\x07"
CSI_C1, RLO = "\x9b31m", "\u202e"
CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def test_controls_and_bidi_overrides_become_visible_and_other_text_stays():
    assert escape(f"a{TITLE}b") == "a\\x1b]0;pwned\\x07b"
    assert escape(CLEAR + CSI_C1 + RLO + "\u2066\t\n\x7f") == (
        "\\x1b[2J\\x9b31m\\u202e\\u2066\\x09\\x0a\\x7f"
    )
    assert escape("vf-1 gpu.nvidia.com é 日本 ✓") == "vf-1 gpu.nvidia.com é 日本 ✓"
    assert escape_tree({"k\x1b": [f"v{CLEAR}", 3, None, {"x": RLO}]}) == {
        "k\\x1b": ["v\\x1b[2J", 3, None, {"x": "\\u202e"}]
    }


def device(**names):
    return {
        "ref": f"{names['claim']}/{names['request']}/{names['device']}",
        "phase": "Error",
        "interface": "eth1",
        "reason": f"blocked by {names['device']}",
        "evidence": [{"kind": "mac", "detail": f"on {names['device']}"}],
        **names,
    }


HOSTILE = device(claim=f"vm1{TITLE}", request=f"nics{CLEAR}", device=f"vf{CLIPBOARD}")


def test_the_agents_once_text_escapes_names_and_messages():
    body = {
        "devices": [HOSTILE],
        "unmanaged": [f"eth9{RLO}"],
        "metadataErrors": [f"bad{CLEAR}"],
        "conditions": [{"type": "X", "severity": "Warning", "message": TITLE}],
        "summary": f"1 error{CSI_C1}",
    }
    for color in (False, True):
        text = tables.pass_text(body, color)
        assert CONTROLS.findall(re.sub(r"\x1b\[[0-9;]*m", "", text)) == []
        assert "vf\\x1b]52;c;cHduZWQ=\\x07" in text


def test_the_applied_step_log_line_escapes_names():
    step = {"type": "Rename", "ifname": f"eth1{TITLE}", "newName": f"x{CLEAR}", "reason": RLO}
    assert CONTROLS.findall(tables.step_line(step)) == []


def test_the_agents_text_log_escapes_a_record_and_its_fields(monkeypatch):
    for name in ("JOURNAL_STREAM", "INVOCATION_ID"):
        monkeypatch.delenv(name, raising=False)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    handler = systemd.log_handler()
    record = logging.LogRecord("kvdev", logging.WARNING, __file__, 1, "device %s", (TITLE,), None)
    record.DEVICE = f"vm1{CLEAR}"
    handler.handle(record)
    line = stream.getvalue()
    assert CONTROLS.findall(line.rstrip("\n")) == []
    assert "\\x1b]0;pwned\\x07" in line
    assert "\\x1b[2J" in line


def test_kvdev_hosts_text_log_escapes_and_its_json_log_stays_exact(monkeypatch):
    for fmt in ("text", "json"):
        stream = io.StringIO()
        monkeypatch.setattr(sys, "stderr", stream)
        with logs.configured(fmt, "info", "test"):
            logging.getLogger("kvdev.test").warning("claim %s", f"vm1{TITLE}{RLO}")
        line = stream.getvalue().strip()
        if fmt == "text":
            assert CONTROLS.findall(line) == []
            assert line.endswith("claim vm1\\x1b]0;pwned\\x07\\u202e")
        else:
            assert json.loads(line)["msg"] == f"claim vm1{TITLE}{RLO}"


def test_a_printable_stream_keeps_lines_and_tabs_and_escapes_the_rest():
    raw = io.StringIO()
    out = PrintableStream(raw)
    out.write(f"a\tb{TITLE}\n")
    out.writelines([f"{CLEAR}c\n", f"{RLO}d\n"])
    assert raw.getvalue() == "a\tb\\x1b]0;pwned\\x07\n\\x1b[2Jc\n\\u202ed\n"


CLAIMS = Path(__file__).resolve().parents[2] / "packaging/examples/host/claims.yaml"


def test_kvdev_host_says_what_it_refused_without_replaying_the_name(tmp_path, capsys):
    first = CLAIMS.read_text().split("\n---\n")[0]
    hostile = tmp_path / "claims.yaml"
    hostile.write_text(first.replace("name: vm1-devices", 'name: "vm1\\e]0;pwned\\a"'))
    code = host_cli.main(["status", "-f", str(hostile), "--driver", "sriov.example.com"])
    out, err = capsys.readouterr()
    assert code != 0
    assert "vm1\\x1b]0;pwned\\x07" in err
    assert CONTROLS.findall((out + err).replace("\n", "")) == []


def test_status_lists_the_metadata_warnings_escaped():
    warned = f"m.json: stream[0]: requests[0].devices[0].name: 'vf{CLIPBOARD}' is not a DNS label"
    text = tables.status_text({"metadataWarnings": [warned], "converged": True})
    assert "warnings:" in text
    assert "[upstream] m.json: stream[0]: requests[0].devices[0].name: 'vf\\x1b]52;" in text
    assert CONTROLS.findall(text.replace("\n", "")) == []
