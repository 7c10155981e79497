"""Sec. IV-C: copies on reserved slots, and the T versus T' numerical study."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.reservation.stragglers import (
    CopyLaunch,
    Finisher,
    PhaseSlots,
    first_finisher,
    phase_times,
    plan_copies,
    straggler_study,
)


def slots(ongoing: str, idle: str, copied: str = "") -> PhaseSlots:
    return PhaseSlots(tuple(ongoing.split()), frozenset(copied.split()), tuple(idle.split()))


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        (slots("t3 t4", "s1"), ()),  # more ongoing than idle reserved slots
        (slots("t3 t4", "s1 s2"), (CopyLaunch("t3", "s1"), CopyLaunch("t4", "s2"))),  # Fig. 9
        (slots("t4", "s1 s2 s3"), (CopyLaunch("t4", "s1"),)),
        (slots("t3 t4", "s1 s2", copied="t3"), (CopyLaunch("t4", "s1"),)),
        (slots("t3 t4", "s1 s2", copied="t3 t4"), ()),  # never a second copy
        (slots("", "s1"), ()),
    ],
)
def test_plan_copies(phase: PhaseSlots, expected: tuple[CopyLaunch, ...]) -> None:
    assert plan_copies(phase) == expected


@pytest.mark.parametrize(
    ("original", "copy", "winner"),
    [(10.0, 4.0, Finisher.COPY), (3.0, 4.0, Finisher.ORIGINAL), (4.0, 4.0, Finisher.ORIGINAL)],
)
def test_first_finisher_wins(original: float, copy: float, winner: Finisher) -> None:
    assert first_finisher(original, copy) is winner


@pytest.mark.parametrize(
    ("durations", "copies", "t", "t_prime"),
    [
        # N = 4, h = 2: copies start at t_(2) = 2; t_(3): min(1, 5) = 1; t_(4): min(98, 3) = 3
        ([[100.0, 1.0, 2.0, 3.0]], [[9.0, 9.0, 5.0, 3.0]], 100.0, 5.0),
        # N = 3, h = 2: only t_(3) is copied; the original wins
        ([[1.0, 2.0, 4.0]], [[0.0, 0.0, 7.0]], 4.0, 4.0),
        # N = 1: nothing to copy
        ([[6.0]], [[1.0]], 6.0, 6.0),
    ],
)
def test_phase_times_follow_the_formula(
    durations: list[list[float]], copies: list[list[float]], t: float, t_prime: float
) -> None:
    slowest, with_copies = phase_times(np.array(durations), np.array(copies))
    assert slowest.tolist() == [t]
    assert with_copies.tolist() == [t_prime]


@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(1.0, 1e4), min_size=n, max_size=n),
            st.lists(st.floats(1.0, 1e4), min_size=n, max_size=n),
        )
    )
)
def test_copies_never_slow_a_phase_down(pair: tuple[list[float], list[float]]) -> None:
    durations, copies = pair
    slowest, with_copies = phase_times(np.array([durations]), np.array([copies]))
    assert with_copies[0] <= slowest[0]
    assert with_copies[0] >= sorted(durations)[(len(durations) + 1) // 2 - 1]


def test_alpha_1_6_with_20_tasks_more_than_halves_the_mean_phase_time() -> None:
    study = straggler_study(1.6, 20, 2000, np.random.default_rng(2017))
    assert study.reduction > 0.5
    assert study.mean_phase_time_with_copies < study.mean_phase_time


def test_heavier_tails_gain_more() -> None:
    light = straggler_study(3.0, 20, 2000, np.random.default_rng(1))
    heavy = straggler_study(1.2, 20, 2000, np.random.default_rng(1))
    assert heavy.reduction > light.reduction > 0.0


def test_study_is_reproducible_from_the_seed() -> None:
    first = straggler_study(1.6, 20, 200, np.random.default_rng(5))
    second = straggler_study(1.6, 20, 200, np.random.default_rng(5))
    assert first == second


@pytest.mark.parametrize(
    ("alpha", "tasks", "runs", "field"),
    [(0.0, 5, 5, "alpha"), (2.0, 0, 5, "tasks"), (2.0, 5, 0, "runs")],
)
def test_study_rejects_bad_arguments(alpha: float, tasks: int, runs: int, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        straggler_study(alpha, tasks, runs, np.random.default_rng(0))
