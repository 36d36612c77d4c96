r"""Text from metadata made safe for a terminal: the escaping rule of every human rendering.

Names in a metadata file (claim, request, driver, pool, device) and anything else the host
wrote reach tables, ``explain``, text logs and ``kvdev-host`` summaries. A terminal acts on
control characters: ``ESC ] 0 ;`` retitles the window, ``ESC [ 2 J`` clears it, OSC 52 writes
the clipboard; a bidi override makes a name read as another. ``escape`` turns every C0 and C1
control (newline and tab too: a cell or a log record is one line), DEL and every bidi
embedding, override, isolate and mark into a visible ``\xNN`` / ``\uNNNN`` escape; all other
text is left as it is. ``escape_tree`` does that to every string of a JSON-ready value (keys
too), for renderers that take whole documents. JSON and YAML output is never passed through
here: it stays exact. ``PrintableFormatter`` is a logging formatter whose record text is
escaped the same way (a traceback keeps its own lines), and ``PrintableStream`` a text stream
that escapes what is written to it but newlines and tabs (for commands whose human output is
written in many places: ``kvdev-host``'s). Pure; imports only the stdlib.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Mapping
from typing import Final, TextIO

# C0 controls, DEL, C1 controls; ALM; LRM, RLM; LRE..RLO (embeddings, PDF, overrides);
# LRI..PDI (isolates); the line and paragraph separators (U+2028, U+2029)
_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")

# the same, but newline and tab: a stream's own line and column breaks
_UNSAFE_IN_STREAM: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every control, bidi override and line separator as a visible escape."""
    return _UNSAFE.sub(_visible, text)


def escape_tree(value: object) -> object:
    """``value`` (JSON-ready) with ``escape`` applied to every string in it, keys included."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, Mapping):
        return {
            escape(str(k)) if isinstance(k, str) else k: escape_tree(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [escape_tree(v) for v in value]
    return value


class PrintableFormatter(logging.Formatter):
    """A text formatter whose records are escaped (one record, one line of visible text)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        """The record's line as ``logging.Formatter`` makes it, escaped."""
        return escape(super().formatMessage(record))


class PrintableStream(io.TextIOBase):
    """``raw`` with every control but newline and tab, and every bidi override, escaped."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self._raw = raw

    def write(self, text: str) -> int:
        """Write ``text`` escaped; the length of ``text`` (all of it was taken)."""
        self._raw.write(_UNSAFE_IN_STREAM.sub(_visible, text))
        return len(text)

    def writable(self) -> bool:
        """Always."""
        return True

    def flush(self) -> None:
        """Flush ``raw``."""
        self._raw.flush()

    def isatty(self) -> bool:
        """Whether ``raw`` is a terminal."""
        return self._raw.isatty()


def unescaped(stream: TextIO) -> TextIO:
    """The stream under a ``PrintableStream`` (``stream`` itself otherwise).

    For a command's own terminal drawing (a progress bar's carriage return), never input text.
    """
    return stream._raw if isinstance(stream, PrintableStream) else stream  # noqa: SLF001
