"""How ``kvdev-host`` logs: text or JSON lines on stderr, and the client's retry noise folded.

Owns: ``configured`` (for a command's run, the root logger's handler of ours, at ``--log-level``, in
``--log-format``), ``JsonFormatter`` (one object a line, shaped like KubeVirt's and klog's
structured logs: ``ts`` RFC 3339 UTC with microseconds, ``level``, ``msg``, ``component``,
``pos``, and ``kind``/``namespace``/``name``/``uid`` of the object a record is about), ``about``
(the ``extra=`` that names that object) and ``RetryNoiseFilter``: urllib3 logs a warning with
the full exception repr for every retry of a failed request (three per failed list); those are
dropped, and the caller's own back-off logs one line per step instead
(``kube.client.unreachable`` words it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from kvdev.printable import PrintableFormatter

FORMATS: Final = ("text", "json")
LEVELS: Final = ("debug", "info", "warning", "error")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OBJECT: Final = "k8s_object"  # the LogRecord attribute ``about`` sets
_FIELDS: Final = ("kind", "namespace", "name", "uid")


def about(kind: str, namespace: str | None, name: str, uid: str | None = None) -> dict[str, Any]:
    """``extra=`` for a record about one Kubernetes object (empty parts are left out)."""
    parts = {"kind": kind, "namespace": namespace, "name": name, "uid": uid}
    return {OBJECT: {k: v for k, v in parts.items() if v}}


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        """``{"ts": ..., "level": ..., "msg": ..., "component": ..., "pos": ..., ...}``."""
        stamp = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            "component": self.component,
            "pos": f"{record.filename}:{record.lineno}",
            "logger": record.name,
        }
        concerned = getattr(record, OBJECT, None)
        if isinstance(concerned, dict):
            line.update({k: str(concerned[k]) for k in _FIELDS if concerned.get(k)})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class RetryNoiseFilter(logging.Filter):
    """Drops urllib3's ``Retrying (Retry(...)) after connection broken by ...`` warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a retry warning, True for anything else."""
        return not (isinstance(record.msg, str) and record.msg.startswith("Retrying ("))


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when the record is emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


_RETRY_FILTER: Final = RetryNoiseFilter()


@contextlib.contextmanager
def configured(log_format: str, level: str, component: str) -> Iterator[logging.Handler]:
    """For the block: the root logger at ``level``, a handler of ours on stderr, the filter.

    Afterwards the loggers are as they were (``main`` may run many times in one process).
    """
    root = logging.getLogger()
    pool = logging.getLogger("urllib3.connectionpool")
    handler = _StderrHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(component))
    else:
        handler.setFormatter(PrintableFormatter(TEXT_FORMAT))
    before = root.level
    root.addHandler(handler)
    root.setLevel(level.upper())
    pool.addFilter(_RETRY_FILTER)
    try:
        yield handler
    finally:
        pool.removeFilter(_RETRY_FILTER)
        root.removeHandler(handler)
        root.setLevel(before)
