"""Reserve or release a slot when a task completes (Algorithm 1, HandleTaskCompletion).

The job master calls :func:`handle_task_completion` once per task completion with an immutable
view of the task's phase and gets back a :class:`CompletionDecision`. The decision is a pure
function of the view: calling it again with the same view gives the same answer, and the
pre-reservation of Case-2.3 is reported on exactly one completion per phase (the one that takes
the finished fraction past the threshold R), so the caller keeps no extra state for it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class SlotAction(enum.Enum):
    """What happens to the slot the finished task ran on."""

    RESERVE = "reserve"
    RELEASE = "release"


@dataclass(frozen=True)
class PhaseView:
    """The finishing task's phase, as the job master sees it at the completion.

    Attributes:
        job_priority: priority of the task's job; a reserved slot inherits it.
        num_tasks: m, the degree of parallelism of the current phase (m >= 1).
        finished_before: tasks of this phase that had finished before this one
            (0 <= finished_before < m); this task is the ``finished_before + 1``-th finisher.
        downstream_num_tasks: n, the tasks the phase's barrier releases (the degree of
            parallelism of the next phase; on a fork, the sum over every downstream phase the
            slot may serve), or ``None`` when it is not known in advance (Case-1).
        is_final_phase: whether the task belongs to the job's last phase.
        prereserve_threshold: R, the finished fraction past which the extra n - m slots of
            Case-2.3 are requested (0 <= R <= 1; R = 1 never pre-reserves).
    """

    job_priority: int
    num_tasks: int
    finished_before: int
    downstream_num_tasks: int | None
    is_final_phase: bool = False
    prereserve_threshold: float = 0.8

    def __post_init__(self) -> None:
        if self.num_tasks < 1:
            raise ValueError(f"num_tasks: must be >= 1, got {self.num_tasks}")
        if not 0 <= self.finished_before < self.num_tasks:
            raise ValueError(
                f"finished_before: must be in [0, {self.num_tasks}), got {self.finished_before}"
            )
        if self.downstream_num_tasks is not None and self.downstream_num_tasks < 1:
            raise ValueError(
                f"downstream_num_tasks: must be >= 1 or None, got {self.downstream_num_tasks}"
            )
        if not 0.0 <= self.prereserve_threshold <= 1.0:
            raise ValueError(
                f"prereserve_threshold: must be in [0, 1], got {self.prereserve_threshold}"
            )


@dataclass(frozen=True)
class CompletionDecision:
    """Outcome of one task completion.

    Attributes:
        action: reserve or release the slot the task finished on.
        priority: the priority the reserved slot inherits (the job's), ``None`` when released.
        prereserve: number of additional slots to start requesting and reserving now for the
            downstream phase (Case-2.3, n - m); 0 on every other completion.
    """

    action: SlotAction
    priority: int | None
    prereserve: int = 0


def handle_task_completion(phase: PhaseView) -> CompletionDecision:
    """Decide the fate of the slot a task has just finished on (Algorithm 1, lines 1-17).

    - Final phase: release (line 3).
    - n unknown (Case-1) or m = n (Case-2.1): reserve with the job's priority (line 8).
    - m > n (Case-2.2): release if the task is among the first m - n finishers, else reserve
      (lines 9-13).
    - m < n (Case-2.3): reserve, and on the completion that takes the finished fraction
      (finished_before + 1) / m strictly past R, ask for n - m extra slots (lines 14-17).
    """
    if phase.is_final_phase:
        return CompletionDecision(SlotAction.RELEASE, None)
    reserve = CompletionDecision(SlotAction.RESERVE, phase.job_priority)
    m = phase.num_tasks
    n = phase.downstream_num_tasks
    if n is None or m == n:
        return reserve
    finish_rank = phase.finished_before + 1
    if m > n:
        if finish_rank <= m - n:
            return CompletionDecision(SlotAction.RELEASE, None)
        return reserve
    # Testing the crossing rather than "fraction > R" makes exactly one completion per phase ask
    # for the extra slots, so the caller need not remember that it already asked.
    crossed_now = phase.finished_before / m <= phase.prereserve_threshold < finish_rank / m
    if crossed_now:
        return CompletionDecision(SlotAction.RESERVE, phase.job_priority, prereserve=n - m)
    return reserve


def share_prereservation(rooms: Sequence[int], still_to_finish: int) -> tuple[int, ...]:
    """Case-2.3 on a fork: how many slots to pre-reserve for each downstream phase.

    ``rooms`` are the downstream phases' slots still missing (tasks less slots kept for them),
    in the order the finishing phase fills them; ``still_to_finish`` its tasks still running,
    each of which will keep its slot for the first phase with room.  What those slots leave
    of each phase's room is pre-reserved for it, so the barrier finds every downstream task a
    slot: the extra n - m of Alg. 1 line 16, shared out among the phases the barrier releases.
    """
    if still_to_finish < 0 or any(room < 0 for room in rooms):
        raise ValueError("rooms, still_to_finish: must not be negative")
    coming = still_to_finish
    shares = []
    for room in rooms:
        taken = min(room, coming)
        coming -= taken
        shares.append(room - taken)
    return tuple(shares)
