"""Static analysis of a selector: cost estimate, copy bound, bound variables, literal domains.

The cost estimate is upstream's (:mod:`._estimate`), compared with :data:`COST_LIMIT` as the
API server compares it. The copy bound is kvdev's own: the library copies a list or map each
time a literal or ``map`` holds it (``[v, v]`` nested by ``cel.bind`` doubles per level: 2**22
copies take seconds), where upstream's shares it, so each expression also gets a bound on the
values it can copy (:func:`_grown`), compared with the same limit. When :mod:`._estimate`
cannot parse the expression, the cost is the older token-based worst case (:func:`_estimate`,
see the package docstring, "Cost limit").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kvdev.host.allocation.cel._estimate import estimate
from kvdev.host.allocation.cel._tokens import Token, matching_brackets, top_level_commas
from kvdev.schema.metadata import ATTRIBUTE_VALUES_MAX

COST_LIMIT: Final = 1_000_000  # upstream CELSelectorExpressionMaxCost
_ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
_CONSTANTS: Final = frozenset({"true", "false", "null"})
_DYNAMIC_CAP: Final = COST_LIMIT * 1000


@dataclass(frozen=True)
class Analysis:
    bound_vars: frozenset[str]
    domains: frozenset[str]
    cost: int  # upstream's estimate (or the token bound when ``upstream`` is false)
    copies: int  # the library's copy bound (kvdev's own)
    upstream: bool = True


def _literal_string(text: str) -> str | None:
    body = text.lstrip("rRbB")
    prefix = text[: len(text) - len(body)]
    if "b" in prefix.lower():
        return None
    quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
    inner = body[len(quote) : -len(quote)]
    if "\\" in inner and "r" not in prefix.lower():
        return None
    return inner


def analyze(tokens: list[Token], written: list[Token]) -> Analysis:
    """The analysis of ``tokens`` (the source after rewriting); ``written``: as written."""
    match = matching_brackets(tokens)
    bound: set[str] = set()
    domains: set[str] = set()
    largest = 0
    plus = 0
    for k, t in enumerate(tokens):
        if t.kind == "op" and t.text == "+":
            plus += 1
        if (
            t.kind == "op"
            and t.text == "."
            and k + 4 < len(tokens)
            and tokens[k + 1].text in _MACROS
            and tokens[k + 2].text == "("
            and tokens[k + 3].kind == "id"
            and tokens[k + 4].text == ","
        ):
            bound.add(tokens[k + 3].text)
        if (
            t.kind == "id"
            and t.text in ("attributes", "capacity")
            and k + 3 < len(tokens)
            and tokens[k + 1].text == "["
            and tokens[k + 2].kind == "str"
            and tokens[k + 3].text == "]"
        ):
            literal = _literal_string(tokens[k + 2].text)
            if literal is not None:
                domains.add(literal)
        if t.kind == "op" and t.text in "[{" and _is_literal_open(tokens, k):
            largest = max(largest, _element_count(tokens, match, k))
    base = max(ATTRIBUTE_VALUES_MAX, _ATTRIBUTES_AND_CAPACITIES_MAX, largest)
    copies = _grown(tokens, match, base)
    upstream = estimate(written)
    if upstream is not None:
        return Analysis(frozenset(bound), frozenset(domains), upstream, copies)
    dynamic = _grown(tokens, match, base << min(plus, 64))
    cost = _estimate(tokens, match, 0, len(tokens), dynamic)
    return Analysis(frozenset(bound), frozenset(domains), cost, copies, upstream=False)


def _grown(tokens: list[Token], match: dict[int, int], dynamic: int) -> int:
    """The size bound once every value-copying construct has done its worst.

    A list/map literal holding a variable copies it once per element (``[v, v]`` doubles,
    and ``cel.bind`` can chain that: 2**30 copies from 30 binds); ``map`` over a receiver of
    unknown size may return that many copies of a value as large (``b.map(x, b)`` squares).
    Capped: past the cap anything that costs ``dynamic`` is over the limit anyway.
    """
    for k, t in enumerate(tokens):
        if t.kind != "op" or dynamic > _DYNAMIC_CAP:
            continue
        if t.text in "[{" and _is_literal_open(tokens, k) and _holds_variable(tokens, k, match[k]):
            dynamic *= max(1, _element_count(tokens, match, k))
        elif t.text == "." and k + 2 < len(tokens) and tokens[k + 1].text == "map":
            literal = tokens[k - 1].text in "]}" and _is_literal_open(tokens, match[k - 1])
            dynamic *= _element_count(tokens, match, match[k - 1]) if literal else dynamic
    return min(dynamic, _DYNAMIC_CAP + 1)


def _holds_variable(tokens: list[Token], open_: int, close: int) -> bool:
    return any(t.kind == "id" and t.text not in _CONSTANTS for t in tokens[open_ + 1 : close])


def _is_literal_open(tokens: list[Token], k: int) -> bool:
    """Whether ``[``/``{`` at ``k`` opens a list/map literal (not an index or a message)."""
    if k == 0:
        return True
    prev = tokens[k - 1]
    if prev.kind in ("num", "str") or (prev.kind == "id" and prev.text != "in"):
        return False
    return not (prev.kind == "op" and prev.text in ")]}")


def _element_count(tokens: list[Token], match: dict[int, int], k: int) -> int:
    close = match[k]
    if close == k + 1:
        return 0
    commas = top_level_commas(tokens, match, k + 1, close)
    trailing = bool(commas) and commas[-1] == close - 1
    return len(commas) + 1 - trailing


def _estimate(tokens: list[Token], match: dict[int, int], i: int, j: int, dynamic: int) -> int:
    cost = 0
    k = i
    while k < j:
        t = tokens[k]
        if (
            t.kind == "op"
            and t.text == "."
            and k + 2 < j
            and tokens[k + 1].text in _MACROS
            and tokens[k + 2].text == "("
        ):
            open_ = k + 2
            close = match[open_]
            size = dynamic
            if k > 0 and tokens[k - 1].text in ("]", "}"):
                start = match[k - 1]
                if _is_literal_open(tokens, start):
                    size = _element_count(tokens, match, start)
            body = _estimate(tokens, match, open_ + 1, close, dynamic)
            cost += 2 + size * (body + 1)
            k = close + 1
            continue
        copies = t.kind == "op" and (
            t.text == "+"
            or (
                t.text in "[{"
                and _is_literal_open(tokens, k)
                and _holds_variable(tokens, k, match[k])
            )
        )
        cost += dynamic if copies else 1
        k += 1
    return cost
