"""Static analysis of a parsed selector: cost estimate, copy bound, bound variables, domains.

The cost estimate is upstream's (:mod:`._estimate`), compared with :data:`COST_LIMIT` as the
API server compares it. The copy bound is kvdev's own: the library copies a list or map each
time a literal or ``map`` holds it (``[v, v]`` nested by ``cel.bind`` doubles per level: 2**22
copies take seconds), where upstream's shares it, so each expression also gets a bound on the
values it can copy (:func:`_grown`), compared with the same limit. Both are passes over the
tree of ``_tree``, as are the variables macros and binds declare and the attribute and
capacity domains written as literals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kvdev.host.allocation.cel._estimate import estimate
from kvdev.host.allocation.cel._tree import Node
from kvdev.schema.metadata import ATTRIBUTE_VALUES_MAX

COST_LIMIT: Final = 1_000_000  # upstream CELSelectorExpressionMaxCost
_ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_DYNAMIC_CAP: Final = COST_LIMIT * 1000
# Nodes whose source has a name in it: a literal holding one may hold a variable's value.
_NAMED: Final = frozenset({"ident", "select", "call", "has", "macro", "bind"})


@dataclass(frozen=True)
class Analysis:
    bound_vars: frozenset[str]
    domains: frozenset[str]
    cost: int  # upstream's estimate
    copies: int  # the library's copy bound (kvdev's own)


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


def _domain(node: Node) -> str | None:
    """``<x>.attributes["d"]`` or ``capacity["d"]`` (any receiver): the domain ``d``."""
    if node.kind != "index":
        return None
    operand, index = node.children
    named = operand.kind in ("select", "ident") and operand.text in ("attributes", "capacity")
    if not named or index.kind != "lit" or index.lit != "str":
        return None
    return _literal_string(index.text)


def analyze(tree: Node, last: int) -> Analysis:
    """The analysis of an expression's tree; ``last``: where its last token ends."""
    bound: set[str] = set()
    domains: set[str] = set()
    largest = 0
    for node in tree.walk():
        if node.kind in ("macro", "bind"):
            bound.add(node.var)
        domain = _domain(node)
        if domain is not None:
            domains.add(domain)
        if node.kind in ("list", "map"):
            largest = max(largest, _count(node))
    base = max(ATTRIBUTE_VALUES_MAX, _ATTRIBUTES_AND_CAPACITIES_MAX, largest)
    copies = _grown(tree, base, last)
    return Analysis(frozenset(bound), frozenset(domains), estimate(tree), copies)


def _count(node: Node) -> int:
    return len(node.children) // (2 if node.kind == "map" else 1)


def _naming(tree: Node) -> set[int]:
    """The ids of the nodes with a name somewhere in their source (one pass, children first)."""
    out: set[int] = set()
    for node in reversed(list(tree.walk())):
        own = node.kind in _NAMED or (node.kind == "binary" and node.text == "in")
        if own or any(id(child) in out for child in node.children):
            out.add(id(node))
    return out


def _is_map(node: Node, last: int) -> bool:
    """``.map`` after a receiver: the macro, a method, a field (unless the last token)."""
    if node.text != "map" or not (node.kind in ("macro", "select") or node.method):
        return False
    return node.kind != "select" or node.name_at[1] < last


def _grown(tree: Node, dynamic: int, last: int) -> int:
    """The size bound once every value-copying construct has done its worst.

    A list/map literal holding a variable copies it once per element (``[v, v]`` doubles,
    and ``cel.bind`` can chain that: 2**30 copies from 30 binds); ``map`` over a receiver of
    unknown size may return that many copies of a value as large (``b.map(x, b)`` squares;
    any ``.map`` but a last field counts). Capped: past the cap anything that costs
    ``dynamic`` is over the limit anyway. The constructs are taken in source order.
    """
    steps: list[tuple[int, Node, bool]] = []  # (where, the literal or receiver, a map's)
    naming = _naming(tree)
    for node in tree.walk():
        holds = any(id(child) in naming for child in node.children)
        if node.kind in ("list", "map") and holds:
            steps.append((node.start, node, False))
        elif _is_map(node, last):
            steps.append((node.name_at[0], node.children[0], True))
    for _, node, mapped in sorted(steps, key=lambda step: step[0]):
        if dynamic > _DYNAMIC_CAP:
            continue
        literal = node.kind in ("list", "map") and not node.paren
        if not mapped:
            dynamic *= max(1, _count(node))
        elif literal:
            dynamic *= _count(node)
        else:
            dynamic *= dynamic
    return min(dynamic, _DYNAMIC_CAP + 1)
