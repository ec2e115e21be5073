"""Hand-written classes that ``tests/schemas/bound.yaml`` binds its types to.

They stand in for an engine's own classes: the project does not own them, and the
generated codec (``tests.golden.bound``) must rebuild exactly these classes. ``Shape``
is a base class the ``Shape`` union is bound to; ``Catalog`` is a dict subclass;
``Priority`` a plain ``Enum`` that ``tests/schemas/enums.yaml`` binds an enum to.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

from mmcodec.runtime.equality import values_equal

NestedTensors = Any
"""A tensor, an int or float leaf, or a list or tuple of NestedTensors."""


class Shape:
    """Base class of the shapes; the schema's ``Shape`` union is bound to it."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]

    def _fields(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Shape)
            and type(other) is type(self)
            and values_equal(self._fields(), other._fields())
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._fields()!r}"


class Point(Shape):
    __slots__ = ("x", "y")

    def __init__(self, x: float, y: float) -> None:
        self.x = x
        self.y = y

    def _fields(self) -> tuple[object, ...]:
        return (self.x, self.y)


class Circle(Shape):
    __slots__ = ("center", "radius")

    def __init__(self, center: Point, radius: float) -> None:
        self.center = center
        self.radius = radius

    def _fields(self) -> tuple[object, ...]:
        return (self.center, self.radius)


class Polygon(Shape):
    """A polygon whose vertices are a float tensor of shape (n, 2)."""

    __slots__ = ("closed", "vertices")

    def __init__(self, vertices: torch.Tensor, closed: bool = True) -> None:
        self.vertices = vertices
        self.closed = closed

    def _fields(self) -> tuple[object, ...]:
        return (self.vertices, self.closed)


class Catalog(dict[str, Shape]):
    """Named shapes, in insertion order."""

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, dict)
            and list(self) == list(other)
            and all(self[k] == other[k] for k in self)
        )

    def __ne__(self, other: object) -> bool:
        return not self == other


class Scene:
    """A struct with a tensor, nested tensors, a bound mapping and an optional union."""

    __slots__ = ("catalog", "features", "image", "mask", "name", "outline")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        name: str,
        image: torch.Tensor,
        features: NestedTensors,
        catalog: Catalog,
        outline: Shape | None = None,
        mask: torch.Tensor | None = None,
    ) -> None:
        self.name = name
        self.image = image
        self.features = features
        self.catalog = catalog
        self.outline = outline
        self.mask = mask

    def _fields(self) -> tuple[object, ...]:
        return (self.name, self.image, self.features, self.catalog, self.outline, self.mask)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Scene)
            and type(other) is type(self)
            and values_equal(self._fields(), other._fields())
        )

    def __repr__(self) -> str:
        return f"Scene(name={self.name!r}, ...)"


class Priority(enum.Enum):
    """A plain Enum (neither IntEnum nor StrEnum): its members are not ints."""

    LOW = 1
    HIGH = 2
