"""systemd integration: sd_notify, socket activation and journal logging, stdlib fallback.

``notify`` sends READY=1 / STATUS= / WATCHDOG=1 / STOPPING=1 to ``$NOTIFY_SOCKET`` (abstract
sockets, written ``@name``, included); it is a no-op outside systemd. ``watchdog_interval``
reads ``$WATCHDOG_USEC`` (honouring ``$WATCHDOG_PID``) and returns half of it, the ping
period systemd recommends. ``listen_fds`` returns the sockets systemd passed (``LISTEN_FDS``).
``log_handler`` returns a journal handler with structured fields
when systemd-python is installed, else a plain stderr handler.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from kvdev.printable import PrintableFormatter, escape


def notify(*fields: str) -> bool:
    """Send ``KEY=VALUE`` lines to systemd; False when not under systemd or on failure.

    Never blocks: a notify socket whose queue is full (systemd hung or slow) drops this
    message (EAGAIN) rather than stopping the reconcile loop; the next one says it again.
    """
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or not fields:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.send("\n".join(fields).encode(), socket.MSG_DONTWAIT)
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between watchdog pings (half of WATCHDOG_USEC), or None when not asked."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2_000_000 if value > 0 else None


class _Fields(PrintableFormatter):
    """Plain-text formatter that appends structured fields (device, claim, step) when set.

    The record and its fields are escaped (``kvdev.printable``): names from metadata cannot
    drive the terminal that shows the log.
    """

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = [
            escape(f"{key}={getattr(record, key)}")
            for key in ("DEVICE", "CLAIM", "STEP")
            if getattr(record, key, None)
        ]
        return f"{text} ({', '.join(extra)})" if extra else text


def log_handler() -> logging.Handler:
    """The journal when systemd-python is there and we run under systemd, else stderr."""
    if os.environ.get("JOURNAL_STREAM") or os.environ.get("INVOCATION_ID"):
        try:
            from systemd.journal import JournalHandler  # noqa: PLC0415 - optional dependency

            handler: logging.Handler = JournalHandler(SYSLOG_IDENTIFIER="kvdev-agent")
        except ImportError:
            pass
        else:  # the journal has PRIORITY and the logger's name as fields: the message alone
            handler.setFormatter(PrintableFormatter("%(message)s"))
            return handler
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(_Fields("%(levelname)s %(message)s"))
    return stream


SD_LISTEN_FDS_START = 3


def listen_fds(*, unset: bool = True) -> list[int]:
    """File descriptors passed by systemd socket activation (``LISTEN_FDS``), if for us.

    With ``unset`` the variables are removed so that child processes do not inherit them.
    """
    count = os.environ.get("LISTEN_FDS")
    pid = os.environ.get("LISTEN_PID")
    if unset:
        for name in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
    if not count or pid != str(os.getpid()):
        return []
    try:
        n = int(count)
    except ValueError:
        return []
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + max(n, 0)))
