"""A selector parsed once into a small tree, which every static pass reads.

``parse`` turns the tokens of an expression (``_tokens``) into :class:`Node` values by
recursive descent, with CEL's grammar: ``?:``, then ``||``, ``&&``, the relations (``in``
too), ``+ -``, ``* / %``, the prefixes ``!`` and ``-``, then members (``.name``, ``.f(...)``,
``[i]``) over a primary (a literal, a name, a call, ``has()``, a macro, ``cel.bind``, a list
or map literal, parentheses). Each node keeps its span of the source, so that a rewrite can
put the source back together with parts replaced (:func:`render`). What the grammar does not
accept is a :class:`ParseError`; the compiler makes that a compile error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Final

from kvdev.host.allocation.cel._tokens import Token

MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
RELATIONS: Final = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})
_LEVELS: Final = (("||",), ("&&",), tuple(RELATIONS), ("+", "-"), ("*", "/", "%"))


class ParseError(Exception):
    """The expression is not in the grammar; ``at`` is the offending token's offset."""

    def __init__(self, message: str, at: int) -> None:
        super().__init__(message)
        self.at = at


@dataclass(frozen=True, slots=True)
class Node:
    """One node: ``kind`` says which, ``text`` its literal, name or operator.

    Kinds and children: ``lit`` (``text`` the token as written, ``lit`` one of ``str num
    bool null``), ``ident``, ``unary`` (operand), ``binary`` (left, right), ``cond`` (test,
    then, else), ``select`` (operand; ``text`` the field), ``index`` (operand, index),
    ``call`` (the receiver first when ``method``, then the arguments), ``has`` (its
    operand), ``macro`` (receiver, then one to three parts; ``var`` the variable), ``bind``
    (init, body; ``var``), ``list`` (items), ``map`` (key, value, key, value ...).
    ``name_at`` is the span of a call's, macro's or field's name. Parentheses make no node:
    the node inside is marked ``paren``, its span theirs.
    """

    kind: str
    start: int
    end: int
    text: str = ""
    lit: str = ""
    var: str = ""
    method: bool = False
    name_at: tuple[int, int] = (0, 0)
    paren: bool = False  # written in parentheses
    children: tuple[Node, ...] = ()

    def walk(self) -> Iterator[Node]:
        """This node and every node under it, in source order (pre-order)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.t = tokens
        self.k = 0

    def peek(self, ahead: int = 0) -> str:
        k = self.k + ahead
        return self.t[k].text if k < len(self.t) else ""

    def take(self, text: str | None = None) -> Token:
        if self.k >= len(self.t) or (text is not None and self.t[self.k].text != text):
            at = self.t[self.k].start if self.k < len(self.t) else (self.t[-1].end if self.t else 0)
            found = repr(self.t[self.k].text) if self.k < len(self.t) else "the end"
            want = f"{text!r}" if text is not None else "more"
            raise ParseError(f"expected {want}, found {found}", at)
        self.k += 1
        return self.t[self.k - 1]

    def end_of(self) -> int:
        return self.t[self.k - 1].end

    def expr(self) -> Node:
        test = self.binary(0)
        if self.peek() != "?":
            return test
        self.take("?")
        then = self.expr()
        self.take(":")
        other = self.expr()
        return Node("cond", test.start, other.end, children=(test, then, other))

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in _LEVELS[level] and self.t[self.k].kind in ("op", "id"):
            op = self.take().text
            right = self.binary(level + 1)
            left = Node("binary", left.start, right.end, op, children=(left, right))
        return left

    def unary(self) -> Node:
        prefixes: list[Token] = []
        while self.peek() in ("!", "-") and self.t[self.k].kind == "op":
            op = self.take()
            if op.text == "-" and self.k < len(self.t) and self.t[self.k].kind == "num":
                number = self.take()
                node = Node("lit", op.start, number.end, f"-{number.text}", "num")
                return self.wrap(prefixes, self.member(node))
            prefixes.append(op)
        return self.wrap(prefixes, self.member(self.primary()))

    @staticmethod
    def wrap(prefixes: list[Token], node: Node) -> Node:
        for op in reversed(prefixes):
            node = Node("unary", op.start, node.end, op.text, children=(node,))
        return node

    def member(self, node: Node) -> Node:
        while True:
            if self.peek() == ".":
                self.take(".")
                name = self.take()
                if self.peek() == "(":
                    node = self.method(name, node)
                else:
                    at = (name.start, name.end)
                    node = Node(
                        "select", node.start, name.end, name.text, name_at=at, children=(node,)
                    )
            elif self.peek() == "[":
                self.take("[")
                index = self.expr()
                self.take("]")
                node = Node("index", node.start, self.end_of(), children=(node, index))
            else:
                return node

    def args(self) -> list[Node]:
        self.take("(")
        out = []
        while self.peek() != ")":
            out.append(self.expr())
            if self.peek() != ")":
                self.take(",")
        self.take(")")
        return out

    def primary(self) -> Node:
        """A literal, a name (``named``), parentheses, a list or map literal."""
        tok = self.take()
        if tok.kind in ("str", "num"):
            return Node("lit", tok.start, tok.end, tok.text, tok.kind)
        if tok.text in ("true", "false"):
            return Node("lit", tok.start, tok.end, tok.text, "bool")
        if tok.text == "null":
            return Node("lit", tok.start, tok.end, tok.text, "null")
        if tok.text == "(":
            inner = self.expr()
            self.take(")")
            return replace(inner, start=tok.start, end=self.end_of(), paren=True)
        if tok.text in ("[", "{"):
            return self.literal(tok)
        if tok.text == "." and self.k < len(self.t) and self.t[self.k].kind == "id":
            name = self.take()  # ``.name``: the name from the root namespace
            tok = Token("id", f".{name.text}", tok.start, name.end)
        if tok.kind != "id":
            raise ParseError(f"unexpected {tok.text!r}", tok.start)
        return self.named(tok)

    def named(self, tok: Token) -> Node:
        """What starts with a name: ``cel.bind``, ``has()``, a call, or the name itself."""
        if tok.text == "cel" and self.peek() == "." and self.peek(1) == "bind":
            return self.bind(tok)
        if self.peek() == "(":
            if tok.text == "has":
                self.take("(")
                inner = self.expr()
                self.take(")")
                return Node("has", tok.start, self.end_of(), children=(inner,))
            args = self.args()
            at = (tok.start, tok.end)
            return Node("call", tok.start, self.end_of(), tok.text, name_at=at, children=(*args,))
        return Node("ident", tok.start, tok.end, tok.text)

    def literal(self, opening: Token) -> Node:
        close = "]" if opening.text == "[" else "}"
        items: list[Node] = []
        while self.peek() != close:
            items.append(self.expr())
            if close == "}":
                self.take(":")
                items.append(self.expr())
            if self.peek() != close:
                self.take(",")
        self.take(close)
        kind = "list" if close == "]" else "map"
        return Node(kind, opening.start, self.end_of(), children=tuple(items))

    def bind(self, cel: Token) -> Node:
        self.take(".")
        self.take("bind")
        self.take("(")
        var = self.take()
        if var.kind != "id":
            raise ParseError("cel.bind() needs (name, init, body)", var.start)
        self.take(",")
        init = self.expr()
        self.take(",")
        body = self.expr()
        self.take(")")
        return Node("bind", cel.start, self.end_of(), var=var.text, children=(init, body))

    def method(self, name: Token, target: Node) -> Node:
        at = (name.start, name.end)
        if name.text not in MACROS or self.peek(2) != ",":
            args = self.args()
            return Node(
                "call", target.start, self.end_of(), name.text, method=True, name_at=at,
                children=(target, *args),
            )  # fmt: skip
        self.take("(")
        var = self.take()
        self.take(",")
        parts = [self.expr()]
        if self.peek() == ",":  # map(x, predicate, transform); the library judges the others
            self.take(",")
            parts.append(self.expr())
        self.take(")")
        return Node(
            "macro", target.start, self.end_of(), name.text, var=var.text, method=True,
            name_at=at, children=(target, *parts),
        )  # fmt: skip


def parse(tokens: list[Token]) -> Node:
    """The tree of the whole expression.

    Raises:
        ParseError: the tokens are not an expression of the grammar (or nest too deeply).
    """
    parser = _Parser(tokens)
    try:
        node = parser.expr()
    except RecursionError:
        raise ParseError("nested too deeply", 0) from None
    if parser.k != len(tokens):
        token = tokens[parser.k]
        raise ParseError(f"unexpected {token.text!r}", token.start)
    return node


Replace = Callable[[Node, Callable[[Node], str]], str | None]


def render(node: Node, source: str, replace: Replace) -> str:
    """The source of ``node``, each node for which ``replace`` answers a text replaced by it.

    ``replace(node, again)`` answers None to keep the node's own source (with its children
    rendered the same way); ``again`` renders a node so.
    """

    def again(child: Node) -> str:
        replaced = replace(child, again)
        if replaced is not None:
            return replaced
        out: list[str] = []
        pos = child.start
        for part in child.children:
            out.append(source[pos : part.start])
            out.append(again(part))
            pos = part.end
        out.append(source[pos : child.end])
        return "".join(out)

    return again(node)


def renamed(node: Node, source: str, name: str, again: Callable[[Node], str]) -> str:
    """The source of a call or macro ``node`` with its name replaced by ``name``."""
    out: list[str] = []
    pos = node.start
    at, end = node.name_at
    parts = list(node.children)
    for part in parts:
        if part.start >= at and pos <= at:
            out.append(source[pos:at] + name)
            pos = end
        out.append(source[pos : part.start])
        out.append(again(part))
        pos = part.end
    if pos <= at:
        out.append(source[pos:at] + name)
        pos = end
    out.append(source[pos : node.end])
    return "".join(out)
