"""A second, independent encoder of Go's ``encoding/json`` rules, for tests to check kvdev with.

Written from the rules, character by character, without Python's ``json`` module:
``Marshal`` (objects as given: the caller lays keys out in Go struct order; strings with
``"`` ``\\`` escaped, ``\\b \\f \\n \\r \\t`` short, other control characters ``\\u00xx``,
``< > &`` and U+2028/U+2029 escaped as ``\\u003c`` ..., everything else as UTF-8) followed by
``json.Indent(dst, src, "", "  ")`` (a newline and the indent after ``{``, ``[`` and ``,``,
none inside an empty ``{}`` or ``[]``, ``": "`` after a key).
"""

SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
HTML = {"<", ">", "&", "\u2028", "\u2029"}


def quote(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in SHORT:
            out.append(SHORT[ch])
        elif ord(ch) < 0x20 or ch in HTML:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def compact(value) -> str:  # noqa: PLR0911 - one return per JSON type
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return "[" + ",".join(compact(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(quote(k) + ":" + compact(v) for k, v in value.items()) + "}"
    raise TypeError(type(value))


def indent(src: str, step: str = "  ") -> str:  # noqa: C901 - a scanner, one branch per token
    """Go's json.Indent with an empty prefix."""
    out, depth, in_string, escaped, i = [], 0, False, False, 0
    while i < len(src):
        ch = src[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch in "{[":
            closer = "}" if ch == "{" else "]"
            if i + 1 < len(src) and src[i + 1] == closer:  # an empty object or array stays {}
                out.append(ch + closer)
                i += 2
                continue
            depth += 1
            out.append(ch + "\n" + step * depth)
        elif ch in "}]":
            depth -= 1
            out.append("\n" + step * depth + ch)
        elif ch == ",":
            out.append(",\n" + step * depth)
        elif ch == ":":
            out.append(": ")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def marshal_indent(value) -> str:
    return indent(compact(value))
