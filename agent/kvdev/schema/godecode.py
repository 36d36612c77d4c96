"""JSON text read the way upstream's Go reader reads it, where Python's ``json`` would differ.

Upstream's KEP-5304 reader (K/DRA ``devicemetadata``) reads a stream with ``encoding/json``:
it finds each object's ``apiVersion`` and ``kind`` with ``encoding/json`` (apimachinery's
``SimpleMetaFactory.Interpret``: keys match case-insensitively, with Unicode simple folding, the
last match wins), then decodes the object case-sensitively (``sigs.k8s.io/json``). What this
module owns, each judged by that reader (tests/unit/test_metadata_reader_oracle.py):

* ``to_text``: bytes to text with every byte that is not part of valid UTF-8 read as U+FFFD,
  one per byte (Go's ``utf8.DecodeRune`` rule), instead of refusing the stream;
* ``parse_int``: a number of any length (Python refuses more than 4300 digits); one past the
  int64 range stays past it, cheaply, so an int64 field still refuses it as Go does;
* ``type_meta``: ``apiVersion`` and ``kind`` as ``Interpret`` finds them among an object's keys;
* ``resolve``: duplicate keys combined as Go decodes them into the typed fields (structs merge,
  slices reuse their elements, map entries are replaced, null is no change for a struct);
* ``prune_deep``: a value nested up to Go's limit (10000 levels) checked for JSON syntax without
  recursion, and laid out with everything below ``keep`` levels emptied (no field kvdev reads is
  that deep: what is cut is an unknown field's content, which Go ignores as well).

Pure: no I/O.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import Final

from kvdev.schema import gojson

GO_MAX_DEPTH: Final = 10000  # encoding/json's scanner: "exceeded max depth" past this
_INT_DIGITS: Final = 4000  # below Python's int/str conversion limit (4300)
_PAST_INT64: Final = 2**64
_ERRORS: Final = "kvdev-go-utf8"


def _per_byte(error: UnicodeError) -> tuple[str, int]:
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd" * (error.end - error.start), error.end


codecs.register_error(_ERRORS, _per_byte)


def to_text(data: bytes) -> tuple[str, int | None]:
    """``data`` as text, invalid bytes as U+FFFD each; the offset of the first (None: none)."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return data.decode("utf-8", _ERRORS), e.start


def parse_int(digits: str) -> int:
    """A JSON integer; one too long for Python is read as a value past int64 (same sign)."""
    if len(digits) <= _INT_DIGITS:
        return int(digits)
    return -_PAST_INT64 if digits.startswith("-") else _PAST_INT64


# Runes outside ASCII that Unicode simple folding maps onto an ASCII letter (Go's EqualFold).
_FOLDS_TO: Final = {"s": "s\u017f", "k": "k\u212a"}


def fold_equal(key: str, name: str) -> bool:
    """Go's ``bytes.EqualFold(key, name)`` for an ASCII ``name`` (how ``Interpret`` matches)."""
    if len(key) != len(name):
        return False
    return all(
        k == n or (k.lower() == n.lower() and k.isascii()) or k in _FOLDS_TO.get(n.lower(), "")
        for k, n in zip(key, name, strict=True)
    )


ABSENT: Final = object()


def type_meta(pairs: Sequence[tuple[str, object]]) -> tuple[object, object]:
    """(apiVersion, kind) as ``Interpret`` reads them: the last matching key's non-null value.

    ``ABSENT`` when no key matches (or only with null, which leaves Go's field unset).
    """
    api: object = ABSENT
    kind: object = ABSENT
    for key, value in pairs:
        if value is None or len(key) not in (4, 10):
            continue
        if fold_equal(key, "apiVersion"):
            api = value
        elif fold_equal(key, "kind"):
            kind = value
    return api, kind


_TOKEN: Final = re.compile(
    r'[ \t\n\r]*(?:(?P<s>"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")'
    r"|(?P<n>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<l>true|false|null)|(?P<p>[\[\]{},:]))"
)
# What may come next: a value, a value or "]", a key or "}", a key, ":", "," or the close.
_VALUE, _VALUE_OR_END, _KEY_OR_END, _KEY, _COLON, _NEXT = range(6)
# (what may come, what came) -> what may come then. "s" a string, "v" another scalar, ",]"
# and ",}" a comma inside an array and an object; anything missing is a syntax error.
_MOVES: Final = {
    **{(e, t): _NEXT for e in (_VALUE, _VALUE_OR_END) for t in ("s", "v")},
    **{(e, "["): _VALUE_OR_END for e in (_VALUE, _VALUE_OR_END)},
    **{(e, "{"): _KEY_OR_END for e in (_VALUE, _VALUE_OR_END)},
    (_KEY, "s"): _COLON,
    (_KEY_OR_END, "s"): _COLON,
    (_COLON, ":"): _VALUE,
    (_NEXT, ",]"): _VALUE,
    (_NEXT, ",}"): _KEY,
    (_NEXT, "]"): _NEXT,
    (_VALUE_OR_END, "]"): _NEXT,
    (_NEXT, "}"): _NEXT,
    (_KEY_OR_END, "}"): _NEXT,
}


def _token_kind(m: re.Match[str], stack: list[str]) -> str:
    if m.group("s") is not None:
        return "s"
    if m.group("p") is None:
        return "v"
    char = m.group("p")
    return char + (stack[-1] if stack else "") if char == "," else char


def prune_deep(text: str, pos: int, keep: int) -> tuple[str, int] | str:
    """Check the JSON value at ``pos`` without recursion; (its text pruned, its end) or why not.

    The pruned text has every array or object deeper than ``keep`` levels emptied (``[]``,
    ``{}``). Nesting past ``GO_MAX_DEPTH`` is refused, as Go refuses it.
    """
    out: list[str] = []
    stack: list[str] = []  # the closing bracket of each open container
    expect, copied = _VALUE, pos
    while True:
        m = _TOKEN.match(text, pos)
        kind = _token_kind(m, stack) if m is not None else ""
        move = _MOVES.get((expect, kind))
        if m is None or move is None or (kind in ("]", "}") and stack.pop() != kind):
            return f"not valid JSON at character {m.start() if m else pos}"
        pos, expect = m.end(), move
        if kind in ("[", "{"):
            stack.append("]" if kind == "[" else "}")
            if len(stack) > GO_MAX_DEPTH:
                return f"nested deeper than {GO_MAX_DEPTH} levels"
            if len(stack) == keep + 1:
                out.append(text[copied:pos])
        elif kind in ("]", "}") and len(stack) == keep:
            copied = pos - 1
        if not stack and expect == _NEXT:
            out.append(text[copied:pos])
            return "".join(out), pos


class GoObject(dict[str, object]):
    """A decoded JSON object (last value per key), with what Go's reader also sees in it.

    ``type_meta``: apiVersion and kind as ``Interpret`` finds them; ``shadowed``: per key
    given more than once, the earlier values in order (Go decodes each into the same field);
    ``nested_duplicates``: set by the caller when some object inside has shadowed keys.
    """

    __slots__ = ("_pairs", "_type_meta", "nested_duplicates", "shadowed")

    def __init__(
        self,
        items: dict[str, object] | None = None,
        type_meta: tuple[object, object] = (ABSENT, ABSENT),
        shadowed: dict[str, list[object]] | None = None,
    ) -> None:
        super().__init__(items or ())
        self._type_meta: tuple[object, object] | None = type_meta
        self._pairs: Sequence[tuple[str, object]] = ()
        self.shadowed = shadowed
        self.nested_duplicates = bool(shadowed)

    @property
    def type_meta(self) -> tuple[object, object]:
        """The (apiVersion, kind) ``Interpret`` finds (worked out when first asked)."""
        if self._type_meta is None:
            self._type_meta, self._pairs = type_meta(self._pairs), ()
        return self._type_meta

    @classmethod
    def from_pairs(cls, items: Sequence[tuple[str, object]]) -> tuple[GoObject, list[str]]:
        """The object of a JSON object's pairs, and the keys given more than once."""
        out = cls()
        repeated: list[str] = []
        for key, value in items:
            if key in out:
                repeated.append(key)
                if out.shadowed is None:
                    out.shadowed = {}
                out.shadowed.setdefault(key, []).append(out[key])
            out[key] = value
        out._type_meta, out._pairs = None, items  # only a top-level object's is ever asked for
        out.nested_duplicates = bool(repeated)
        return out, repeated


def resolve(value: object, shape: gojson.Shape) -> object:
    """``value`` with every duplicate key of a typed position combined as Go decodes it.

    Go decodes each occurrence of a key into the same field: into a struct field by field (a
    struct's earlier fields survive), into a map key by key (an entry is replaced whole), into
    a slice element by element (reusing the earlier elements: ``encoding/json`` does not zero
    them), ``null`` into a pointer, map or slice as nil and into anything else as no change.
    Keys outside ``shape`` (unknown fields) keep their last value.
    """
    if isinstance(shape, gojson.Struct) and isinstance(value, dict):
        fields = {f.name: f for f in shape.fields}
        shadowed = (value.shadowed if isinstance(value, GoObject) else None) or {}
        out: dict[str, object] = {}
        for key, last in value.items():
            field = fields.get(key)
            if field is None:
                out[key] = last
                continue
            acc: object = _NOTHING
            for occurrence in (*shadowed.get(key, ()), last):
                item = resolve(occurrence, field.shape)
                acc = item if acc is _NOTHING else _combine(acc, item, field)
            out[key] = acc
        if isinstance(value, GoObject):
            return GoObject(out, value.type_meta)
        return out
    if isinstance(shape, gojson.MapOf) and isinstance(value, dict):
        return {k: resolve(v, shape.value) for k, v in value.items()}
    if isinstance(shape, gojson.ListOf) and isinstance(value, list):
        return [resolve(v, shape.item) for v in value]
    return value


_NOTHING: Final = object()


def _combine(old: object, new: object, field: gojson.Field) -> object:
    """The field after decoding ``new`` into it when it held ``old``."""
    shape = field.shape
    if new is None:
        nil = field.tag is gojson.POINTER or isinstance(shape, gojson.MapOf | gojson.ListOf)
        return None if nil else old
    if isinstance(shape, gojson.Struct) and isinstance(old, dict) and isinstance(new, dict):
        fields = {f.name: f for f in shape.fields}
        out = dict(old)
        for key, value in new.items():
            sub = fields.get(key)
            out[key] = _combine(old[key], value, sub) if sub and key in old else value
        return out
    if isinstance(shape, gojson.MapOf) and isinstance(old, dict) and isinstance(new, dict):
        return old | new
    if isinstance(shape, gojson.ListOf) and isinstance(old, list) and isinstance(new, list):
        item = gojson.Field("", gojson.ALWAYS, shape.item)
        return [_combine(old[i], v, item) if i < len(old) else v for i, v in enumerate(new)]
    return new
