"""Reading and writing versioned JSON streams, the KEP-5304 file format.

A file holds the same object once per API version, newest first, each followed by a newline
(upstream's Go writer indents each object; any JSON layout reads the same). ``decode_stream``
follows upstream's ``DecodeMetadataFromStream``, and is never stricter:

* objects are read in order; one whose ``apiVersion`` kvdev does not know is skipped;
* the first object with a known ``apiVersion`` that decodes (shapes and JSON types, as the
  kind's model says) is the document. Where upstream's reader stops at a known version that
  does not decode, kvdev goes on to the next known version the writer also put there, and says
  so in a warning (``Decoded.fallback``);
* an object without an ``apiVersion``, or one that is not JSON, is an error;
* ``apiVersion`` and ``kind`` are found as Go finds them (``godecode.type_meta``: keys matched
  case-insensitively with Unicode folding, ``ApiVersion`` too, the last match winning); every
  other key is matched exactly, as upstream's typed decoder does.

The kind's ``check`` (for DeviceMetadata: ``reading.conformance``) then reports, as warnings,
what a conforming writer would not have written. Objects after the one used are still checked,
and what is wrong with them comes back as a warning: a truncated tail (a torn write), a later
version that says something different. Unknown fields and duplicate keys are warnings too (see
``base``). Every problem names the source, the object's position and the field path.

``encode_stream`` writes what kvdev's host writer publishes: for a kind with a Go layout
(DeviceMetadata), each object exactly as upstream's Go writer marshals it (``gojson``); else
one compact object per line.

Input is bounded: at most ``MAX_STREAM_BYTES`` bytes; nesting past ``MAX_DEPTH`` (deeper than
any field kvdev reads) is checked without recursion up to Go's limit, 10000 levels, and emptied
(``godecode.prune_deep``); invalid UTF-8 reads as U+FFFD per byte and numbers of any length are
read, as Go reads them; no NaN/Infinity. Nothing but ``SchemaError`` ever escapes for bad input.

No I/O here: callers pass bytes and a name for messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from kvdev._records import compared
from kvdev.errors import Problem, SchemaError, Severity
from kvdev.schema import godecode, gojson, hints, metadata, reading
from kvdev.schema.plain import Value, format_path, json_type, read, unknown_fields

MAX_STREAM_BYTES: Final = 4 * 1024 * 1024
MAX_DEPTH: Final = 32

D = TypeVar("D", bound=Value)
M = TypeVar("M", bound=Value)


class Writable(Protocol):
    """What ``encode_stream`` writes: a document that gives itself back as JSON data."""

    def to_json_dict(self) -> dict[str, Any]:
        """The document as JSON data."""
        ...


Check = Callable[[dict[str, object]], tuple[Problem, ...]]


@compared
@dataclass(frozen=True, eq=False, repr=False)
class DocumentKind(Generic[D]):
    """A versioned document type: its group, kind, known versions (newest first) and model.

    ``model`` (a ``plain.Value``) decodes an object (a failure makes that object unusable);
    ``check`` finds what does not fail it but breaks a writer's rules (warnings);
    ``go_layout``, when set, is the Go type upstream writes the kind as; ``written``, when
    set, the versions a writer emits by default (else every known one).
    """

    group: str
    kind: str
    versions: tuple[str, ...]
    model: type[D]
    check: Callable[..., tuple[Problem, ...]] | None = None
    go_layout: gojson.Struct | None = None
    written: tuple[str, ...] = ()


DEVICE_METADATA: Final = DocumentKind(
    metadata.GROUP,
    metadata.KIND,
    metadata.VERSIONS,
    reading.DeviceMetadata,
    reading.conformance,
    metadata.GO_LAYOUT,
    metadata.WRITTEN,
)
GUEST_HINTS: Final = DocumentKind(hints.GROUP, hints.KIND, hints.VERSIONS, hints.GuestHints)


@compared
@dataclass(frozen=True, eq=False, repr=False)
class Decoded(Generic[D]):
    """A document read from a stream, and how it was read.

    Attributes:
        document: the validated, normalized document.
        api_version: the version it was read as.
        index: its position in the stream (0-based).
        skipped: apiVersions of the unknown objects skipped before it.
        warnings: problems that did not reject the document.
        fallback: why newer known versions before it were unusable (empty: none was).
        versions: the apiVersion of every object the stream holds, in order (as read).
    """

    document: D
    api_version: str
    index: int
    skipped: tuple[str, ...] = ()
    warnings: tuple[Problem, ...] = field(default=())
    fallback: tuple[Problem, ...] = field(default=())
    versions: tuple[str, ...] = ()


# --------------------------------------------------------------------------- JSON layer


class _JsonError(Exception):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _text(data: bytes | str, source: str) -> tuple[str, int | None]:
    """The stream as text, and the byte offset of the first invalid UTF-8 (None: all valid).

    Invalid UTF-8 does not reject the stream: as Go's reader does, each byte that is not part
    of valid UTF-8 reads as U+FFFD (inside a string that is all it does; outside one the JSON
    is broken there, a torn write if it follows the object used).
    """
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > MAX_STREAM_BYTES:
        raise SchemaError(
            [Problem(f"file is {size} bytes; kvdev reads at most {MAX_STREAM_BYTES}", source)]
        )
    if isinstance(data, str):
        return data, None
    return godecode.to_text(data)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub(value: object) -> object:
    r"""Replace lone UTF-16 surrogates (from ``\\ud800`` escapes) with U+FFFD, as Go does."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, godecode.GoObject):
        api, kind = value.type_meta
        items = {str(_scrub(k)): _scrub(v) for k, v in value.items()}
        shadowed = {
            str(_scrub(k)): [_scrub(v) for v in vs] for k, vs in (value.shadowed or {}).items()
        }
        out = godecode.GoObject(items, (_scrub(api), _scrub(kind)), shadowed)
        out.nested_duplicates = value.nested_duplicates
        return out
    if isinstance(value, dict):
        return {str(_scrub(k)): _scrub(v) for k, v in value.items()}
    return value


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _too_deep(text: str, pos: int) -> str | None:
    """Why the JSON value at ``pos`` is refused for nesting deeper than MAX_DEPTH, or None.

    Counted before decoding and without recursion, so that the verdict on given bytes never
    depends on how deep the caller's stack is (the decoder's own limit would).
    """
    if text[pos] not in "[{":
        return None
    depth = deepest = 0
    for token in _TOKENS.finditer(text, pos):
        char = token.group()[0]
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
            if depth == 0:
                break
    if deepest <= MAX_DEPTH:
        return None
    deep = f"nested deeper than {MAX_DEPTH} levels"
    return deep if depth == 0 else f"not valid JSON: never closed, and {deep}"


_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _all_shallow(text: str) -> bool:
    """No JSON value of the stream can nest MAX_DEPTH levels deep (a quick, safe answer).

    The brackets outside strings, counted over the whole text at once (a closing bracket never
    below 0): each value's own count (``_too_deep``) is never above this one, so under
    MAX_DEPTH here every value is decoded without ``_too_deep``, and holds nothing past
    MAX_DEPTH levels (``_inspect``'s depth). Quick only where every string ends at the next
    quote (no backslash, quotes paired); False says only: look at each value.
    """
    if "\\" in text or text.count('"') % 2:
        return False
    skeleton = _NOT_BRACKET.sub("", "".join(text.split('"')[::2]))
    depth = deepest = 0
    for char in skeleton:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest < MAX_DEPTH


def _inspect(value: object) -> tuple[bool, bool]:
    """(nesting within MAX_DEPTH, some string holds a lone surrogate), without recursion."""
    stack: list[tuple[object, int]] = [(value, 1)]
    surrogate = False
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False, surrogate
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            surrogate = surrogate or any(_SURROGATE.search(k) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str) and _SURROGATE.search(item):
            surrogate = True
    return True, surrogate


def _objects(text: str, duplicates: list[tuple[int, str]]) -> Iterator[tuple[int, object]]:
    """Yield (index, value) for each JSON value in the stream; raise _JsonError on bad JSON."""
    index = 0

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out, repeated = godecode.GoObject.from_pairs(items)
        duplicates.extend((index, key) for key in repeated)
        return out

    decoder = json.JSONDecoder(
        object_pairs_hook=pairs, parse_constant=_reject_constant, parse_int=godecode.parse_int
    )
    pos = _skip_ws(text, 0)
    shallow = _all_shallow(text)  # then neither _too_deep nor _inspect's depth is needed
    maybe_surrogate = _MAYBE_SURROGATE.search(text) is not None
    while pos < len(text):
        seen = len(duplicates)
        try:
            # Go reads up to 10000 levels: what kvdev reads is not deep
            if not shallow and _too_deep(text, pos):
                pruned = godecode.prune_deep(text, pos, MAX_DEPTH - 1)
                if isinstance(pruned, str):
                    raise _JsonError(index, pruned)
                value, end = decoder.raw_decode(pruned[0])[0], pruned[1]
            else:
                value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            msg = f"not valid JSON: {e.msg} (line {e.lineno} column {e.colno})"
            raise _JsonError(index, msg) from e
        except (ValueError, RecursionError) as e:
            raise _JsonError(index, f"not valid JSON: {e}") from e
        if isinstance(value, godecode.GoObject) and len(duplicates) > seen:
            value.nested_duplicates = True  # duplicate keys somewhere inside: resolve them
        surrogate = False
        if maybe_surrogate or not shallow:
            within, surrogate = _inspect(value)
            if not within:
                raise _JsonError(index, f"nested deeper than {MAX_DEPTH} levels")
        yield index, _scrub(value) if surrogate else value
        index += 1
        pos = _skip_ws(text, end)


# --------------------------------------------------------------------------- validation layer


def validate_value(value: object, model: type[M], *, source: str, index: int | None) -> M:
    """Read plain JSON data as a document value; SchemaError lists every problem."""
    if not isinstance(value, dict):
        raise SchemaError(
            [Problem(f"expected a JSON object, found {json_type(value)}", source, index)]
        )
    doc, errors = read(model, value)
    if doc is None:
        raise SchemaError(
            [Problem(message, source, index, format_path(loc)) for loc, message in errors]
        )
    return doc


def _type_meta(value: dict[str, object]) -> tuple[object, object]:
    """(apiVersion, kind) as upstream's reader finds them (case-insensitive keys, last wins)."""
    if isinstance(value, godecode.GoObject):
        return value.type_meta
    return value.get("apiVersion", godecode.ABSENT), value.get("kind", godecode.ABSENT)


def _api_version(value: object, source: str, index: int) -> str:
    if not isinstance(value, dict):
        raise SchemaError(
            [Problem(f"expected a JSON object, found {json_type(value)}", source, index)]
        )
    api, _ = _type_meta(value)
    if api is godecode.ABSENT:
        raise SchemaError([Problem("required field is missing", source, index, "apiVersion")])
    if not isinstance(api, str) or not api:
        raise SchemaError([Problem("must be a non-empty string", source, index, "apiVersion")])
    return api


def _as_document(value: object, kind: DocumentKind[D], api: str, source: str, index: int) -> D:
    assert isinstance(value, dict)
    _, found = _type_meta(value)
    if found != kind.kind:
        found = None if found is godecode.ABSENT else found
        raise SchemaError(
            [Problem(f"must be {kind.kind!r} for {api}, found {found!r}", source, index, "kind")]
        )
    duplicated = isinstance(value, godecode.GoObject) and value.nested_duplicates
    if kind.go_layout is not None and duplicated:  # as Go decodes them into its types
        value = godecode.resolve(value, kind.go_layout)
        assert isinstance(value, dict)
    typed = {**value, "apiVersion": api, "kind": found}  # as Interpret found them
    return validate_value(typed, kind.model, source=source, index=index)


def _warn(problems: Sequence[Problem], prefix: str) -> list[Problem]:
    return [
        Problem(prefix + p.message, p.source, p.index, p.path, Severity.WARNING) for p in problems
    ]


# --------------------------------------------------------------------------- public API


@dataclass
class _Scan(Generic[D]):
    """The objects of one stream, read in order until one of a known version decodes."""

    kind: DocumentKind[D]
    source: str
    skipped: list[str] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    unusable: list[Problem] = field(default_factory=list)  # known versions that did not decode
    used: tuple[int, str, D] | None = None
    seen: list[str] = field(default_factory=list)  # every object's apiVersion, as read

    def feed(self, index: int, value: object) -> None:
        api_seen = _type_meta(value)[0] if isinstance(value, dict) else None
        if isinstance(api_seen, str):
            self.seen.append(api_seen)
        if self.used is not None:
            self.warnings.extend(_check_later(value, self.kind, self.used, self.source, index))
            return
        api = _api_version(value, self.source, index)
        if api not in self.kind.versions:
            self.skipped.append(api)
            return
        try:
            self.used = (index, api, _as_document(value, self.kind, api, self.source, index))
        except SchemaError as e:
            self.unusable.extend(e.problems)  # on to the next known version the writer put there
            return
        if self.kind.check is not None:
            self.warnings.extend(self.kind.check(value, source=self.source, index=index))

    def fallback_warnings(self) -> list[Problem]:
        if not self.unusable or self.used is None:
            return []
        index, api, _ = self.used
        note = f"read as {api} (stream[{index}]): a newer version in the stream is unusable"
        return [
            Problem(note, self.source, index, severity=Severity.WARNING),
            *_warn(self.unusable, "not used: "),
        ]


def decode_stream(data: bytes | str, kind: DocumentKind[D], *, source: str = "") -> Decoded[D]:
    """Read a versioned stream as ``kind``; raise SchemaError if it holds no usable document."""
    text, bad_utf8_at = _text(data, source)
    duplicates: list[tuple[int, str]] = []
    scan = _Scan(kind, source)
    objects = _objects(text, duplicates)
    while True:
        try:
            item = next(objects, None)
        except _JsonError as e:
            if scan.used is None:
                raise SchemaError([*scan.unusable, Problem(e.message, source, e.index)]) from e
            scan.warnings.append(_torn(e.message, source, e.index))
            bad_utf8_at = None  # U+FFFD in the torn tail: the tail is reported already
            break
        if item is None:
            break
        scan.feed(*item)
    if scan.used is None:
        raise SchemaError(scan.unusable or [_nothing_used(kind, scan.skipped, source)])
    warnings = scan.warnings
    if bad_utf8_at is not None:
        note = f"not valid UTF-8 at byte {bad_utf8_at}: each such byte reads as U+FFFD, as Go's"
        warnings.append(Problem(note, source, severity=Severity.WARNING))
    index, api, doc = scan.used
    warnings.extend(scan.fallback_warnings())
    warnings.extend(
        Problem("unknown field, ignored", source, index, path, Severity.WARNING)
        for path in unknown_fields(doc)
    )
    warnings.extend(
        Problem(f"duplicate key {key!r}: the last value wins", source, i, "", Severity.WARNING)
        for i, key in duplicates
    )
    return Decoded(
        doc,
        api,
        index,
        tuple(scan.skipped),
        tuple(warnings),
        tuple(scan.unusable),
        tuple(scan.seen),
    )


def _torn(message: str, source: str, index: int | None) -> Problem:
    return Problem(
        f"ignored after the object used: {message} (a torn or partial write?)",
        source,
        index,
        severity=Severity.WARNING,
    )


def _nothing_used(kind: DocumentKind[D], skipped: list[str], source: str) -> Problem:
    if skipped:
        return Problem(
            f"no object of a supported version: found {', '.join(skipped)}; "
            f"kvdev reads {', '.join(kind.versions)}",
            source,
        )
    return Problem("the stream holds no object (empty file?)", source)


def _check_later(
    value: object, kind: DocumentKind[D], used: tuple[int, str, D], source: str, index: int
) -> list[Problem]:
    """Problems with an object after the one used: reported, never fatal."""
    api = _type_meta(value)[0] if isinstance(value, dict) else None
    if not isinstance(api, str) or api not in kind.versions:
        return []
    try:
        other = _as_document(value, kind, api, source, index)
    except SchemaError as e:
        return _warn(e.problems, "ignored later version: ")
    first = used[2].to_json_dict() | {"apiVersion": ""}
    if other.to_json_dict() | {"apiVersion": ""} != first:
        return [
            Problem(
                f"{api} says something different from {used[1]} (stream[{used[0]}], which is used)",
                source,
                index,
                severity=Severity.WARNING,
            )
        ]
    return []


def type_metas(data: bytes | str, *, source: str = "") -> tuple[tuple[int, object, object], ...]:
    """(index, apiVersion, kind) of every object of a stream, as the reader finds them.

    The values are as read (``godecode.ABSENT`` when a key is not there). Reading stops at the
    first value that is not JSON, the end of what a reader sees (``decode_stream`` takes it
    for a torn tail after the object it uses).

    Raises:
        SchemaError: the stream is larger than ``MAX_STREAM_BYTES``.
    """
    text, _ = _text(data, source)
    out: list[tuple[int, object, object]] = []
    try:
        for index, value in _objects(text, []):
            api, kind = _type_meta(value) if isinstance(value, dict) else (None, None)
            out.append((index, api, kind))
    except _JsonError:
        pass
    return tuple(out)


def decode_every(data: bytes | str, kind: DocumentKind[D], *, source: str = "") -> tuple[D, ...]:
    """Every object of a stream, each read as ``kind``: a stream only that kind's writer wrote.

    Stricter than ``decode_stream`` (which skips what it does not know): every object must be
    JSON, carry an ``apiVersion`` the reader knows for ``kind`` and the kind's name, and decode.

    Raises:
        SchemaError: naming the first object that is not so, or the stream holds none.
    """
    text, _ = _text(data, source)
    out: list[D] = []
    try:
        for index, value in _objects(text, []):
            api = _api_version(value, source, index)
            if api not in kind.versions:
                message = f"{api!r} is not a version of {kind.kind} kvdev reads"
                wanted = f"{', '.join(kind.versions)}"
                problem = Problem(f"{message} ({wanted})", source, index, "apiVersion")
                raise SchemaError([problem])
            out.append(_as_document(value, kind, api, source, index))
    except _JsonError as e:
        raise SchemaError([Problem(e.message, source, e.index)]) from e
    if not out:
        raise SchemaError([Problem("the stream holds no object (empty file?)", source)])
    return tuple(out)


def encode_stream(
    document: Writable, kind: DocumentKind[Any], versions: Sequence[str] = ()
) -> bytes:
    """Write ``document`` once per version (default: the kind's written ones), newest first.

    Each object is followed by a newline; a kind with a Go layout is written as upstream's
    Go writer does (``MarshalIndent``, struct field order), any other compactly.
    """
    chosen = tuple(versions) or kind.written or kind.versions
    unknown = [v for v in chosen if v not in kind.versions]
    if unknown:
        raise ValueError(f"cannot write {kind.kind} as {', '.join(unknown)}")
    ordered = [v for v in kind.versions if v in chosen]
    fields = document.to_json_dict()
    objects: list[str] = []
    for api in ordered:
        again = _with_api_version(objects[0], ordered[0], api) if objects else None
        if again is not None:  # the same object but its apiVersion: encoded once
            objects.append(again)
            continue
        body = fields | {"apiVersion": api}
        if kind.go_layout is not None:
            objects.append(gojson.marshal_indent(gojson.go_value(body, kind.go_layout)))
        else:
            objects.append(json.dumps(body, ensure_ascii=False, separators=(",", ":")))
    return "".join(o + "\n" for o in objects).encode()


def read_written(document: Writable, kind: DocumentKind[D], *, source: str = "") -> D:
    """The document ``decode_stream`` reads from ``encode_stream(document, kind)``, no text.

    The newest written version's object, laid out as it is written (a Go layout's omitted
    fields and zero values), read as ``kind``'s model: what the stream's reader gets, without
    encoding the text and scanning it again.

    Raises:
        SchemaError: the written object would not decode (as ``decode_stream`` raises).
    """
    chosen = kind.written or kind.versions
    api = next(v for v in kind.versions if v in chosen)
    body: object = document.to_json_dict() | {"apiVersion": api}
    if kind.go_layout is not None:
        body = gojson.go_value(body, kind.go_layout)
    return _as_document(body, kind, api, source, 0)


def _with_api_version(text: str, was: str, api: str) -> str | None:
    """``text`` (one object encoded with ``apiVersion`` ``was``) with ``api`` instead.

    Indented (Go's layout), the object's own ``apiVersion`` is the one key indented by two
    spaces of that name (deeper keys are indented further, and no encoded string holds a raw
    newline); compact, only a first key is recognised. None: not found, encode again.
    """
    old, new = json.dumps(was), json.dumps(api)
    line = f'\n  "apiVersion": {old}'
    at = text.find(line)
    if at >= 0 and text[at + len(line) : at + len(line) + 1] in (",", "\n"):
        return f'{text[:at]}\n  "apiVersion": {new}{text[at + len(line) :]}'
    head = f'{{"apiVersion":{old}'
    if text.startswith(head) and text[len(head) : len(head) + 1] in (",", "}"):
        return f'{{"apiVersion":{new}{text[len(head) :]}'
    return None


def decode_document(
    data: bytes | str, model: type[M], *, source: str = ""
) -> tuple[M, tuple[Problem, ...]]:
    """Read one plain JSON document (not a stream), such as a config drive's meta_data.json."""
    text, bad_utf8_at = _text(data, source)
    if bad_utf8_at is not None:
        raise SchemaError([Problem(f"not valid UTF-8 at byte {bad_utf8_at}", source)])
    duplicates: list[tuple[int, str]] = []
    try:
        values = list(_objects(text, duplicates))
    except _JsonError as e:
        raise SchemaError([Problem(e.message, source)]) from e
    if len(values) != 1:
        found = "nothing" if not values else f"{len(values)} values"
        raise SchemaError([Problem(f"expected one JSON object, found {found}", source)])
    doc = validate_value(values[0][1], model, source=source, index=None)
    warnings = [
        Problem("unknown field, ignored", source, None, path, Severity.WARNING)
        for path in unknown_fields(doc)
    ]
    warnings.extend(
        Problem(f"duplicate key {key!r}: the last value wins", source, None, "", Severity.WARNING)
        for _, key in duplicates
    )
    return doc, tuple(warnings)
