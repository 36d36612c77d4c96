"""Compiling selectors: :class:`Selector`, :func:`compile_selector` and its cache.

Compilation parses the expression once into a tree (``_tree``; what it cannot parse is a
compile error), renders it back with ``cel.bind`` rewritten (the library has none) and
``matches`` renamed to ours (``_regex``), compiles that with the library, runs the static
passes over the tree (``_cost``: upstream's estimate and the copy bound; ``_fast``: the
shortcut; the constant ``matches`` patterns) and rejects undeclared references (functions and
variables outside the supported environment).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

from kvdev.host.allocation.cel._cost import COST_LIMIT, Analysis, analyze
from kvdev.host.allocation.cel._errors import CelCompileError, CelCostLimitError, CelRuntimeError
from kvdev.host.allocation.cel._fast import Answer, shortcut
from kvdev.host.allocation.cel._functions import FUNCTIONS
from kvdev.host.allocation.cel._interrupt import take_interruption
from kvdev.host.allocation.cel._native import native
from kvdev.host.allocation.cel._regex import FUNCTION, compile_constant, constant_patterns
from kvdev.host.allocation.cel._tokens import tokenize
from kvdev.host.allocation.cel._tree import Node, ParseError, parse, renamed, render
from kvdev.host.allocation.cel._values import as_quantity, as_semver, type_name

if TYPE_CHECKING:
    import cel

    from kvdev.host.allocation.cel._view import DeviceView

MAX_EXPRESSION_LENGTH: Final = 10 * 1024  # upstream CELSelectorExpressionMaxLength (bytes)
_FRAMES_PER_TOKEN: Final = 8  # the parser's frames per nested token, with room to spare
_DEEP: Final = threading.Lock()  # one deep compilation at a time owns the raised limit

# Functions and type names of the library's own standard environment that selectors may use.
_BUILTIN_FUNCTIONS: Final = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "dyn",
        "type",
        "duration",
        "timestamp",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getMonth",
        "getSeconds",
    }
)
_TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type", "type"}
)


def _rewritten(tree: Node, expression: str) -> str:
    """The source the library compiles, from the tree.

    ``cel.bind(v, init, body)`` becomes ``[init].map(v, body)[0]`` (the library has none), and
    every ``matches`` call :data:`FUNCTION`.
    """

    def replace(node: Node, again: Callable[[Node], str]) -> str | None:
        if node.kind == "bind":
            init, body = node.children
            return f"([{again(init)}].map({node.var}, {again(body)})[0])"
        if node.kind == "call" and node.text == "matches":
            return renamed(node, expression, FUNCTION, again)
        return None

    return expression[: tree.start] + render(tree, expression, replace) + expression[tree.end :]


class Selector:
    """A compiled CEL selector expression. Create with :func:`compile_selector`."""

    __slots__ = ("_analysis", "_fast", "_program", "expression")

    def __init__(
        self, expression: str, program: cel.Program, analysis: Analysis, fast: Answer | None
    ) -> None:
        self.expression = expression
        self._program = program
        self._analysis = analysis
        self._fast = fast

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"

    @property
    def estimated_cost(self) -> int:
        """Upstream's estimated cost (compared with :data:`COST_LIMIT`; ``_estimate``)."""
        return self._analysis.cost

    @property
    def copy_bound(self) -> int:
        """The values the library may copy (kvdev's own limit, also :data:`COST_LIMIT`)."""
        return self._analysis.copies

    def _execute(self, device: DeviceView) -> object:
        if self._analysis.cost > COST_LIMIT:
            raise CelCostLimitError(
                f"CEL runtime error: {_quote(self.expression)}: actual cost limit exceeded "
                f"(estimated cost {self._analysis.cost} > {COST_LIMIT})"
            )
        if self._analysis.copies > COST_LIMIT:
            raise CelCostLimitError(
                f"CEL runtime error: {_quote(self.expression)}: actual cost limit exceeded "
                f"(estimated copies {self._analysis.copies} > {COST_LIMIT}: the evaluator "
                "copies the lists a literal or map() holds; a limit of kvdev's, not upstream's)"
            )
        try:
            ctx = device.context(self._analysis.domains)
            result = self._program.execute(ctx)
        except Exception as exc:  # whatever the library raises is an evaluation failure
            stopped = take_interruption()
            if stopped is not None:
                raise stopped from None
            raise CelRuntimeError(_runtime_message(self.expression, exc)) from exc
        stopped = take_interruption()
        if stopped is not None:
            raise stopped
        return result

    def value(self, device: DeviceView) -> object:
        """Evaluate to whatever the expression yields (module docstring of the package).

        Raises:
            CelCostLimitError: the expression's estimated cost exceeds :data:`COST_LIMIT`.
            CelRuntimeError: evaluation failed.
            BaseException: whatever the check of :func:`interruptible` raised.
        """
        return _pythonic(self._execute(device))

    def matches(self, device: DeviceView) -> bool:
        """Evaluate the selector against one device.

        Raises:
            CelCostLimitError: the expression's estimated cost exceeds :data:`COST_LIMIT`.
            CelRuntimeError: evaluation failed or did not produce a bool.
            BaseException: whatever the check of :func:`interruptible` raised.
        """
        if self._fast is not None:
            said = self._fast(device)
            if said is not None:
                return said
        result = self._execute(device)
        if not isinstance(result, bool):
            raise CelRuntimeError(
                f"CEL runtime error: {_quote(self.expression)}: expression must evaluate to bool, "
                f"got {type_name(result)}"
            )
        return result


def _pythonic(v: object) -> object:
    """A CEL result with the tagged version and quantity strings as Python values."""
    if isinstance(v, list | tuple):
        return [_pythonic(x) for x in v]
    semver = as_semver(v)
    if semver is not None:
        return semver
    amount = as_quantity(v)
    return v if amount is None else amount


def _quote(expression: str, limit: int = 200) -> str:
    """The expression for an error message, shortened if long."""
    return repr(expression if len(expression) <= limit else expression[:limit] + "...")


def _parse_detail(source: str, exc: BaseException, limit: int = 300) -> str:
    """The library's parse error without its copy of the whole expression, lines shortened."""
    text = str(exc).removeprefix(f"Failed to parse expression '{source}': ")
    return "\n".join(
        line if len(line) <= limit else line[:limit] + "..." for line in text.splitlines()[:3]
    )


def _runtime_message(expression: str, exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        detail = f"no such key: {exc.args[0] if exc.args else ''}"
        hint = " (guard the reference with has())"
    else:
        detail = str(exc) or type(exc).__name__
        hint = ""
    return f"CEL runtime error: {_quote(expression)}: {detail}{hint}"


def compile_selector(expression: str) -> Selector:
    """Compile a selector expression once; later calls with the same text return the same object.

    Raises:
        CelCompileError: empty, longer than 10 KiB, syntax error, undeclared reference.
    """
    compiled = _compile_cached(expression)
    if isinstance(compiled, CelCompileError):
        raise compiled
    return compiled


@functools.lru_cache(maxsize=16384)
def _compile_cached(expression: str) -> Selector | CelCompileError:
    try:
        return compile_uncached(expression)
    except CelCompileError as exc:
        return exc


def compile_uncached(expression: str) -> Selector:
    """Compile ``expression`` without the cache (what :func:`compile_selector` caches)."""
    if not expression.strip():
        raise CelCompileError("CEL compile error: expression is empty")
    if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"CEL compile error: expression is longer than {MAX_EXPRESSION_LENGTH} bytes"
        )
    tokens = tokenize(expression)
    with _room_for(len(tokens)):
        try:
            tree = parse(tokens)
        except ParseError as exc:
            raise _unparsed(expression, exc) from None
        source = _rewritten(tree, expression)
        try:
            program = native.compile(source)
        except (ValueError, RuntimeError) as exc:
            raise CelCompileError(
                f"CEL compile error: {_quote(expression)}: {_parse_detail(source, exc)}"
            ) from exc
        analysis = analyze(tree, tokens[-1].end)
        fast = shortcut(tree, expression)
    _compile_patterns(tree)
    allowed = {"device", *analysis.bound_vars, *_TYPE_NAMES}
    undeclared = [v for v in program.variables() if v not in allowed]
    undeclared += [
        f
        for f in program.functions()
        if f[:1].isalpha() and f not in _BUILTIN_FUNCTIONS and f not in FUNCTIONS
    ]
    if undeclared:
        raise CelCompileError(
            f"CEL compile error: {_quote(expression)}: "
            f"undeclared reference to {', '.join(undeclared)}"
        )
    return Selector(expression, program, analysis, fast)


@contextlib.contextmanager
def _room_for(tokens: int) -> Iterator[None]:
    """Recursion room for the tree of ``tokens`` tokens: its depth is bounded by their count.

    A chain the library accepts (``!`` x 9000, ``.a`` x 3000, ``1 + 1 + ...``) is that deep;
    the parser and the passes recurse once or a few times per level. The limit is raised for
    the one compilation that needs it (one at a time) and put back.
    """
    need = _FRAMES_PER_TOKEN * tokens + 1000
    if need <= sys.getrecursionlimit():
        yield
        return
    with _DEEP:
        before = sys.getrecursionlimit()
        sys.setrecursionlimit(max(before, need))
        try:
            yield
        finally:
            sys.setrecursionlimit(before)


def _unparsed(expression: str, exc: ParseError) -> CelCompileError:
    """A parse failure: the library's own message when it cannot parse the text either."""
    try:
        native.compile(expression)
    except (ValueError, RuntimeError) as library:
        detail = _parse_detail(expression, library)
    else:
        detail = f"cannot parse at offset {exc.at}: {exc}"
    return CelCompileError(f"CEL compile error: {_quote(expression)}: {detail}")


def _compile_patterns(tree: Node) -> None:
    """Compile each constant ``matches`` pattern now, as upstream does (a bad one is an error)."""
    for literal in constant_patterns(tree):
        pattern = native.compile(literal.text).execute(native.Context())
        if isinstance(pattern, str):
            compile_constant(pattern)


def reads_device(expression: str) -> bool:
    """Whether the expression names the ``device`` variable (else its value is a constant).

    Raises:
        CelCompileError: the expression does not tokenize.
    """
    return any(t.kind == "id" and t.text == "device" for t in tokenize(expression))
