"""Selectors simple enough to answer without building the device's CEL context.

Building a device's CEL context costs ~15 us, an evaluation ~0.3 us; nearly every
DeviceClass says ``device.driver == "..."`` and many requests ``device.attributes["<domain>"]
.<id> == <literal>``. ``shortcut(tree, expression)`` recognises such an expression in its
parsed tree, or a chain of them joined by ``&&``, and returns a function that answers from
the ``DeviceView`` directly: True or False where CEL would say the same, None where it cannot
tell (an attribute that is missing, which CEL reports as an error; a value of another type
than the literal; a version or list value), and the caller evaluates the expression with CEL
then. A chain is false as soon as one part is false, as CEL's ``&&`` is even when another part
fails. Literals are plain quoted strings without escapes, decimal int64s and booleans.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvdev.host.allocation.cel._tree import Node

if TYPE_CHECKING:
    from kvdev.host.allocation.cel._view import DeviceView

Answer = Callable[["DeviceView"], bool | None]

_STRING = re.compile(r""""([^"\\]*)"|'([^'\\]*)'""")
_INT = re.compile(r"-?[0-9]+")


def _string(node: Node) -> str | None:
    if node.kind != "lit" or node.lit != "str" or node.text[:3] in ('"""', "'''"):
        return None
    m = _STRING.fullmatch(node.text)
    if m is None:
        return None
    return m[1] if m[1] is not None else m[2]


def _literal(node: Node) -> tuple[object] | None:
    """The literal's value (in a 1-tuple), or None when it is not a plain one."""
    text = _string(node)
    if text is not None:
        return (text,)
    if node.kind == "lit" and node.lit == "bool":
        return (node.text == "true",)
    if node.kind == "lit" and node.lit == "num" and _INT.fullmatch(node.text):
        number = int(node.text)
        return (number,) if -(2**63) <= number < 2**63 else None
    return None


def _is_device_field(node: Node, name: str) -> bool:
    operand = node.children[0] if node.children else None
    return (
        node.kind == "select"
        and node.text == name
        and operand is not None
        and operand.kind == "ident"
        and operand.text == "device"
    )


def _driver(left: Node, right: Node) -> Answer | None:
    for field, literal in ((left, right), (right, left)):
        want = _string(literal)
        if want is not None and _is_device_field(field, "driver"):
            return lambda view: view.driver == want
    return None


def _attribute(left: Node, right: Node) -> Answer | None:
    if left.kind != "select" or left.children[0].kind != "index":
        return None
    attributes, domain_node = left.children[0].children
    domain = _string(domain_node)
    found = _literal(right)
    if domain is None or found is None or not _is_device_field(attributes, "attributes"):
        return None
    ident, (want,) = left.text, found

    def answer(view: DeviceView) -> bool | None:
        value = view.attributes.get(domain, {}).get(ident)
        if value is None or type(value) is not type(want):
            return None  # missing (an error in CEL), or another type: CEL decides
        return value == want

    return answer


def _atom(node: Node) -> Answer | None:
    if node.kind != "binary" or node.text != "==":
        return None
    left, right = node.children
    return _driver(left, right) or _attribute(left, right)


def _chain(node: Node) -> list[Node]:
    if node.kind == "binary" and node.text == "&&":
        return [*_chain(node.children[0]), *_chain(node.children[1])]
    return [node]


def shortcut(tree: Node, expression: str) -> Answer | None:
    """The direct answer of the module docstring, or None when the expression is not simple."""
    if any(c in expression for c in "()|?!\\"):
        return None
    parts = [_atom(p) for p in _chain(tree)]
    if any(p is None for p in parts):
        return None
    atoms = [p for p in parts if p is not None]
    if len(atoms) == 1:
        return atoms[0]

    def chain(view: DeviceView) -> bool | None:
        undecided = False
        for atom in atoms:
            said = atom(view)
            if said is False:
                return False
            undecided = undecided or said is None
        return None if undecided else True

    return chain
