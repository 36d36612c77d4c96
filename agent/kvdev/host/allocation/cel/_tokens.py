"""A CEL tokenizer and bracket matching, for the source rewrite and the static analysis."""

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


def matching_brackets(tokens: list[Token]) -> dict[int, int]:
    """Index of the matching bracket, both ways."""
    match: dict[int, int] = {}
    stack: list[int] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for i, t in enumerate(tokens):
        if t.kind != "op":
            continue
        if t.text in "([{":
            stack.append(i)
        elif t.text in pairs:
            if not stack or tokens[stack[-1]].text != pairs[t.text]:
                raise CelCompileError("CEL compile error: unbalanced brackets")
            j = stack.pop()
            match[i], match[j] = j, i
    if stack:
        raise CelCompileError("CEL compile error: unbalanced brackets")
    return match


def top_level_commas(tokens: list[Token], match: dict[int, int], i: int, j: int) -> list[int]:
    commas = []
    k = i
    while k < j:
        t = tokens[k]
        if t.kind == "op" and t.text in "([{":
            k = match[k] + 1
            continue
        if t.kind == "op" and t.text == ",":
            commas.append(k)
        k += 1
    return commas
