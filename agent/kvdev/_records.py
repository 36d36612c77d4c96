"""Equality, hash and repr of frozen dataclasses as shared functions, written once.

``@dataclass`` generates ``__eq__``, ``__hash__`` and ``__repr__`` for each class from source
text, one ``exec`` each: compiled again at every start of every process, never cached as
bytecode (~80 us each; the agent's start made ~650 of them). ``@compared``, put above
``@dataclass(frozen=True, eq=False, repr=False)``, gives the class these three with the same
meaning instead:

* ``==``: the same class, and the fields that compare (``field(compare=...)``) equal, as
  tuples, in order (else ``NotImplemented``);
* ``hash``: of the tuple of the fields that hash (``field(hash=...)``, else ``compare``);
* ``repr``: ``QualName(field=value!r, ...)`` over the fields shown (``field(repr=...)``),
  ``...`` for a value that contains itself.

What the class defines itself is kept, as ``@dataclass`` keeps it; a ``__hash__`` the class
body dropped by defining ``__eq__`` alone is given back, as ``@dataclass`` gives it for a
frozen class. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Getter = Callable[[Any], tuple[Any, ...]]

_compare: dict[type, _Getter] = {}
_hash: dict[type, _Getter] = {}
_shown: dict[type, tuple[str, ...]] = {}


def _getter(names: list[str]) -> _Getter:
    """The values of ``names`` of an object, as a tuple (also for none or one)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda _obj: ()


def _compared(cls: type) -> _Getter:
    found = _compare.get(cls)
    if found is None:
        found = _compare[cls] = _getter([f.name for f in dataclasses.fields(cls) if f.compare])
    return found


def _hashed(cls: type) -> _Getter:
    found = _hash.get(cls)
    if found is None:
        names = [
            f.name for f in dataclasses.fields(cls) if (f.compare if f.hash is None else f.hash)
        ]
        found = _hash[cls] = _getter(names)
    return found


def _eq(self: object, other: object) -> object:
    if other.__class__ is self.__class__:
        values = _compared(self.__class__)
        return values(self) == values(other)
    return NotImplemented


def _hash_of(self: object) -> int:
    return hash(_hashed(self.__class__)(self))


@reprlib.recursive_repr()
def _repr(self: object) -> str:
    cls: Any = self.__class__
    names = _shown.get(cls)
    if names is None:
        names = _shown[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.repr)
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
    return f"{cls.__qualname__}({shown})"


def compared(cls: type[T]) -> type[T]:
    """Give a frozen dataclass made with ``eq=False, repr=False`` its ==, hash and repr.

    Raises:
        TypeError: ``cls`` is no such dataclass (a mistake in the code, at import).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or params.eq or params.repr:
        raise TypeError(
            f"{cls.__qualname__}: @compared is for @dataclass(frozen=True, eq=False, repr=False)"
        )
    own = dict(cls.__dict__)  # as the class body left it
    if "__eq__" not in own:
        cls.__eq__ = _eq  # type: ignore[assignment,method-assign]
    explicit = own.get("__hash__") is not None or ("__hash__" in own and "__eq__" not in own)
    if not explicit:
        cls.__hash__ = _hash_of  # type: ignore[method-assign]
    if "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[method-assign]
    return cls
