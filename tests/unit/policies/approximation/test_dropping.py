"""Task dropping: ⌈n(1 − θ_k)⌉ kept tasks per stage, never fewer than one (DiAS Sec. 3.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.approximation.dropping import (
    check_drop_ratio,
    choose_kept_partitions,
    drop_ratio_for,
    kept_per_stage,
    kept_tasks,
    kept_tasks_array,
)

# (n, θ, kept): the ceiling, float-rounding traps (0.3, 0.7, 1/3) and the floor of one task
KEPT = [
    (10, 0.0, 10),
    (10, 0.1, 9),
    (10, 0.3, 7),
    (10, 0.7, 3),
    (10, 0.25, 8),
    (3, 1 / 3, 2),
    (49, 0.2, 40),
    (50, 0.2, 40),
    (50, 0.9, 5),
    (1, 0.9, 1),
    (5, 0.99, 1),
    (5, 1.0, 1),
]


@pytest.mark.parametrize(("n", "theta", "kept"), KEPT)
def test_kept_tasks(n: int, theta: float, kept: int) -> None:
    assert kept_tasks(n, theta) == kept
    assert kept_tasks_array(np.array([n]), theta).tolist() == [kept]


@pytest.mark.parametrize("theta", [-0.1, 1.5, math.nan, math.inf])
def test_bad_drop_ratio_is_refused(theta: float) -> None:
    with pytest.raises(ValueError, match="drop ratio"):
        check_drop_ratio(theta)
    with pytest.raises(ValueError, match="drop ratio"):
        kept_tasks(10, theta)


def test_empty_stage_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        kept_tasks(0, 0.5)
    with pytest.raises(ValueError, match="at least one task"):
        kept_tasks_array(np.array([3, 0]), 0.5)


@given(n=st.integers(1, 10_000), theta=st.floats(0.0, 1.0))
def test_dropping_never_keeps_fewer_than_one_nor_more_than_n(n: int, theta: float) -> None:
    kept = kept_tasks(n, theta)
    assert 1 <= kept <= n
    # The ceiling: what is kept covers the un-dropped share, within float rounding.
    assert kept >= n * (1 - theta) - 1e-6
    assert kept < max(1.0, n * (1 - theta)) + 1 + 1e-6


@given(n=st.integers(1, 500), a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_more_dropping_never_keeps_more(n: int, a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert kept_tasks(n, high) <= kept_tasks(n, low)


@given(sizes=st.lists(st.integers(1, 1000), min_size=1, max_size=20), theta=st.floats(0.0, 1.0))
def test_vectorised_matches_scalar(sizes: list[int], theta: float) -> None:
    assert kept_tasks_array(np.array(sizes), theta).tolist() == [
        kept_tasks(n, theta) for n in sizes
    ]
    assert kept_per_stage(sizes, theta) == tuple(kept_tasks(n, theta) for n in sizes)


def test_drop_ratio_for_priority() -> None:
    ratios = [0.4, 0.2, 0.0]
    assert [drop_ratio_for(k, ratios) for k in range(3)] == [0.4, 0.2, 0.0]
    with pytest.raises(ValueError, match="priority 3"):
        drop_ratio_for(3, ratios)


@pytest.mark.parametrize(("n", "theta"), [(10, 0.2), (7, 0.0), (5, 1.0), (100, 0.33)])
def test_chosen_partitions_are_a_random_subset_of_the_right_size(n: int, theta: float) -> None:
    chosen = choose_kept_partitions(n, theta, np.random.default_rng(3))
    assert chosen.tolist() == sorted(set(chosen.tolist()))
    assert len(chosen) == kept_tasks(n, theta)
    assert chosen.min() >= 0
    assert chosen.max() < n
    again = choose_kept_partitions(n, theta, np.random.default_rng(3))
    assert again.tolist() == chosen.tolist()


def test_chosen_partitions_are_uniform() -> None:
    rng = np.random.default_rng(11)
    counts = np.zeros(10)
    for _ in range(2000):
        counts[choose_kept_partitions(10, 0.5, rng)] += 1
    # Each partition is kept with probability 1/2: 1000 ± a few standard deviations (≈ 22).
    assert np.all(np.abs(counts - 1000) < 110)
