"""Mean response time per priority class of an M/G/1 queue with priority classes.

DiAS (Sec. 4) views the engine as a single server: a job seizes the whole cluster and the
buffers serve priority classes FCFS within a class. The paper analyses this queue with Horváth's
MMAP[K]/PH[K]/1 method; Sluice needs the means only, so it uses the classical closed forms for
Poisson arrivals, which need just the first two moments of each class's job time:

* non-preemptive priority — Cobham's formula:
  ``T_k = E[S_k] + W_0 / ((1 − σ_{>k})(1 − σ_{≥k}))`` with ``W_0 = Σ_j λ_j E[S_j²] / 2``;
* preemptive-resume priority:
  ``T_k = E[S_k] / (1 − σ_{>k}) + R_k / ((1 − σ_{>k})(1 − σ_{≥k}))``,
  ``R_k = Σ_{j≥k} λ_j E[S_j²] / 2``;

where ``σ_{≥k}`` is the load ``Σ λ_j E[S_j]`` of classes with priority at least ``k``. Class
index ``k`` follows the paper: a higher ``k`` is a higher priority.

A class whose ``σ_{≥k} ≥ 1`` is unstable and gets ``inf``. Under non-preemptive scheduling the
stable classes still see the residual service of the saturated class; it is served at its
throughput ``(1 − σ_{>k}) / E[S_k]`` rather than its arrival rate, and classes below it not at
all, which is what ``W_0`` uses.

DiAS's own preemptive baseline kills and restarts evicted jobs (preemptive-repeat); its means are
at least those of preemptive-resume, which is therefore an optimistic bound for that baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


class Discipline(Enum):
    """How the server treats a higher-priority arrival while a lower-priority job runs."""

    NON_PREEMPTIVE = "non_preemptive"
    PREEMPTIVE_RESUME = "preemptive_resume"


@dataclass(frozen=True, eq=False)
class PriorityWorkload:
    """Per-class Poisson arrival rates and the first two moments of the job time.

    Index ``k`` is the priority (higher is more important). Contract: equal lengths ≥ 1, rates
    ≥ 0, means > 0 and second moments ≥ mean² (any real distribution satisfies it).
    """

    arrival_rates: FloatArray
    mean_service: FloatArray
    second_moment_service: FloatArray

    def __post_init__(self) -> None:
        arrays = [
            np.array(values, dtype=np.float64)
            for values in (self.arrival_rates, self.mean_service, self.second_moment_service)
        ]
        rates, means, second = arrays
        if rates.ndim != 1 or rates.shape[0] == 0:
            raise ValueError("there must be at least one priority class")
        if means.shape != rates.shape or second.shape != rates.shape:
            raise ValueError("arrival rates and service moments need one entry per class")
        if not all(np.all(np.isfinite(array)) for array in arrays):
            raise ValueError("arrival rates and service moments must be finite")
        if np.any(rates < 0):
            raise ValueError("arrival rates must be non-negative")
        if np.any(means <= 0):
            raise ValueError("mean service times must be positive")
        if np.any(second < means**2 * (1 - 1e-9)):
            raise ValueError("second moments must be at least the squared means")
        for name, array in zip(
            ("arrival_rates", "mean_service", "second_moment_service"), arrays, strict=True
        ):
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def loads(self) -> FloatArray:
        """Per-class utilisation ``ρ_k = λ_k E[S_k]``."""
        return np.asarray(self.arrival_rates * self.mean_service, dtype=np.float64)


def mean_response_times(workload: PriorityWorkload, discipline: Discipline) -> FloatArray:
    """Mean response time (queueing plus service) per class; ``inf`` for unstable classes."""
    return batch_mean_response_times(
        workload.arrival_rates, workload.mean_service, workload.second_moment_service, discipline
    )


def non_preemptive_response_times(workload: PriorityWorkload) -> FloatArray:
    """Cobham's formula for the non-preemptive M/G/1 priority queue (see module docstring)."""
    return mean_response_times(workload, Discipline.NON_PREEMPTIVE)


def preemptive_resume_response_times(workload: PriorityWorkload) -> FloatArray:
    """The preemptive-resume M/G/1 priority queue means (see module docstring)."""
    return mean_response_times(workload, Discipline.PREEMPTIVE_RESUME)


def batch_mean_response_times(
    arrival_rates: FloatArray,
    mean_service: FloatArray,
    second_moment_service: FloatArray,
    discipline: Discipline,
) -> FloatArray:
    """:func:`mean_response_times` for many workloads at once, classes along the last axis.

    The arrays broadcast against each other; inputs are trusted (validate them with
    :class:`PriorityWorkload` first). Used by the drop-ratio search to score a whole grid.
    """
    rates, means, second = np.broadcast_arrays(
        np.asarray(arrival_rates, dtype=np.float64),
        np.asarray(mean_service, dtype=np.float64),
        np.asarray(second_moment_service, dtype=np.float64),
    )
    loads = rates * means
    at_or_above = _suffix_sums(loads)
    above = at_or_above - loads
    if discipline is Discipline.NON_PREEMPTIVE:
        # Only the classes actually served contribute residual work; see the module docstring.
        throughputs = np.minimum(rates, np.clip(1.0 - above, 0.0, None) / means)
        residual = np.sum(throughputs * second, axis=-1, keepdims=True) / 2.0
        waiting_numerator = np.broadcast_to(residual, loads.shape)
        service_part = means
    else:
        waiting_numerator = _suffix_sums(rates * second) / 2.0
        with np.errstate(divide="ignore"):
            service_part = means / (1.0 - above)
    stable = at_or_above < 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        response = service_part + waiting_numerator / ((1.0 - above) * (1.0 - at_or_above))
    return np.asarray(np.where(stable, response, math.inf), dtype=np.float64)


def _suffix_sums(values: FloatArray) -> FloatArray:
    # Entry k sums classes k..K-1 along the last axis: priority k and every higher priority.
    return np.asarray(np.flip(np.cumsum(np.flip(values, -1), axis=-1), -1), dtype=np.float64)
