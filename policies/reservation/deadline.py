"""The reservation deadline and the isolation/utilisation trade-off (Sec. IV-B, Eq. 1-4).

Task durations of a phase are modelled as i.i.d. Pareto with shape ``alpha`` > 0 and scale
``t_min`` > 0 (Eq. 1). A phase of ``tasks`` = N tasks starts at time 0 and its slots are reserved
until the deadline D. Isolation P is the probability that all N tasks finish by D (Eq. 2); the
expected utilisation of the reserved slots is bounded below by Eq. 3, and Eq. 4 writes that bound
as a function of P alone. The inverse of Eq. 2 gives the deadline for a required isolation.

For a recurring job, :func:`fit_pareto` estimates ``alpha`` and ``t_min`` from the task durations
of earlier runs by maximum likelihood, and :func:`deadline_from_history` chains the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _check_positive(name: str, value: float) -> None:
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{name}: must be a positive finite number, got {value}")


def _check_shape(alpha: float) -> None:
    # Eq. 3-4 divide by alpha - 1: the Pareto mean is infinite for alpha <= 1 (Sec. IV-B).
    if not alpha > 1 or math.isinf(alpha):
        raise ValueError(f"alpha: must be a finite number > 1, got {alpha}")


def _check_tasks(tasks: int) -> None:
    if tasks < 1:
        raise ValueError(f"tasks: must be >= 1, got {tasks}")


def _check_isolation(isolation: float) -> None:
    if not 0.0 <= isolation <= 1.0:
        raise ValueError(f"isolation: must be in [0, 1], got {isolation}")


def pareto_cdf(duration: float, t_min: float, alpha: float) -> float:
    """F(t) of Eq. 1: the probability that a task finishes within ``duration``."""
    _check_positive("t_min", t_min)
    _check_positive("alpha", alpha)
    if duration < t_min:
        return 0.0
    return 1.0 - float((t_min / duration) ** alpha)


def isolation_probability(deadline: float, t_min: float, alpha: float, tasks: int) -> float:
    """P = F(D)^N = [1 - (t_m/D)^alpha]^N (Eq. 2): all N tasks finish before the deadline."""
    _check_tasks(tasks)
    return float(pareto_cdf(deadline, t_min, alpha) ** tasks)


def utilization_bound(deadline: float, t_min: float, alpha: float) -> float:
    """Lower bound on E[U] for slots reserved until ``deadline`` (Eq. 3).

    E[U] >= alpha/(alpha-1) (t_m/D) - 1/(alpha-1) (t_m/D)^alpha, for D >= t_m and alpha > 1.
    """
    _check_positive("t_min", t_min)
    _check_shape(alpha)
    if deadline < t_min:
        raise ValueError(f"deadline: must be >= t_min ({t_min}), got {deadline}")
    ratio = t_min / deadline
    return float((alpha * ratio - ratio**alpha) / (alpha - 1.0))


def _one_minus_root(isolation: float, tasks: int) -> float:
    # 1 - P^(1/N) computed as -expm1(ln P / N): the direct form cancels to 0 for P near 1 and
    # large N, which would turn a finite deadline into an infinite one.
    if isolation == 0.0:
        return 1.0
    return -math.expm1(math.log(isolation) / tasks)


def utilization_for_isolation(isolation: float, alpha: float, tasks: int) -> float:
    """Lower bound on E[U] at isolation P (Eq. 4).

    E[U] >= alpha/(alpha-1) (1 - P^(1/N))^(1/alpha) - 1/(alpha-1) (1 - P^(1/N)).
    Decreasing in P, with 1 at P = 0 (no isolation, no loss) and 0 at P = 1 (strict isolation).
    """
    _check_isolation(isolation)
    _check_shape(alpha)
    _check_tasks(tasks)
    if isolation == 1.0:
        return 0.0
    x = _one_minus_root(isolation, tasks)
    return float((alpha * x ** (1.0 / alpha) - x) / (alpha - 1.0))


def deadline_for_isolation(isolation: float, t_min: float, alpha: float, tasks: int) -> float:
    """D = t_m (1 - P^(1/N))^(-1/alpha), Eq. 2 solved for D; ``math.inf`` at P = 1."""
    _check_isolation(isolation)
    _check_positive("t_min", t_min)
    _check_positive("alpha", alpha)
    _check_tasks(tasks)
    if isolation == 1.0:
        return math.inf
    return float(t_min * _one_minus_root(isolation, tasks) ** (-1.0 / alpha))


@dataclass(frozen=True)
class ParetoFit:
    """Maximum-likelihood Pareto parameters of observed task durations."""

    alpha: float
    t_min: float
    samples: int


def fit_pareto(durations: Sequence[float]) -> ParetoFit:
    """Maximum-likelihood fit of Eq. 1 to observed task durations.

    t_m = min x_i (the paper: "approximated by the duration of the task that finishes first")
    and alpha = n / sum ln(x_i / t_m). Needs at least two positive durations, not all equal.
    """
    x = np.asarray(durations, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"durations: need at least 2 samples, got {x.size}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("durations: every duration must be a positive finite number")
    t_min = float(x.min())
    log_excess = float(np.log(x / t_min).sum())
    if log_excess <= 0.0:
        raise ValueError("durations: all equal, the Pareto shape is unbounded")
    return ParetoFit(alpha=x.size / log_excess, t_min=t_min, samples=int(x.size))


def deadline_from_history(durations: Sequence[float], isolation: float, tasks: int) -> float:
    """Reservation deadline for a recurring job: :func:`fit_pareto` then the inverse of Eq. 2."""
    fit = fit_pareto(durations)
    return deadline_for_isolation(isolation, fit.t_min, fit.alpha, tasks)
