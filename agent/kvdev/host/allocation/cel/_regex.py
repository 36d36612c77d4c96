r"""``string.matches(pattern)`` with RE2, a constant pattern compiled once.

The library's own ``matches`` compiles its pattern again on every call (tens of ms for a
pattern like ``\w{100}``), and cannot be replaced by registering a function of that name,
so the compiler renames every call of ``matches`` in the parsed tree to :data:`FUNCTION`.
Upstream (cel-go) compiles a constant pattern once, when the program is planned, and reports
a bad one then; :func:`constant_patterns` finds them in the tree and :func:`compile_constant`
compiles each at compile time. Matching uses RE2
(``google-re2``), the syntax and the linear-time guarantee of Go's ``regexp`` that upstream
uses; ``matches`` is true when the pattern matches anywhere in the string, as upstream's.
A pattern that is not a constant is compiled when called, remembered in a small cache.
"""

from __future__ import annotations

import functools
from typing import Final

import re2

from kvdev.host.allocation.cel._errors import CelCompileError
from kvdev.host.allocation.cel._interrupt import checkpoint
from kvdev.host.allocation.cel._tree import Node
from kvdev.host.allocation.cel._values import no_overload

FUNCTION: Final = "kvdevMatches"  # the name ``matches`` calls are rewritten to
_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re2._Regexp:
    return re2.compile(pattern, _OPTIONS)


def compile_constant(pattern: str) -> None:
    """Compile a constant pattern now (it is cached for the calls).

    Raises:
        CelCompileError: RE2 refuses the pattern.
    """
    try:
        _compiled(pattern)
    except re2.error as exc:
        raise CelCompileError(
            f"CEL compile error: invalid matches pattern {pattern!r}: {exc}"
        ) from exc


def matches(text: object, pattern: object) -> bool:
    """CEL's ``text.matches(pattern)`` (a checkpoint of :mod:`._interrupt`)."""
    checkpoint()
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise no_overload("matches", text, pattern)
    try:
        regex = _compiled(pattern)
    except re2.error as exc:
        raise ValueError(f"invalid matches argument: {exc}") from exc
    return regex.search(text) is not None


def constant_patterns(tree: Node) -> list[Node]:
    """The string literals that are the one argument of a ``matches`` call."""
    out = []
    for node in tree.walk():
        args = node.children[1:] if node.method else node.children
        if node.kind != "call" or node.text != "matches" or len(args) != 1:
            continue
        if args[0].kind == "lit" and args[0].lit == "str" and not args[0].paren:
            out.append(args[0])
    return out
