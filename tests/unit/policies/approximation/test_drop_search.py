"""Accuracy curves and the drop-ratio search under per-priority accuracy bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.approximation.accuracy import PAPER_ACCURACY_CURVE, AccuracyCurve
from policies.approximation.drop_search import (
    SearchClass,
    drop_ratio_grid,
    search_drop_ratios,
)
from policies.approximation.job_time import TaskLevelJob, task_level_model
from policies.approximation.phase_type import PhaseType, erlang_with_mean, moments
from policies.approximation.priority_queues import (
    Discipline,
    PriorityWorkload,
    mean_response_times,
)

NP = Discipline.NON_PREEMPTIVE

# (θ, error) on the paper's curve (Sec. 5.1): interpolated between 0, 10 %, 20 % and 40 %.
ERRORS = [
    (0.0, 0.0),
    (0.05, 0.0425),
    (0.1, 0.085),
    (0.15, 0.1175),
    (0.3, 0.235),
    (0.4, 0.32),
    (0.41, math.inf),
    (1.0, math.inf),
]


@pytest.mark.parametrize(("theta", "error"), ERRORS)
def test_paper_curve_error(theta: float, error: float) -> None:
    assert PAPER_ACCURACY_CURVE.error_at(theta) == pytest.approx(error)


# (error bound, largest drop ratio within it)
BOUNDS = [(0.0, 0.0), (0.085, 0.1), (0.15, 0.2), (0.30, 0.2 + 0.2 * 0.15 / 0.17), (0.5, 0.4)]


@pytest.mark.parametrize(("bound", "theta"), BOUNDS)
def test_paper_curve_inverse(bound: float, theta: float) -> None:
    assert PAPER_ACCURACY_CURVE.max_drop_ratio(bound) == pytest.approx(theta)


def test_curve_with_an_error_at_zero_drop() -> None:
    curve = AccuracyCurve((0.0, 0.5), (0.02, 0.2))
    assert curve.max_drop_ratio(0.11) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no drop ratio"):
        curve.max_drop_ratio(0.01)


@pytest.mark.parametrize(
    ("ratios", "errors", "message"),
    [
        ((), (), "at least one"),
        ((0.1, 0.2), (0.1,), "one error per drop ratio"),
        ((0.2, 0.1), (0.1, 0.2), "strictly increasing"),
        ((0.1, 0.2), (0.2, 0.1), "must not decrease"),
        ((0.1, 1.2), (0.1, 0.2), "between 0 and 1"),
        ((0.1,), (-0.1,), "non-negative"),
    ],
)
def test_bad_curves_are_refused(ratios, errors, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AccuracyCurve(ratios, errors)


@given(bound=st.floats(0.0, 0.5))
def test_inverse_is_consistent(bound: float) -> None:
    theta = PAPER_ACCURACY_CURVE.max_drop_ratio(bound)
    assert PAPER_ACCURACY_CURVE.error_at(theta) <= bound + 1e-12
    if theta < 0.4:
        assert PAPER_ACCURACY_CURVE.error_at(min(0.4, theta + 1e-6)) > bound


@pytest.mark.parametrize(
    ("step", "upper", "grid"),
    [(0.1, 0.4, (0.0, 0.1, 0.2, 0.3, 0.4)), (0.25, 1.0, (0.0, 0.25, 0.5, 0.75, 1.0))],
)
def test_drop_ratio_grid(step: float, upper: float, grid: tuple[float, ...]) -> None:
    assert drop_ratio_grid(step, upper) == grid


# ---- the search: two classes in the paper's reference setup shape (Sec. 5.2.1) ----


def uniform(high: int) -> np.ndarray:
    return np.full(high, 1.0 / high)


JOBS = {
    0: TaskLevelJob(20, uniform(60), uniform(4), 1 / 8, 1 / 6, 1 / 3, 1 / 4),  # low: larger
    1: TaskLevelJob(20, uniform(25), uniform(2), 1 / 8, 1 / 6, 1 / 3, 1 / 4),  # high
}


def job_time(priority: int, theta: float) -> PhaseType:
    return task_level_model(JOBS[priority], theta)


def classes(low_bound: float, high_bound: float, rates=(0.018, 0.002), weights=(1.0, 1.0)):
    grid = drop_ratio_grid(0.05, 0.4)
    return [
        SearchClass(rates[0], weights[0], PAPER_ACCURACY_CURVE, low_bound, grid),
        SearchClass(rates[1], weights[1], PAPER_ACCURACY_CURVE, high_bound, grid),
    ]


def predicted(thetas: tuple[float, ...], rates=(0.018, 0.002)) -> np.ndarray:
    stats = np.array([moments(job_time(k, t), 2) for k, t in enumerate(thetas)])
    load = PriorityWorkload(np.array(rates), stats[:, 0], stats[:, 1])
    return mean_response_times(load, NP)


def test_search_respects_the_bounds_and_beats_every_feasible_alternative() -> None:
    result = search_drop_ratios(classes(low_bound=0.15, high_bound=0.0), job_time, NP)
    assert result.drop_ratios[1] == 0.0  # the high class tolerates no error
    assert result.drop_ratios[0] <= 0.2  # 15 % error allows at most 20 % dropped
    assert result.errors[0] <= 0.15
    assert result.response_times == pytest.approx(predicted(result.drop_ratios).tolist())
    # Dropping at the bound is better than not dropping at all, for both classes.
    undropped = predicted((0.0, 0.0))
    assert np.all(np.array(result.response_times) < undropped)
    for theta in drop_ratio_grid(0.05, 0.2):
        assert result.objective <= float(np.mean(predicted((theta, 0.0)))) + 1e-9
    assert result.combinations == 5  # θ_low ∈ {0, .05, .1, .15, .2}; θ_high = 0


def test_ties_go_to_the_least_accuracy_loss() -> None:
    # A job with one map task keeps it whatever θ < 1: dropping only costs accuracy.
    single = TaskLevelJob(4, np.array([1.0]), np.array([1.0]), 1.0, 1.0, 1.0, 1.0)
    result = search_drop_ratios(
        [SearchClass(0.1, 1.0, PAPER_ACCURACY_CURVE, 0.32, drop_ratio_grid(0.1, 0.4))],
        lambda _k, theta: task_level_model(single, theta),
        NP,
    )
    assert result.drop_ratios == (0.0,)
    assert result.errors == (0.0,)


def test_fixed_ratios_give_the_prediction() -> None:
    fixed = [
        SearchClass(0.018, 1.0, PAPER_ACCURACY_CURVE, 1.0, (0.2,)),
        SearchClass(0.002, 1.0, PAPER_ACCURACY_CURVE, 1.0, (0.0,)),
    ]
    result = search_drop_ratios(fixed, job_time, NP)
    assert result.drop_ratios == (0.2, 0.0)
    assert result.response_times == pytest.approx(predicted((0.2, 0.0)).tolist())
    assert result.mean_job_times[0] == pytest.approx(moments(job_time(0, 0.2), 1)[0])


def test_weights_shift_the_choice() -> None:
    # Only the low class counts: it drops as much as its bound allows (the ceiling may tie).
    result = search_drop_ratios(classes(0.32, 0.32, weights=(1.0, 0.0)), job_time, NP)
    assert result.drop_ratios[0] == pytest.approx(0.4)


def test_unstable_load_has_an_infinite_objective() -> None:
    heavy = [
        SearchClass(1.0, 1.0, PAPER_ACCURACY_CURVE, 0.0, (0.0,)),
    ]
    result = search_drop_ratios(heavy, lambda _k, _t: erlang_with_mean(2.0, 2), NP)
    assert result.objective == math.inf
    assert result.response_times == (math.inf,)


def test_infeasible_and_oversized_searches_are_refused() -> None:
    strict = [SearchClass(0.1, 1.0, AccuracyCurve((0.0, 0.5), (0.05, 0.2)), 0.01, (0.0, 0.1))]
    with pytest.raises(ValueError, match="priority 0: no candidate"):
        search_drop_ratios(strict, job_time, NP)
    with pytest.raises(ValueError, match="exceed the limit"):
        search_drop_ratios(classes(0.4, 0.4), job_time, NP, max_combinations=10)
    with pytest.raises(ValueError, match="at least one priority class"):
        search_drop_ratios([], job_time, NP)


@pytest.mark.parametrize(
    "arguments",
    [
        {"arrival_rate": -1.0},
        {"weight": math.nan},
        {"max_error": -0.1},
        {"candidates": ()},
        {"candidates": (1.5,)},
    ],
)
def test_bad_search_classes_are_refused(arguments) -> None:
    base = {
        "arrival_rate": 0.1,
        "weight": 1.0,
        "accuracy": PAPER_ACCURACY_CURVE,
        "max_error": 0.1,
        "candidates": (0.0,),
    }
    with pytest.raises(ValueError):
        SearchClass(**{**base, **arguments})
