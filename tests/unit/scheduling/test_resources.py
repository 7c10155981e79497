"""Resource vectors: arithmetic, fitting with float tolerance, dominant share."""

from __future__ import annotations

import pytest

from policies.scheduling.resources import ZERO, Resources
from tests.builders import res


@pytest.mark.parametrize(
    ("left", "right", "total", "difference"),
    [
        (res(1.5, 100), res(0.5, 28), res(2.0, 128), res(1.0, 72)),
        (res(0.0, 0), res(2.0, 64), res(2.0, 64), res(-2.0, -64)),
    ],
)
def test_add_and_sub(left: Resources, right: Resources, total: Resources, difference: Resources):
    assert left + right == total
    assert left - right == difference


def test_mul_scales_both_dimensions():
    assert res(0.5, 100) * 3 == res(1.5, 300)
    assert res(0.5, 100) * 0 == ZERO


@pytest.mark.parametrize(
    ("request_", "available", "fits"),
    [
        (res(1.0, 256), res(1.0, 256), True),  # exactly full
        (res(1.0, 257), res(4.0, 256), False),  # memory is exact: one MiB over refuses
        (res(1.01, 1), res(1.0, 4096), False),
        (res(0.3, 1), res(0.1, 1) + res(0.2, 0), True),  # 0.1 + 0.2 > 0.3 by one ulp
        (ZERO, ZERO, True),
        (res(1.0, 1), res(-1.0, 100), False),  # an over-allocated node fits nothing
    ],
)
def test_fits_in(request_: Resources, available: Resources, fits: bool):
    assert request_.fits_in(available) is fits


@pytest.mark.parametrize(
    ("amount", "capacity", "share"),
    [
        (res(1.0, 512), res(4.0, 1024), 0.5),  # memory dominates
        (res(3.0, 512), res(4.0, 1024), 0.75),  # cpu dominates
        (res(1.0, 512), res(0.0, 1024), 0.5),  # a zero dimension is ignored
        (res(1.0, 512), ZERO, 0.0),
    ],
)
def test_dominant_share(amount: Resources, capacity: Resources, share: float):
    assert amount.dominant_share(capacity) == pytest.approx(share)


@pytest.mark.parametrize(
    ("amount", "positive"),
    [(res(0.1, 1), True), (res(0.0, 1), False), (res(1.0, 0), False), (res(-1.0, 5), False)],
)
def test_is_positive_needs_both_dimensions(amount: Resources, positive: bool):
    assert amount.is_positive() is positive


def test_resources_are_immutable_and_ordered():
    with pytest.raises(AttributeError):
        res().cpu = 2.0  # type: ignore[misc]
    assert sorted([res(2.0, 1), res(1.0, 9), res(1.0, 3)]) == [
        res(1.0, 3),
        res(1.0, 9),
        res(2.0, 1),
    ]
