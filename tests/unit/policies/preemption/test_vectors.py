"""The package's edge: Resources to vectors and back, with memory rounded up to whole MiB."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.preemption.vectors import (
    RESOURCE_NAMES,
    as_matrix,
    as_vector,
    check_resources,
    from_vector,
    is_nothing,
    whole_mib,
)
from policies.scheduling.resources import Resources

PLENTY = Resources(1e6, 10**9)


def test_vector_order_is_the_order_of_the_resources_fields() -> None:
    assert Resources._fields == RESOURCE_NAMES
    assert as_vector(Resources(1.5, 4096)).tolist() == [1.5, 4096.0]
    assert as_matrix([Resources(1.0, 2), Resources(3.0, 4)]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert as_matrix([]).shape == (0, 2)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5120.0, 5120),
        # float residue of an exact computation is taken as the whole MiB it stands for
        (5120.000000001, 5120),
        (5119.999999999, 5120),
        (-1e-12, 0),
        (1e10 + 1e-3, 10**10),  # at 1e10 MiB one ulp is ~2e-6: the tolerance is relative there
        # anything more is rounded up, never down (never reclaim less than the target)
        (100.5, 101),
        (13.333333333333334, 14),
        (6.666666666666667, 7),
        (5120.001, 5121),
        (0.2, 1),
        (0.0, 0),
    ],
)
def test_whole_mib_rounds_up_beyond_float_residue(value: float, expected: int) -> None:
    got = whole_mib(value)
    assert got == expected
    assert isinstance(got, int)


@pytest.mark.parametrize(
    ("vector", "most", "expected"),
    [
        ((1.5, 4096.0), PLENTY, Resources(1.5, 4096)),
        ((1e-12, 3.2), PLENTY, Resources(0.0, 4)),  # CPU residue is zero, memory rounds up
        # then capped at what the amount is drawn from, in both dimensions
        ((10.000000000000002, 7.5), Resources(10.0, 7), Resources(10.0, 7)),
        ((2.0, 7.5), Resources(10.0, 8), Resources(2.0, 8)),
    ],
)
def test_from_vector_rounds_memory_up_then_caps(
    vector: tuple[float, float], most: Resources, expected: Resources
) -> None:
    got = from_vector(np.array(vector), most)
    assert got == expected
    assert isinstance(got.memory_mb, int)


@pytest.mark.parametrize(
    ("amount", "nothing"),
    [
        (Resources(), True),
        (Resources(1e-12, 0), True),
        (Resources(0.01, 0), False),
        (Resources(0.0, 1), False),
    ],
)
def test_is_nothing(amount: Resources, nothing: bool) -> None:
    assert is_nothing(amount) is nothing


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        (Resources(-1.0, 0), "cpu must be finite and >= 0"),
        (Resources(math.nan, 0), "cpu must be finite and >= 0"),
        (Resources(math.inf, 0), "cpu must be finite and >= 0"),
        (Resources(1.0, -1), "memory_mb must be a whole number of MiB >= 0"),
        (Resources(1.0, 1.5), "memory_mb must be a whole number of MiB >= 0"),  # type: ignore[arg-type]
        (Resources(1.0, 64.0), "memory_mb must be a whole number of MiB >= 0"),  # type: ignore[arg-type]
        (Resources(1.0, True), "memory_mb must be a whole number of MiB >= 0"),
    ],
)
def test_check_resources_names_the_field(amount: Resources, message: str) -> None:
    with pytest.raises(ValueError, match=f"^field: {message}"):
        check_resources("field", amount)
    check_resources("field", Resources(0.0, 0))
