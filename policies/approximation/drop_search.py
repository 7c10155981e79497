"""Choosing the drop ratios θ_k: minimum weighted mean response time under accuracy bounds.

DiAS (Sec. 5.1-5.2, and the closing procedure of Sec. 5.3) profiles the relative error of a
job's result as a function of the drop ratio offline (Fig. 6: 10 % dropped → 8.5 % error,
20 % → 15 %, 40 % → 32 %), bounds the error each priority tolerates, and searches the feasible
drop ratios exhaustively with the job-time and queueing models of Sec. 4. This module is that
search: every combination of candidate ratios is scored at once with the closed-form means of
:mod:`priority_queues`, so the models are evaluated once per class and ratio, not per combination.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from policies.approximation.accuracy import AccuracyCurve
from policies.approximation.dropping import check_drop_ratio
from policies.approximation.phase_type import PhaseType, moments
from policies.approximation.priority_queues import Discipline, batch_mean_response_times

FloatArray = NDArray[np.float64]

# Ratios whose error equals the bound up to rounding must count as feasible.
_ERROR_SLACK = 1e-12


@dataclass(frozen=True)
class SearchClass:
    """One priority class as the search sees it.

    ``candidates`` are the drop ratios to consider (give one value to fix θ_k); ``weight`` ≥ 0 is
    the class's weight in the objective ``Σ_k w_k T_k / Σ_k w_k``; ``max_error`` bounds
    ``accuracy.error_at(θ_k)``.
    """

    arrival_rate: float
    weight: float
    accuracy: AccuracyCurve
    max_error: float
    candidates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (math.isfinite(self.arrival_rate) and self.arrival_rate >= 0):
            raise ValueError("arrival_rate must be finite and non-negative")
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError("weight must be finite and non-negative")
        if not self.max_error >= 0:
            raise ValueError("max_error must be non-negative")
        if not self.candidates:
            raise ValueError("candidates must hold at least one drop ratio")
        for theta in self.candidates:
            check_drop_ratio(theta)


@dataclass(frozen=True)
class DropSearchResult:
    """The chosen ratios and their predictions, all indexed by priority ``k``.

    ``objective`` is the weighted mean response time (``inf`` if any class is unstable);
    ``combinations`` is how many feasible combinations were scored.
    """

    drop_ratios: tuple[float, ...]
    errors: tuple[float, ...]
    mean_job_times: tuple[float, ...]
    response_times: tuple[float, ...]
    objective: float
    combinations: int


JobTimeModel = Callable[[int, float], PhaseType]
"""Maps (priority k, drop ratio θ_k) to the job-time PH of that class, e.g. a closure over
:func:`policies.approximation.job_time.task_level_model`."""


def drop_ratio_grid(step: float, upper: float = 1.0) -> tuple[float, ...]:
    """Candidate ratios ``0, step, 2·step, …`` up to ``upper`` (both in (0, 1]), rounded."""
    if not (0 < step <= 1 and 0 < upper <= 1):
        raise ValueError("step and upper must be in (0, 1]")
    count = math.floor(round(upper / step, 9))
    return tuple(round(i * step, 9) for i in range(count + 1))


def search_drop_ratios(
    classes: Sequence[SearchClass],
    job_time: JobTimeModel,
    discipline: Discipline,
    max_combinations: int = 2_000_000,
) -> DropSearchResult:
    """Exhaustively pick one candidate per class minimising the weighted mean response time.

    Only ratios within each class's accuracy bound are considered. Ties (drop ratios often give
    the same task counts after the ceiling) go to the smallest total error, then the smallest
    total drop ratio, so no accuracy is given up for nothing. Raises ``ValueError`` if a class
    has no feasible candidate or the grid exceeds ``max_combinations``.
    """
    if not classes:
        raise ValueError("there must be at least one priority class")
    feasible = [_feasible_candidates(k, c) for k, c in enumerate(classes)]
    combinations = math.prod(len(f) for f in feasible)
    if combinations > max_combinations:
        raise ValueError(
            f"{combinations} drop-ratio combinations exceed the limit of {max_combinations}; "
            "use a coarser grid or fix some ratios"
        )
    class_moments = [
        np.array([moments(job_time(k, theta), 2) for theta in f]) for k, f in enumerate(feasible)
    ]
    # One row per combination, one column per class: index into that class's feasible list.
    grid = np.stack(
        np.meshgrid(*[np.arange(len(f)) for f in feasible], indexing="ij"), axis=-1
    ).reshape(-1, len(classes))
    columns = range(len(classes))
    means = np.stack([class_moments[k][grid[:, k], 0] for k in columns], axis=-1)
    second = np.stack([class_moments[k][grid[:, k], 1] for k in columns], axis=-1)
    rates = np.array([c.arrival_rate for c in classes])
    response = batch_mean_response_times(rates, means, second, discipline)
    objective = _weighted_objective(response, np.array([c.weight for c in classes]))

    ratios = np.stack([np.asarray(feasible[k])[grid[:, k]] for k in columns], axis=-1)
    class_errors = [
        np.array([classes[k].accuracy.error_at(t) for t in f]) for k, f in enumerate(feasible)
    ]
    errors = np.stack([class_errors[k][grid[:, k]] for k in columns], axis=-1)
    best = int(np.lexsort((ratios.sum(axis=1), errors.sum(axis=1), objective))[0])
    return DropSearchResult(
        drop_ratios=tuple(float(t) for t in ratios[best]),
        errors=tuple(float(e) for e in errors[best]),
        mean_job_times=tuple(float(m) for m in means[best]),
        response_times=tuple(float(r) for r in response[best]),
        objective=float(objective[best]),
        combinations=combinations,
    )


def _feasible_candidates(priority: int, search_class: SearchClass) -> list[float]:
    bound = search_class.max_error + _ERROR_SLACK
    feasible = sorted(
        {t for t in search_class.candidates if search_class.accuracy.error_at(t) <= bound}
    )
    if not feasible:
        raise ValueError(
            f"priority {priority}: no candidate drop ratio keeps the error within "
            f"{search_class.max_error:g}"
        )
    return feasible


def _weighted_objective(response: FloatArray, weights: FloatArray) -> FloatArray:
    # Every class must be stable, whatever its weight; a zero weight must not turn inf into nan.
    unstable = np.any(~np.isfinite(response), axis=-1)
    total = weights.sum()
    finite = np.where(np.isfinite(response), response, 0.0)
    score = finite @ weights / total if total > 0 else np.zeros(response.shape[0])
    return np.asarray(np.where(unstable, math.inf, score), dtype=np.float64)
