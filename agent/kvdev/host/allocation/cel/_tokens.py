"""The CEL tokenizer: the tokens ``_tree`` parses, each with its span of the source."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvdev.host.allocation.cel._errors import CelCompileError

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
   |(?P<str>(?:[rR][bB]?|[bB][rR]?)?
        (?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
   |(?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:[0-9]+\.[0-9]+|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
   |(?P<id>[A-Za-z_][A-Za-z0-9_]*)
   |(?P<op>&&|\|\||==|!=|<=|>=|\.\?|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "str", "num", "id", "op"
    text: str
    start: int
    end: int


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN_RE.match(source, pos)
        if m is None:
            raise CelCompileError(f"CEL compile error: unexpected character at {pos}")
        kind = m.lastgroup or "ws"
        if kind != "ws":
            tokens.append(Token(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return tokens
