"""Eq. 1-4 of Sec. IV-B, the deadline formula and the Pareto fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.reservation.deadline import (
    deadline_for_isolation,
    deadline_from_history,
    fit_pareto,
    isolation_probability,
    pareto_cdf,
    utilization_bound,
    utilization_for_isolation,
)

# (t_min, alpha, deadline, tasks, P by Eq. 2, E[U] bound by Eq. 3), worked by hand
POINTS = [
    (1.0, 2.0, 2.0, 1, 0.75, 0.75),
    (1.0, 2.0, 2.0, 2, 0.5625, 0.75),
    (2.0, 1.5, 8.0, 3, 0.875**3, 0.5),
    (1.0, 3.0, 10.0, 20, 0.999**20, 0.1495),
    (5.0, 1.6, 5.0, 10, 0.0, 1.0),  # D = t_m: no isolation, no loss
]


@pytest.mark.parametrize("point", POINTS)
def test_eq2_eq3_eq4_and_inverse(point: tuple[float, float, float, int, float, float]) -> None:
    t_min, alpha, deadline, tasks, p, u = point
    assert isolation_probability(deadline, t_min, alpha, tasks) == pytest.approx(p, rel=1e-12)
    assert utilization_bound(deadline, t_min, alpha) == pytest.approx(u, rel=1e-12)
    assert utilization_for_isolation(p, alpha, tasks) == pytest.approx(u, rel=1e-9)
    assert deadline_for_isolation(p, t_min, alpha, tasks) == pytest.approx(deadline, rel=1e-9)


@pytest.mark.parametrize(
    ("duration", "expected"), [(0.5, 0.0), (1.0, 0.0), (2.0, 0.75), (4.0, 0.9375)]
)
def test_pareto_cdf(duration: float, expected: float) -> None:
    assert pareto_cdf(duration, 1.0, 2.0) == pytest.approx(expected)


def test_strict_isolation_needs_an_infinite_deadline_and_leaves_no_utilisation() -> None:
    assert deadline_for_isolation(1.0, 1.0, 1.6, 20) == math.inf
    assert utilization_for_isolation(1.0, 1.6, 20) == 0.0


def test_deadline_stays_finite_close_to_strict_isolation() -> None:
    # 1 - P**(1/N) would round to 0 here without expm1.
    deadline = deadline_for_isolation(1.0 - 1e-15, 1.0, 2.0, 10_000)
    assert math.isfinite(deadline)
    assert isolation_probability(deadline, 1.0, 2.0, 10_000) == pytest.approx(1.0 - 1e-15)


@given(
    alpha=st.floats(1.01, 10.0),
    tasks=st.integers(1, 500),
    p=st.floats(0.0, 0.99),
    step=st.floats(0.001, 0.5),
)
def test_eq4_decreasing_in_p_from_one_to_zero(
    alpha: float, tasks: int, p: float, step: float
) -> None:
    higher = min(p + step, 1.0)
    u_low = utilization_for_isolation(p, alpha, tasks)
    u_high = utilization_for_isolation(higher, alpha, tasks)
    assert 0.0 <= u_high <= 1.0
    assert u_high < u_low
    assert utilization_for_isolation(0.0, alpha, tasks) == pytest.approx(1.0)
    near_strict = utilization_for_isolation(1.0 - 1e-15, alpha, tasks)
    assert near_strict < utilization_for_isolation(1.0 - 1e-6, alpha, tasks)
    assert near_strict < 0.05


@given(
    alpha=st.floats(1.05, 6.0),
    tasks=st.integers(1, 300),
    p=st.floats(0.01, 0.99),
    t_min=st.floats(0.01, 100.0),
)
def test_eq4_is_eq3_at_the_eq2_deadline(alpha: float, tasks: int, p: float, t_min: float) -> None:
    deadline = deadline_for_isolation(p, t_min, alpha, tasks)
    assert isolation_probability(deadline, t_min, alpha, tasks) == pytest.approx(p, rel=1e-9)
    assert utilization_bound(deadline, t_min, alpha) == pytest.approx(
        utilization_for_isolation(p, alpha, tasks), rel=1e-9, abs=1e-12
    )


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: utilization_for_isolation(1.2, 2.0, 5), "isolation"),
        (lambda: utilization_for_isolation(0.5, 1.0, 5), "alpha"),
        (lambda: deadline_for_isolation(0.5, 0.0, 2.0, 5), "t_min"),
        (lambda: deadline_for_isolation(0.5, 1.0, 2.0, 0), "tasks"),
        (lambda: utilization_bound(0.5, 1.0, 2.0), "deadline"),
        (lambda: fit_pareto([3.0]), "durations"),
        (lambda: fit_pareto([3.0, 3.0, 3.0]), "durations"),
        (lambda: fit_pareto([3.0, -1.0]), "durations"),
    ],
)
def test_bad_arguments_name_the_field(call, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        call()


def test_fit_is_the_closed_form_mle() -> None:
    # ln(x/t_m) = 0, 1, 2 -> alpha = 3 / 3
    fit = fit_pareto([1.0, math.e, math.e**2])
    assert (fit.t_min, fit.samples) == (1.0, 3)
    assert fit.alpha == pytest.approx(1.0)


@pytest.mark.parametrize("alpha", [1.2, 1.6, 3.0])
def test_fit_recovers_the_parameters_of_a_large_sample(alpha: float) -> None:
    rng = np.random.default_rng(7)
    sample = 4.0 * (1.0 + rng.pareto(alpha, 20_000))
    fit = fit_pareto(sample.tolist())
    assert fit.alpha == pytest.approx(alpha, rel=0.03)
    assert fit.t_min == pytest.approx(4.0, rel=1e-3)


def test_deadline_from_history_uses_the_fit() -> None:
    history = [1.0, math.e, math.e**2]  # alpha = 1, t_m = 1
    assert deadline_from_history(history, 0.75, 1) == pytest.approx(4.0)
