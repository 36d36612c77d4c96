"""The CEL library's compiled core, loaded without the library's package ``__init__``.

``import cel`` also imports the library's own command line (typer, click, prompt_toolkit:
about 0.2 s of every ``kvdev-host`` start). The allocator needs only the extension module
(``compile``, ``Context``, ``Program``), so ``native`` is that module loaded on its own; when
the library is not laid out that way, ``native`` is the package, imported the usual way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from types import ModuleType


def _extension() -> ModuleType | None:
    """The library's compiled module on its own, or None when it is not laid out that way."""
    package = importlib.util.find_spec("cel")
    where = list(package.submodule_search_locations or []) if package else []
    found = importlib.machinery.PathFinder.find_spec("cel", where)
    if (
        found is None
        or found.origin is None
        or not isinstance(found.loader, importlib.machinery.ExtensionFileLoader)
    ):
        return None
    spec = importlib.util.spec_from_file_location(f"{__name__}.cel", found.origin)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load() -> ModuleType:
    try:
        module = _extension()
    except ImportError:
        module = None
    if module is not None:
        return module
    import cel  # noqa: PLC0415 - the fallback, the whole package

    return cel


native = _load()
