"""Selectors simple enough to answer without building the device's CEL context.

Building a device's CEL context costs ~15 us, an evaluation ~0.3 us; nearly every
DeviceClass says ``device.driver == "..."`` and many requests ``device.attributes["<domain>"]
.<id> == <literal>``. ``shortcut(expression)`` recognises such an expression, or a chain of
them joined by ``&&``, and returns a function that answers from the ``DeviceView`` directly:
True or False where CEL would say the same, None where it cannot tell (an attribute that is
missing, which CEL reports as an error; a value of another type than the literal; a version
or list value), and the caller evaluates the expression with CEL then. A chain is false as
soon as one part is false, as CEL's ``&&`` is even when another part fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvdev.host.allocation.cel._view import DeviceView

Answer = Callable[["DeviceView"], bool | None]

_STR = r"""(?:"([^"\\]*)"|'([^'\\]*)')"""
_DRIVER = re.compile(rf"\s*device\.driver\s*==\s*{_STR}\s*\Z")
_DRIVER_REVERSED = re.compile(rf"\s*{_STR}\s*==\s*device\.driver\s*\Z")
_ATTRIBUTE = re.compile(
    rf"\s*device\.attributes\[\s*{_STR}\s*\]\.([A-Za-z_][A-Za-z0-9_]*)\s*==\s*"
    rf"(?:{_STR}|(-?[0-9]+)|(true|false))\s*\Z"
)


def _text(first: str | None, second: str | None) -> str:
    return first if first is not None else second or ""


def _driver(expression: str) -> Answer | None:
    m = _DRIVER.match(expression) or _DRIVER_REVERSED.match(expression)
    if m is None:
        return None
    want = _text(m[1], m[2])
    return lambda view: view.driver == want


def _attribute(expression: str) -> Answer | None:
    m = _ATTRIBUTE.match(expression)
    if m is None:
        return None
    domain, ident = _text(m[1], m[2]), m[3]
    want: object
    if m[4] is not None or m[5] is not None:
        want = _text(m[4], m[5])
    elif m[6] is not None:
        number = int(m[6])
        if not -(2**63) <= number < 2**63:
            return None
        want = number
    else:
        want = m[7] == "true"

    def answer(view: DeviceView) -> bool | None:
        value = view.attributes.get(domain, {}).get(ident)
        if value is None or type(value) is not type(want):
            return None  # missing (an error in CEL), or another type: CEL decides
        return value == want

    return answer


def _atom(expression: str) -> Answer | None:
    return _driver(expression) or _attribute(expression)


def shortcut(expression: str) -> Answer | None:
    """The direct answer of the module docstring, or None when the expression is not simple."""
    if any(c in expression for c in "()|?!\\") or "&" in expression.replace("&&", ""):
        return None
    parts = [_atom(p) for p in expression.split("&&")]
    if not parts or any(p is None for p in parts):
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
