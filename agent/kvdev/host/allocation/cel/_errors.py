"""The CEL selector error hierarchy: compile, runtime and cost-limit failures."""

from __future__ import annotations

from kvdev.errors import PermanentError


class CelError(PermanentError):
    """A CEL selector could not be used."""


class CelCompileError(CelError):
    """The expression does not compile (syntax, undeclared reference, empty, too long)."""


class CelRuntimeError(CelError):
    """Evaluation failed: no such key, wrong types, a non-bool result, a bad function argument."""


class CelCostLimitError(CelRuntimeError):
    """The evaluation would exceed the cost budget (:data:`COST_LIMIT`)."""
