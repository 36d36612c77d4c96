"""Read Kubernetes object files for the host side (the I/O half of ``kvdev.host.k8s``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kvdev.errors import Problem, SchemaError, TransientReadError
from kvdev.host.k8s import K8sObject, load


def load_files(paths: Iterable[str | Path]) -> list[K8sObject]:
    """Load every object of every file, in order; errors of all files are reported together.

    Raises:
        SchemaError: a file is not valid YAML/JSON or holds an invalid object.
        TransientReadError: a file could not be read.
    """
    objects: list[K8sObject] = []
    errors: list[Problem] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise TransientReadError(f"{path}: {e.strerror or e}") from e
        except UnicodeDecodeError as e:
            errors.append(Problem(f"not UTF-8 text: {e.reason}", str(path)))
            continue
        try:
            objects.extend(load(text, str(path)))
        except SchemaError as e:
            errors.extend(e.problems)
    if errors:
        raise SchemaError(errors)
    return objects
