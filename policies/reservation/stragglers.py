"""Straggler mitigation on reserved slots and its numerical study (Sec. IV-C).

Once the number of ongoing tasks of a phase is at most the number of its reserved, idle slots,
every ongoing task without a copy gets one on a reserved slot, and whichever of the original and
the copy finishes first wins (the other is killed). :func:`plan_copies` takes that decision;
:func:`first_finisher` names the winner.

The numerical study compares the phase time without copies, T = t_(N), with the phase time when
copies start after ceil(N/2) tasks have finished,
T' = t_(h) + max_{h < k <= N} min{t_(k) - t_(h), t'_(k)} with h = ceil(N/2),
where t_(k) is the k-th shortest task and t'_(k) the duration of its copy, all i.i.d. Pareto.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class PhaseSlots:
    """A phase's running tasks and its reserved slots that are idle right now.

    Attributes:
        ongoing_tasks: tasks of the phase still running (their original, a copy, or both).
        copied_tasks: those of ``ongoing_tasks`` that already have a copy running.
        idle_reserved_slots: slots reserved for the job and running nothing.
    """

    ongoing_tasks: tuple[str, ...]
    copied_tasks: frozenset[str]
    idle_reserved_slots: tuple[str, ...]


@dataclass(frozen=True)
class CopyLaunch:
    """Start a copy of ``task_id`` on the reserved slot ``slot_id``."""

    task_id: str
    slot_id: str


def plan_copies(phase: PhaseSlots) -> tuple[CopyLaunch, ...]:
    """Copies to launch now: none until ongoing <= idle reserved, then one per uncopied task.

    Tasks and slots are paired in the order given, so the caller controls placement (for example
    listing slots with the task's data first). A task is never copied twice.
    """
    if not phase.ongoing_tasks or len(phase.ongoing_tasks) > len(phase.idle_reserved_slots):
        return ()
    uncopied = [task for task in phase.ongoing_tasks if task not in phase.copied_tasks]
    slots = phase.idle_reserved_slots[: len(uncopied)]
    return tuple(CopyLaunch(task, slot) for task, slot in zip(uncopied, slots, strict=True))


class Finisher(enum.Enum):
    """Which run of a copied task finished first."""

    ORIGINAL = "original"
    COPY = "copy"


def first_finisher(original_finish: float, copy_finish: float) -> Finisher:
    """The winner of a copied task; a tie goes to the original, which has the task's state."""
    return Finisher.COPY if copy_finish < original_finish else Finisher.ORIGINAL


def sample_pareto(
    rng: np.random.Generator, alpha: float, t_min: float, shape: tuple[int, ...]
) -> NDArray[np.float64]:
    """I.i.d. Pareto(alpha, t_min) durations (Eq. 1); numpy's ``pareto`` is the Lomax shift."""
    return t_min * (1.0 + rng.pareto(alpha, size=shape))


def phase_times(
    durations: NDArray[np.float64], copy_durations: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """T and T' for each run (row) of task durations and their copies' durations.

    ``durations`` and ``copy_durations`` are arrays of shape (runs, N); the copy in column k
    belongs to the k-th shortest task, which is exchangeable with any column since copies are
    i.i.d.
    """
    if durations.ndim != 2 or durations.shape != copy_durations.shape:
        raise ValueError("durations: expected two arrays of the same shape (runs, tasks)")
    tasks = durations.shape[1]
    if tasks < 1:
        raise ValueError("durations: need at least one task per run")
    ordered = np.sort(durations, axis=1)
    slowest = ordered[:, -1]
    half = math.ceil(tasks / 2)
    start = ordered[:, half - 1]
    if half == tasks:
        return slowest, start.copy()
    # t_(h) + min{t_(k) - t_(h), t'_(k)} rewritten as min{t_(k), t_(h) + t'_(k)}: the same
    # value, but it cannot round above t_(k), so T' <= T holds exactly in floating point.
    finish = np.minimum(ordered[:, half:], start[:, None] + copy_durations[:, half:])
    return slowest, finish.max(axis=1)


@dataclass(frozen=True)
class StragglerStudy:
    """Result of the numerical study for one (alpha, N).

    Attributes:
        mean_phase_time: mean T over the runs.
        mean_phase_time_with_copies: mean T' over the runs.
        reduction: 1 - mean T' / mean T, the reduction of the mean phase time.
        mean_run_reduction: mean over runs of 1 - T'/T.
    """

    alpha: float
    tasks: int
    runs: int
    mean_phase_time: float
    mean_phase_time_with_copies: float
    reduction: float
    mean_run_reduction: float


def straggler_study(
    alpha: float, tasks: int, runs: int, rng: np.random.Generator, t_min: float = 1.0
) -> StragglerStudy:
    """Monte Carlo of T versus T' (Sec. IV-C, Fig. 10) with Pareto task and copy durations."""
    if not alpha > 0 or math.isinf(alpha):
        raise ValueError(f"alpha: must be a positive finite number, got {alpha}")
    if tasks < 1:
        raise ValueError(f"tasks: must be >= 1, got {tasks}")
    if runs < 1:
        raise ValueError(f"runs: must be >= 1, got {runs}")
    durations = sample_pareto(rng, alpha, t_min, (runs, tasks))
    copies = sample_pareto(rng, alpha, t_min, (runs, tasks))
    slowest, with_copies = phase_times(durations, copies)
    mean_t = float(slowest.mean())
    mean_t_prime = float(with_copies.mean())
    return StragglerStudy(
        alpha=alpha,
        tasks=tasks,
        runs=runs,
        mean_phase_time=mean_t,
        mean_phase_time_with_copies=mean_t_prime,
        reduction=1.0 - mean_t_prime / mean_t,
        mean_run_reduction=float((1.0 - with_copies / slowest).mean()),
    )
