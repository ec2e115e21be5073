"""Binding: a schema bound to hand-written classes rebuilds exactly those classes.

``tests/schemas/bound.yaml`` binds structs, a union (to a base class) and a mapping
(to a dict subclass) to ``tests/bound_classes.py``; ``tests.golden.bound`` is its codec.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import torch

from mmcodec.generated import multimodal as mm
from tests import bound_classes as bc
from tests.codec.helpers import assert_nested_equal
from tests.golden import bound


def test_the_codec_uses_the_bound_classes_themselves() -> None:
    for name in ("Point", "Circle", "Polygon", "Shape", "Catalog", "Scene"):
        assert getattr(bound, name) is getattr(bc, name)
    assert bound.EncodeError is mm.EncodeError and bound.DecodeError is mm.DecodeError


def _scene() -> bc.Scene:
    vertices = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.5, 1.0]])
    catalog = bc.Catalog(
        origin=bc.Point(0.0, -0.5),
        ring=bc.Circle(bc.Point(1.5, 2.0), 3.0),
        triangle=bc.Polygon(vertices, closed=False),
        big=bc.Polygon(torch.randn(1000, 2)),
    )
    image = torch.randn(3, 64, 64).to(torch.bfloat16)
    features: Any = [image[0], (1, 2.5, [torch.arange(5)]), []]
    return bc.Scene(
        "scene",
        image,
        features,
        catalog,
        outline=bc.Circle(bc.Point(0.0, 0.0), 0.0),
        mask=torch.tensor([True, False, True]),
    )


def _check_scene(decoded: object, scene: bc.Scene) -> None:
    assert type(decoded) is bc.Scene
    assert decoded.name == "scene"
    assert_nested_equal(decoded.image, scene.image)
    assert_nested_equal(decoded.features, scene.features)
    assert_nested_equal(decoded.mask, scene.mask)
    catalog = decoded.catalog
    assert type(catalog) is bc.Catalog
    assert list(catalog) == ["origin", "ring", "triangle", "big"]
    origin, ring, triangle, big = catalog.values()
    assert type(origin) is bc.Point and (origin.x, origin.y) == (0.0, -0.5)
    assert type(origin.x) is float
    assert type(ring) is bc.Circle and type(ring.center) is bc.Point
    assert (ring.center.x, ring.center.y, ring.radius) == (1.5, 2.0, 3.0)
    assert type(triangle) is bc.Polygon and triangle.closed is False
    assert type(big) is bc.Polygon and big.closed is True
    assert isinstance(scene.catalog["triangle"], bc.Polygon)
    assert isinstance(scene.catalog["big"], bc.Polygon)
    assert_nested_equal(triangle.vertices, scene.catalog["triangle"].vertices)
    assert_nested_equal(big.vertices, scene.catalog["big"].vertices)
    assert type(decoded.outline) is bc.Circle
    assert decoded == scene


def test_a_scene_round_trips_into_the_bound_classes() -> None:
    scene = _scene()
    _check_scene(bound.decode(bound.encode(scene), bc.Scene), scene)
    _check_scene(bound.decode_bytes(bound.encode_bytes(scene), bc.Scene), scene)
    frames = [bytes(f) for f in bound.encode(scene)]
    _check_scene(bound.decode(frames, bc.Scene, copy=True), scene)


def test_defaults_of_bound_structs() -> None:
    scene = bc.Scene("bare", torch.zeros(2, 2), 3, bc.Catalog())
    decoded = bound.decode(bound.encode(scene), bc.Scene)
    assert type(decoded) is bc.Scene
    assert (decoded.outline, decoded.mask, decoded.features) == (None, None, 3)
    assert type(decoded.catalog) is bc.Catalog and len(decoded.catalog) == 0
    assert decoded == scene


@pytest.mark.parametrize(
    "shape",
    [bc.Point(1.0, 2.0), bc.Circle(bc.Point(-1.0, 0.25), 9.5), bc.Polygon(torch.ones(4, 2))],
    ids=lambda s: type(s).__name__,
)
def test_a_union_bound_to_a_base_class_rebuilds_the_variant(shape: bc.Shape) -> None:
    as_union = bound.decode(bound.encode(shape, type=bc.Shape), bc.Shape)
    assert type(as_union) is type(shape)
    assert as_union == shape
    as_itself = bound.decode(bound.encode(shape), type(shape))
    assert type(as_itself) is type(shape)
    assert as_itself == shape


def test_a_plain_dict_encodes_as_the_bound_mapping() -> None:
    plain = {"p": bc.Point(3.0, 4.0)}
    decoded = bound.decode(bound.encode(plain, type=bc.Catalog), bc.Catalog)
    assert type(decoded) is bc.Catalog
    assert decoded == bc.Catalog(p=bc.Point(3.0, 4.0))


def test_a_value_outside_the_bound_union_is_an_encode_error() -> None:
    class Square(bc.Shape):  # a subclass of the base that the schema does not know
        __slots__ = ()

    scene = bc.Scene("s", torch.zeros(1), 1, bc.Catalog(sq=Square()))
    with pytest.raises(bound.EncodeError) as info:
        bound.encode(scene)
    assert str(info.value) == "$.catalog['sq']: expected one of Point, Circle, Polygon, got Square"


def test_bound_constraints_are_checked_on_decode() -> None:
    # radius has ge=0 in the schema: a peer's message with a negative radius is refused.
    frames = bound.encode(bc.Circle(bc.Point(0.0, 0.0), 1.0))
    envelope = msgspec.msgpack.decode(frames[0])
    assert envelope[-1] == [1, [0, 0.0, 0.0], 1.0]  # [tag, center, radius]
    envelope[-1][2] = -1.0
    with pytest.raises(bound.DecodeError) as info:
        bound.decode([msgspec.msgpack.encode(envelope)], bc.Circle)
    assert info.value.path == "$.radius"
    assert str(info.value) == "$.radius: Expected `float` >= 0.0"
