"""``kvdev.host.logs``: the JSON line's fields, the object a record is about, the text format
kept as it was, urllib3's retry warnings dropped, and a transport error's short reason taken
from a real refused connection (urllib3 against a closed loopback port)."""

import json
import logging
import socket
from datetime import datetime

import pytest
import urllib3

from kvdev.host import logs
from kvdev.host.kube import client as kubeclient


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_json_line_has_the_klog_shaped_fields_and_the_object(capsys):
    log = logging.getLogger("kvdev.host.test")
    with logs.configured("json", "info", "kvdev-host-controller"):
        log.info("synced %d", 3, extra=logs.about("VirtualMachineInstance", "vms", "vm1", "u-1"))
        log.debug("not at info")
    [line] = lines(capsys.readouterr().err)
    assert line["msg"] == "synced 3"
    assert line["level"] == "info"
    assert line["component"] == "kvdev-host-controller"
    assert (line["kind"], line["namespace"], line["name"], line["uid"]) == (
        "VirtualMachineInstance",
        "vms",
        "vm1",
        "u-1",
    )
    assert line["ts"].endswith("Z")
    assert "." in line["ts"]  # sub-second
    assert datetime.fromisoformat(line["ts"]).utcoffset().total_seconds() == 0
    assert line["pos"].startswith("test_host_logs.py:")


def test_a_record_about_nothing_names_no_object_and_an_exception_is_one_line(capsys):
    log = logging.getLogger("kvdev.host.test")
    with logs.configured("json", "info", "kvdev-host-plugin"):
        try:
            raise ValueError("boom")  # noqa: TRY301 - the exception logged
        except ValueError:
            log.exception("prepare failed")
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    [line] = lines(err)
    assert not {"kind", "namespace", "name", "uid"} & set(line)
    assert line["level"] == "error"
    assert "ValueError: boom" in line["error"]


def test_text_stays_one_line_with_time_level_logger_and_message(capsys):
    with logs.configured("text", "warning", "kvdev-host-allocate"):
        logging.getLogger("kvdev.host.test").warning("careful")
        logging.getLogger("kvdev.host.test").info("quiet")
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith(" WARNING kvdev.host.test: careful")


def test_afterwards_the_loggers_are_as_they_were():
    root = logging.getLogger()
    before = (root.level, list(root.handlers), list(logging.getLogger("urllib3").filters))
    with logs.configured("json", "debug", "x"):
        assert root.level == logging.DEBUG
    after = (root.level, list(root.handlers), list(logging.getLogger("urllib3").filters))
    assert after == before


def test_urllib3s_retry_warnings_are_dropped_and_the_reason_is_short(capsys):
    """A real refused connection: urllib3 warns once per retry with nested reprs; none of it
    reaches stderr, and ``unreachable`` says it in a few words."""
    port = closed_port()
    pool = urllib3.PoolManager(retries=urllib3.Retry(total=3, backoff_factor=0))
    with logs.configured("text", "debug", "kvdev-host-controller"):
        with pytest.raises(urllib3.exceptions.MaxRetryError) as failed:
            pool.request("GET", f"http://127.0.0.1:{port}/api")
        logging.getLogger("urllib3.connectionpool").warning("Something else")
    err = capsys.readouterr().err
    assert "Retrying (" not in err
    assert "Something else" in err  # only the retry warnings go
    said = kubeclient.unreachable(f"http://127.0.0.1:{port}", failed.value)
    assert said == f"API server http://127.0.0.1:{port} unreachable: connection refused"
