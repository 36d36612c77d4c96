"""_records: ``@compared`` gives a frozen dataclass the ==, hash and repr ``@dataclass`` would.

Each case builds the same class twice, once as ``@dataclass`` generates it and once with
``@compared``, and asserts they behave alike on the same values.
"""

from dataclasses import dataclass, field, replace

import pytest

from kvdev._records import compared


@dataclass(frozen=True)
class Plain:
    name: str
    size: int = 0
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)
    tags: tuple[str, ...] = field(default=(), hash=False)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Shared:
    name: str
    size: int = 0
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)
    tags: tuple[str, ...] = field(default=(), hash=False)


VALUES = [
    {"name": "eth1"},
    {"name": "eth1", "size": 3},
    {"name": "eth1", "note": "other note"},
    {"name": "eth1", "secret": "s"},
    {"name": "eth1", "tags": ("a",)},
    {"name": "eth2", "size": 3, "note": "n", "secret": "x", "tags": ("b", "c")},
]


@pytest.mark.parametrize("left", VALUES)
@pytest.mark.parametrize("right", VALUES)
def test_equality_is_the_generated_one(left, right):
    assert (Shared(**left) == Shared(**right)) == (Plain(**left) == Plain(**right))
    assert (Shared(**left) != Shared(**right)) == (Plain(**left) != Plain(**right))


@pytest.mark.parametrize("values", VALUES)
def test_repr_and_hash_follow_the_fields_as_generated(values):
    assert repr(Shared(**values)) == repr(Plain(**values)).replace("Plain(", "Shared(", 1)
    assert hash(Shared(**values)) == hash(Shared(**{**values, "note": "?", "tags": ("z",)}))
    assert len({Shared(**v) for v in VALUES}) == len({Plain(**v) for v in VALUES})


def test_another_class_with_the_same_fields_is_not_equal():
    @compared
    @dataclass(frozen=True, slots=True, eq=False, repr=False)
    class Twin:
        name: str
        size: int = 0
        note: str = field(default="", compare=False)
        secret: str = field(default="", repr=False)
        tags: tuple[str, ...] = field(default=(), hash=False)

    assert Twin("eth1") != Shared("eth1")
    assert Shared("eth1").__eq__(Twin("eth1")) is NotImplemented
    assert Shared("eth1") != ("eth1", 0)


def test_none_and_one_field_and_the_frozen_rest_are_kept():
    @compared
    @dataclass(frozen=True, eq=False, repr=False)
    class Empty:
        pass

    @compared
    @dataclass(frozen=True, eq=False, repr=False)
    class One:
        value: float

    nan = float("nan")
    assert Empty() == Empty()
    assert repr(Empty()) == "test_none_and_one_field_and_the_frozen_rest_are_kept.<locals>.Empty()"
    assert One(nan) == One(nan)  # the same object: a tuple compares it as equal, as generated
    assert One(1.0) != One(2.0)
    assert replace(One(1.0), value=2.0) == One(2.0)
    with pytest.raises(AttributeError):
        One(1.0).value = 3.0  # type: ignore[misc]


def test_what_the_class_defines_itself_is_kept():
    @compared
    @dataclass(frozen=True, eq=False, repr=False)
    class Own:  # noqa: PLW1641 - the hash given back is the point
        name: str

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Own) and self.name.lower() == other.name.lower()

        def __repr__(self) -> str:
            return f"<{self.name}>"

    @compared
    @dataclass(frozen=True, eq=False, repr=False)
    class Unhashable:
        name: str
        __hash__ = None  # type: ignore[assignment]

    assert Own("A") == Own("a")
    assert repr(Own("A")) == "<A>"
    assert hash(Own("A")) == hash(Own("A"))  # given back, as @dataclass gives it when frozen
    with pytest.raises(TypeError):
        hash(Unhashable("a"))


def test_a_value_that_contains_itself_is_drawn_with_dots():
    @compared
    @dataclass(frozen=True, eq=False, repr=False)
    class Box:
        items: list[object]

    box = Box([])
    box.items.append(box)
    assert (
        repr(box)
        == "test_a_value_that_contains_itself_is_drawn_with_dots.<locals>.Box(items=[...])"
    )


def test_only_frozen_dataclasses_without_their_own_eq_and_repr_are_taken():
    @dataclass(frozen=True)
    class Generated:
        name: str

    @dataclass(eq=False, repr=False)
    class Mutable:
        name: str

    class NotOne:
        pass

    for cls in (Generated, Mutable, NotOne):
        with pytest.raises(TypeError, match="@compared is for"):
            compared(cls)
