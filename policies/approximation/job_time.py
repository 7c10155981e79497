"""The job processing time of a (possibly deflated) MapReduce job as a PH distribution.

Two bottom-up models from DiAS (Birke et al., Middleware 2019, Sec. 4):

* :func:`task_level_model` — Sec. 4.1, Eq. (1): setup ``O``, the map stage ``M_t`` with ``t`` map
  tasks left running ``min(t, C)`` at a time with exponential task times, shuffle ``S``, and the
  reduce stage ``R_u`` likewise. ``N̄_m + N̄_r + 2`` phases.
* :func:`wave_level_model` — Sec. 4.2: the map and reduce stages run in waves of ``C`` tasks
  (``w̄ = ⌈t̄/C⌉``) and each wave's time is itself a PH, so task times need not be exponential.

The number of map tasks ``t`` is random with pmf ``p_m`` (``pmf[t-1] = p_m(t)``); after dropping
a job runs ``t̄ = ⌈t(1 − θ_m)⌉`` of them (:mod:`dropping`, never fewer than one). Likewise for
reduce tasks with ``p_r`` and ``θ_r``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from policies.approximation.dropping import check_drop_ratio, kept_tasks_array
from policies.approximation.phase_type import PhaseType

FloatArray = NDArray[np.float64]

_PMF_TOLERANCE = 1e-9


def check_task_pmf(pmf: Sequence[float] | FloatArray) -> FloatArray:
    """Validate a task-count pmf (``pmf[t-1] = P(t tasks)``, non-negative, sums to 1)."""
    probabilities = np.asarray(pmf, dtype=np.float64)
    if probabilities.ndim != 1 or probabilities.shape[0] == 0:
        raise ValueError("a task-count pmf must be a non-empty vector")
    if not np.all(np.isfinite(probabilities)) or np.any(probabilities < 0):
        raise ValueError("a task-count pmf must be finite and non-negative")
    if abs(probabilities.sum() - 1.0) > _PMF_TOLERANCE:
        raise ValueError(f"a task-count pmf must sum to 1, got {probabilities.sum():.6g}")
    return probabilities


def kept_task_distribution(pmf: Sequence[float] | FloatArray, theta: float) -> FloatArray:
    """The pmf of ``t̄ = ⌈t(1 − θ)⌉`` (index ``t̄ − 1``), length ``N̄ = ⌈N(1 − θ)⌉``."""
    probabilities = check_task_pmf(pmf)
    kept = kept_tasks_array(np.arange(1, probabilities.shape[0] + 1), theta)
    return np.bincount(kept - 1, weights=probabilities, minlength=int(kept.max())).astype(
        np.float64
    )


def wave_probabilities(pmf: Sequence[float] | FloatArray, theta: float, slots: int) -> FloatArray:
    """``q(d)`` for ``d = 1..W`` (index ``d − 1``): the probability that a job needs ``d`` waves.

    Sec. 4.2: ``q(d) = Σ_{t̄=(d−1)C+1}^{dC} Σ_{t:⌈t(1−θ)⌉=t̄} p(t)``; ``W`` is the largest ``d``
    with ``q(d) > 0``.
    """
    _check_slots(slots)
    kept_pmf = kept_task_distribution(pmf, theta)
    waves = (np.arange(1, kept_pmf.shape[0] + 1) + slots - 1) // slots
    q = np.bincount(waves - 1, weights=kept_pmf).astype(np.float64)
    last = int(np.flatnonzero(q > 0).max()) + 1
    return q[:last]


def interpolated_setup_mean(theta: float, at_no_drop: float, at_max_drop: float) -> float:
    """Mean setup (overhead) time for drop ratio ``θ`` by linear interpolation (Sec. 4.3).

    DiAS profiles the overhead at ``θ = 0`` and at the largest ratio it uses, ``θ = 0.9``, and
    interpolates between them; beyond 0.9 the line is extended, floored at zero.
    """
    check_drop_ratio(theta)
    if at_no_drop < 0 or at_max_drop < 0:
        raise ValueError("setup times must be non-negative")
    return max(0.0, at_no_drop + (at_max_drop - at_no_drop) * theta / 0.9)


@dataclass(frozen=True, eq=False)
class TaskLevelJob:
    """The inputs of Eq. (1) for one priority class.

    ``slots`` is ``C``; the pmfs are ``p_m`` and ``p_r``; rates are per second: ``μ_o`` (setup),
    ``μ_m`` (one map task), ``μ_s`` (shuffle), ``μ_r`` (one reduce task).
    """

    slots: int
    map_tasks_pmf: FloatArray
    reduce_tasks_pmf: FloatArray
    setup_rate: float
    map_rate: float
    shuffle_rate: float
    reduce_rate: float

    def __post_init__(self) -> None:
        _check_slots(self.slots)
        object.__setattr__(self, "map_tasks_pmf", check_task_pmf(self.map_tasks_pmf))
        object.__setattr__(self, "reduce_tasks_pmf", check_task_pmf(self.reduce_tasks_pmf))
        for name in ("setup_rate", "map_rate", "shuffle_rate", "reduce_rate"):
            rate = getattr(self, name)
            if not (rate > 0 and math.isfinite(rate)):
                raise ValueError(f"{name} must be positive and finite, got {rate!r}")


def task_level_model(job: TaskLevelJob, map_drop: float, reduce_drop: float = 0.0) -> PhaseType:
    """The PH representation ``(φ, F)`` of Eq. (1) for drop ratios ``θ_m``, ``θ_r``.

    Phases, in order: ``O, M_{N̄_m}, …, M_1, S, R_{N̄_r}, …, R_1``; ``φ = [1 0]``. From ``O`` the
    job enters ``M_t̄`` at rate ``μ_o p̄_m(t̄)``; ``M_t → M_{t−1}`` at ``min(t, C) μ_m`` (``M_0`` is
    ``S``); ``S`` enters ``R_ū`` at ``μ_s p̄_r(ū)``; ``R_u → R_{u−1}`` at ``min(u, C) μ_r`` and
    ``R_0`` is completion (absorption).
    """
    kept_map = kept_task_distribution(job.map_tasks_pmf, map_drop)
    kept_reduce = kept_task_distribution(job.reduce_tasks_pmf, reduce_drop)
    map_count, reduce_count = kept_map.shape[0], kept_reduce.shape[0]
    size = map_count + reduce_count + 2
    shuffle = 1 + map_count
    generator = np.zeros((size, size))

    def map_phase(tasks_left: int) -> int:
        return int(1 + map_count - tasks_left)

    def reduce_phase(tasks_left: int) -> int:
        return int(shuffle + 1 + reduce_count - tasks_left)

    for tasks, probability in enumerate(kept_map, start=1):
        generator[0, map_phase(tasks)] += job.setup_rate * probability
    for tasks in range(1, map_count + 1):
        following = map_phase(tasks - 1) if tasks > 1 else shuffle
        generator[map_phase(tasks), following] = min(tasks, job.slots) * job.map_rate
    for tasks, probability in enumerate(kept_reduce, start=1):
        generator[shuffle, reduce_phase(tasks)] += job.shuffle_rate * probability
    for tasks in range(2, reduce_count + 1):
        generator[reduce_phase(tasks), reduce_phase(tasks - 1)] = (
            min(tasks, job.slots) * job.reduce_rate
        )

    exit_rates = np.zeros(size)
    exit_rates[reduce_phase(1)] = job.reduce_rate
    np.fill_diagonal(generator, -(generator.sum(axis=1) + exit_rates))
    alpha = np.zeros(size)
    alpha[0] = 1.0
    return PhaseType(alpha, generator)


@dataclass(frozen=True, eq=False)
class WaveLevelJob:
    """The inputs of the wave-level model (Sec. 4.2) for one priority class.

    ``setup`` and ``shuffle`` are the PH stage times ``(α_o, A_o)`` and ``(α_s, A_s)``.
    ``map_waves[i]`` is the PH of wave block ``m(i+1)``; blocks past the end of the tuple reuse
    its last entry, so a single entry means every wave has the same distribution. Likewise
    ``reduce_waves``. Every stage PH must start with probability one (no atom at zero).
    """

    slots: int
    map_tasks_pmf: FloatArray
    reduce_tasks_pmf: FloatArray
    setup: PhaseType
    shuffle: PhaseType
    map_waves: tuple[PhaseType, ...]
    reduce_waves: tuple[PhaseType, ...]

    def __post_init__(self) -> None:
        _check_slots(self.slots)
        object.__setattr__(self, "map_tasks_pmf", check_task_pmf(self.map_tasks_pmf))
        object.__setattr__(self, "reduce_tasks_pmf", check_task_pmf(self.reduce_tasks_pmf))
        if not self.map_waves or not self.reduce_waves:
            raise ValueError("map_waves and reduce_waves need at least one wave distribution")
        for stage in (self.setup, self.shuffle, *self.map_waves, *self.reduce_waves):
            if abs(stage.alpha.sum() - 1.0) > _PMF_TOLERANCE:
                raise ValueError("stage distributions must start with probability one")


def wave_level_model(job: WaveLevelJob, map_drop: float, reduce_drop: float = 0.0) -> PhaseType:
    """The PH representation ``(α, A)`` of the wave-level job time (Sec. 4.2).

    Blocks, in order: ``o, m(1), …, m(W_m), s, r(1), …, r(W_r)``. As in the paper's matrix, a job
    that needs ``d`` map waves leaves setup into block ``m(W_m − d + 1)`` (with probability
    ``q_m(d)``) and runs the last ``d`` blocks, so ``m(W_m)`` is every job's final map wave; the
    reduce stage is entered the same way from shuffle. ``α = [α_o 0]``.
    """
    q_map = wave_probabilities(job.map_tasks_pmf, map_drop, job.slots)
    q_reduce = wave_probabilities(job.reduce_tasks_pmf, reduce_drop, job.slots)
    map_blocks = _wave_blocks(job.map_waves, q_map.shape[0])
    reduce_blocks = _wave_blocks(job.reduce_waves, q_reduce.shape[0])
    blocks = [job.setup, *map_blocks, job.shuffle, *reduce_blocks]
    offsets = np.concatenate(([0], np.cumsum([block.order for block in blocks])))
    generator = scipy.linalg.block_diag(*[block.A for block in blocks])

    def link(source: int, target: int, probability: float) -> None:
        rows = slice(offsets[source], offsets[source + 1])
        columns = slice(offsets[target], offsets[target + 1])
        generator[rows, columns] += probability * np.outer(
            blocks[source].exit_rates, blocks[target].alpha
        )

    setup, first_map = 0, 1
    shuffle = first_map + len(map_blocks)
    first_reduce = shuffle + 1
    for waves, probability in enumerate(q_map, start=1):
        link(setup, shuffle - waves, probability)
    for block in range(first_map, shuffle):
        link(block, block + 1, 1.0)
    for waves, probability in enumerate(q_reduce, start=1):
        link(shuffle, len(blocks) - waves, probability)
    for block in range(first_reduce, len(blocks) - 1):
        link(block, block + 1, 1.0)

    alpha = np.zeros(int(offsets[-1]))
    alpha[: job.setup.order] = job.setup.alpha
    return PhaseType(alpha, generator)


def _wave_blocks(waves: Sequence[PhaseType], count: int) -> list[PhaseType]:
    return [waves[min(index, len(waves) - 1)] for index in range(count)]


def _check_slots(slots: int) -> None:
    if not (isinstance(slots, int) and slots >= 1):
        raise ValueError(f"slots must be a positive integer, got {slots!r}")
