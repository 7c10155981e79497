"""Task dropping: how many tasks of a stage a priority-k job keeps, and which ones.

DiAS (Sec. 3.1, 3.3) deflates a priority-k job by the drop ratio ``0 ≤ θ_k ≤ 1``: each stage of
``n`` tasks (Spark partitions) runs only ``⌈n(1 − θ_k)⌉`` of them, chosen at random before the
stage starts. Sluice never lets a stage keep fewer than one task, so ``θ_k = 1`` still yields a
(maximally approximate) result instead of an empty stage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]

# n(1 − θ) is computed in floating point: 10 · (1 − 0.3) is 7.000000000000001, whose ceiling
# would keep a task the user meant to drop. Rounding to this many decimals first removes that.
_DECIMALS = 9


def check_drop_ratio(theta: float) -> float:
    """Return ``theta`` if it is a finite number in [0, 1]; otherwise raise ``ValueError``."""
    if not (isinstance(theta, int | float) and math.isfinite(theta) and 0.0 <= theta <= 1.0):
        raise ValueError(f"drop ratio must be between 0 and 1, got {theta!r}")
    return float(theta)


def kept_tasks(n: int, theta: float) -> int:
    """Tasks kept in a stage of ``n ≥ 1`` tasks: ``max(1, ⌈n(1 − θ)⌉)`` (Sec. 3.3)."""
    if n < 1:
        raise ValueError(f"a stage has at least one task, got {n}")
    check_drop_ratio(theta)
    return max(1, math.ceil(round(n * (1.0 - theta), _DECIMALS)))


def kept_tasks_array(n: IntArray, theta: float) -> IntArray:
    """Vectorised :func:`kept_tasks` over an array of stage sizes (all ≥ 1)."""
    sizes = np.asarray(n, dtype=np.int64)
    if np.any(sizes < 1):
        raise ValueError("every stage has at least one task")
    check_drop_ratio(theta)
    kept = np.ceil(np.round(sizes * (1.0 - theta), _DECIMALS)).astype(np.int64)
    return np.maximum(kept, 1)


def kept_per_stage(stage_sizes: Sequence[int], theta: float) -> tuple[int, ...]:
    """Tasks kept in each stage of a job deflated by ``θ`` (the ratio applies to every stage)."""
    return tuple(kept_tasks(n, theta) for n in stage_sizes)


def drop_ratio_for(priority: int, drop_ratios: Sequence[float]) -> float:
    """The drop ratio ``θ_k`` of priority ``k`` (index into ``drop_ratios``; higher is higher)."""
    if not 0 <= priority < len(drop_ratios):
        raise ValueError(f"priority {priority} is outside 0..{len(drop_ratios) - 1}")
    return check_drop_ratio(drop_ratios[priority])


def choose_kept_partitions(n: int, theta: float, rng: np.random.Generator) -> IntArray:
    """Indices (sorted) of the partitions a stage of ``n`` tasks computes after dropping.

    The kept set is a uniform random subset of size :func:`kept_tasks` — Sec. 3.1 drops tasks at
    random, which keeps the sample unbiased for the approximate result.
    """
    keep = kept_tasks(n, theta)
    chosen = rng.choice(n, size=keep, replace=False)
    return np.sort(chosen).astype(np.int64)


def dropped_tasks(phase_sizes: Sequence[int], theta: float) -> int:
    """Tasks left out when droppable phases of these sizes run at drop ratio ``θ``."""
    return sum(n - kept_tasks(n, theta) for n in phase_sizes)


def effective_drop_ratio(phase_sizes: Sequence[int], theta: float) -> float:
    """The share of the droppable phases' tasks actually left out: at most ``θ`` (the ceiling
    keeps a task more, and never fewer than one); 0 without droppable tasks.  The accuracy
    curve is read here, not at ``θ``, so a small phase is not said to lose more than it does."""
    total = sum(phase_sizes)
    return dropped_tasks(phase_sizes, theta) / total if total else 0.0
