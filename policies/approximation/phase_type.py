"""Phase-type (PH) distributions: the representation (α, A), its moments and its algebra.

DiAS (Birke et al., Middleware 2019, Sec. 4) models a job's processing time as the time to
absorption of a continuous-time Markov chain with transient generator ``A`` started from the
initial distribution ``α`` (Latouche and Ramaswami, 1999). PH distributions are closed under
sums and mixtures, which is what the task- and wave-level job models in :mod:`job_time` use.

Every function here is pure; a :class:`PhaseType` is immutable (its arrays are read-only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

_TOLERANCE = 1e-9


@dataclass(frozen=True, eq=False)
class PhaseType:
    """A PH representation (α, A) with ``v`` transient phases.

    Contract: ``alpha`` has shape ``(v,)``, entries ≥ 0 and sum ≤ 1 (any deficit is an atom at
    zero); ``A`` has shape ``(v, v)``, a negative diagonal, non-negative off-diagonal entries and
    row sums ≤ 0 (the deficit is the exit rate vector ``a = −A·1``). ``A`` must be non-singular,
    i.e. absorption is certain. Violations raise ``ValueError``.
    """

    alpha: FloatArray
    A: FloatArray

    def __post_init__(self) -> None:
        alpha = np.array(self.alpha, dtype=np.float64)
        generator = np.array(self.A, dtype=np.float64)
        _check_representation(alpha, generator)
        alpha.setflags(write=False)
        generator.setflags(write=False)
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "A", generator)

    @property
    def order(self) -> int:
        """Number of transient phases ``v``."""
        return int(self.alpha.shape[0])

    @property
    def exit_rates(self) -> FloatArray:
        """The exit rate vector ``a = −A·1`` (rates into absorption from each phase)."""
        return np.asarray(-self.A.sum(axis=1), dtype=np.float64)


def _check_representation(alpha: FloatArray, generator: FloatArray) -> None:
    if alpha.ndim != 1 or alpha.shape[0] == 0:
        raise ValueError("alpha must be a non-empty vector")
    size = alpha.shape[0]
    if generator.shape != (size, size):
        raise ValueError(f"A must have shape ({size}, {size}), got {generator.shape}")
    if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(generator))):
        raise ValueError("alpha and A must be finite")
    if np.any(alpha < -_TOLERANCE) or alpha.sum() > 1 + _TOLERANCE:
        raise ValueError("alpha must be non-negative and sum to at most 1")
    off_diagonal = generator - np.diag(np.diag(generator))
    if np.any(off_diagonal < -_TOLERANCE):
        raise ValueError("A must have non-negative off-diagonal entries")
    if np.any(np.diag(generator) >= 0):
        raise ValueError("A must have a negative diagonal")
    if np.any(generator.sum(axis=1) > _TOLERANCE * np.abs(np.diag(generator))):
        raise ValueError("A must have row sums at most 0")


def moments(ph: PhaseType, count: int) -> FloatArray:
    """The first ``count`` raw moments: ``E[X^i] = i! · α (−A)^{−i} 1`` for ``i = 1..count``."""
    if count < 1:
        raise ValueError("count must be at least 1")
    solve = _left_solver(ph.A)
    result = np.empty(count, dtype=np.float64)
    row = ph.alpha
    for i in range(1, count + 1):
        row = solve(row)
        result[i - 1] = math.factorial(i) * row.sum()
    return result


def mean(ph: PhaseType) -> float:
    """``E[X] = α (−A)^{−1} 1``: the expected time spent in each phase, summed."""
    return float(moments(ph, 1)[0])


def _left_solver(generator: FloatArray) -> Callable[[FloatArray], FloatArray]:
    """``row ↦ row · (−A)^{−1}``, solving ``(−A)ᵀ x = row`` rather than inverting.

    The job-time models only ever move forward through their phases, so their generators are
    upper triangular; a triangular solve is O(v²) instead of O(v³), which keeps models with
    thousands of phases cheap enough to search over.
    """
    negative = -generator
    if not np.any(np.tril(negative, -1)):
        return lambda row: np.asarray(
            scipy.linalg.solve_triangular(negative, row, trans="T", lower=False),
            dtype=np.float64,
        )
    factors = scipy.linalg.lu_factor(negative)
    return lambda row: np.asarray(scipy.linalg.lu_solve(factors, row, trans=1), dtype=np.float64)


def exponential(rate: float) -> PhaseType:
    """The exponential distribution with the given rate (> 0), a one-phase PH."""
    return erlang(1, rate)


def erlang(phases: int, rate: float) -> PhaseType:
    """Erlang(``phases``, ``rate``): ``phases`` exponential stages in series, mean phases/rate."""
    if phases < 1:
        raise ValueError("phases must be at least 1")
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError("rate must be positive and finite")
    generator = -rate * np.eye(phases) + rate * np.eye(phases, k=1)
    alpha = np.zeros(phases)
    alpha[0] = 1.0
    return PhaseType(alpha, generator)


def erlang_with_mean(mean_time: float, phases: int = 1) -> PhaseType:
    """Erlang with ``phases`` stages and the given mean (> 0); squared CV is ``1/phases``."""
    if not (mean_time > 0 and math.isfinite(mean_time)):
        raise ValueError("mean must be positive and finite")
    return erlang(phases, phases / mean_time)


def scaled(ph: PhaseType, speedup: float) -> PhaseType:
    """The distribution of ``X / speedup``: every rate multiplied by ``speedup`` (> 0).

    DiAS (Sec. 4) captures sprinting as an effective, faster service rate; this is that change.
    """
    if not (speedup > 0 and math.isfinite(speedup)):
        raise ValueError("speedup must be positive and finite")
    return PhaseType(ph.alpha, ph.A * speedup)


def series(stages: Sequence[PhaseType]) -> PhaseType:
    """The sum of independent PH variables, in order (Latouche and Ramaswami, 1999).

    Block-upper-bidiagonal generator: on leaving stage ``i`` the chain enters stage ``i+1``
    with its initial vector; a stage's atom at zero is skipped through to the next stage.
    """
    if not stages:
        raise ValueError("series needs at least one stage")
    sizes = [stage.order for stage in stages]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    total = int(offsets[-1])
    generator = np.zeros((total, total))
    alpha = np.zeros(total)
    # entry[i] is the initial vector over all phases of stages i..n-1, honouring zero atoms.
    entry = np.zeros(total)
    for index in range(len(stages) - 1, -1, -1):
        stage = stages[index]
        start, stop = offsets[index], offsets[index + 1]
        following = entry.copy()
        entry = np.zeros(total)
        entry[start:stop] = stage.alpha
        entry += (1.0 - stage.alpha.sum()) * following
        generator[start:stop, start:stop] = stage.A
        generator[start:stop, :] += np.outer(stage.exit_rates, following)
    alpha[:] = entry
    return PhaseType(alpha, generator)


def mixture(weights: Sequence[float], components: Sequence[PhaseType]) -> PhaseType:
    """With probability ``weights[i]`` draw from ``components[i]`` (weights ≥ 0, sum ≤ 1)."""
    if len(weights) != len(components) or not components:
        raise ValueError("mixture needs one weight per component and at least one component")
    probabilities = np.asarray(weights, dtype=np.float64)
    alpha = np.concatenate([p * c.alpha for p, c in zip(probabilities, components, strict=True)])
    generator = scipy.linalg.block_diag(*[c.A for c in components])
    return PhaseType(alpha, generator)


def sample(ph: PhaseType, rng: np.random.Generator, size: int) -> FloatArray:
    """Draw ``size`` variates by simulating the underlying Markov chain (for checks and replay)."""
    exit_rates = ph.exit_rates
    total_rates = -np.diag(ph.A)
    # Jump matrix over phases plus absorption (last column).
    jumps = np.zeros((ph.order, ph.order + 1))
    jumps[:, : ph.order] = ph.A / total_rates[:, None]
    np.fill_diagonal(jumps[:, : ph.order], 0.0)
    jumps[:, ph.order] = exit_rates / total_rates
    cumulative = np.cumsum(jumps, axis=1)
    cumulative[:, -1] = 1.0
    start = np.append(ph.alpha, max(0.0, 1.0 - ph.alpha.sum()))
    start_cumulative = np.cumsum(start)
    start_cumulative[-1] = 1.0

    phase = np.searchsorted(start_cumulative, rng.random(size), side="right")
    times = np.zeros(size)
    alive = phase < ph.order
    while np.any(alive):
        current = phase[alive]
        times[alive] += rng.exponential(1.0 / total_rates[current])
        draws = np.asarray(rng.random(current.shape[0]), dtype=np.float64)
        # Row-wise searchsorted: the next state is the number of cumulative bounds ≤ the draw.
        phase[alive] = np.sum(cumulative[current] <= draws[:, None], axis=1)
        alive = phase < ph.order
    return times
