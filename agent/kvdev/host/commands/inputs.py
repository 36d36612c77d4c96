"""Read Kubernetes object files for the host side (the I/O half of ``kvdev.host.k8s``).

It owns what ``-f`` names, as kubectl reads it: a file, ``-`` (standard input, once) or a
directory (its ``*.yaml``, ``*.yml`` and ``*.json`` files, in name order, not recursing).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from kvdev.errors import Problem, SchemaError, TransientReadError
from kvdev.host.k8s import K8sObject, load
from kvdev.host.k8s.load import SkippedObjectWarning, load_kinds
from kvdev.host.k8s.model import Document

_O = TypeVar("_O", bound=Document)


Progress = Callable[[str, int, int], None]
"""Told after each file read: its name, its size in bytes, the objects loaded so far."""


def load_files(paths: Iterable[str | Path], progress: Progress | None = None) -> list[K8sObject]:
    """Load every object of every file, in order; errors of all files are reported together.

    Raises:
        SchemaError: a file is not valid YAML/JSON or holds an invalid object.
        TransientReadError: a file could not be read.
    """
    objects: list[K8sObject] = []
    errors: list[Problem] = []
    for path, text in _texts(paths, errors):
        try:
            objects.extend(load(text, str(path)))
        except SchemaError as e:
            errors.extend(e.problems)
        if progress is not None:
            progress(str(path), len(text.encode()), len(objects))
    if errors:
        raise SchemaError(errors)
    return objects


def load_files_of(
    paths: Iterable[str | Path], kinds: Mapping[tuple[str, str], type[_O]]
) -> list[_O]:
    """``load_files`` for the given kinds (skipped kinds are warned about, as there).

    Raises:
        SchemaError, TransientReadError: as ``load_files``.
    """
    objects: list[_O] = []
    errors: list[Problem] = []
    for path, text in _texts(paths, errors):
        try:
            found, skipped = load_kinds(text, str(path), kinds)
        except SchemaError as e:
            errors.extend(e.problems)
            continue
        objects.extend(found)
        for problem in skipped:
            warnings.warn(str(problem), SkippedObjectWarning, stacklevel=2)
    if errors:
        raise SchemaError(errors)
    return objects


SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"


def expand(paths: Iterable[str | Path]) -> list[str | Path]:
    """The files ``-f`` names: a directory becomes its object files, sorted; ``-`` stays.

    Raises:
        TransientReadError: a path that does not exist, or a directory with no object file.
    """
    out: list[str | Path] = []
    for path in paths:
        if str(path) == STDIN:
            out.append(STDIN)
            continue
        p = Path(path)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file())
            if not found:
                msg = f"{path}: a directory with no {', '.join('*' + s for s in SUFFIXES)} file"
                raise TransientReadError(msg)
            out.extend(found)
        elif not p.exists():
            raise TransientReadError(f"{path}: no such file or directory")
        else:
            out.append(p)
    return out


def _read(path: str | Path) -> str:
    if str(path) == STDIN:
        return sys.stdin.buffer.read().decode("utf-8")
    return Path(path).read_text(encoding="utf-8")


def _texts(paths: Iterable[str | Path], errors: list[Problem]) -> Iterable[tuple[str | Path, str]]:
    for path in expand(paths):
        try:
            text = _read(path)
        except OSError as e:
            raise TransientReadError(f"{path}: {e.strerror or e}") from e
        except UnicodeDecodeError as e:
            errors.append(Problem(f"not UTF-8 text: {e.reason}", str(path)))
            continue
        yield ("<stdin>" if str(path) == STDIN else path), text
