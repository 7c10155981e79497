"""Job-master task scheduling around speculative tasks (ROSE Alg. 5 and Sec. 6.3).

* Lines 1-3: while resource requests cannot be satisfied, dispatch speculative tasks.
* Lines 5-19: when a waiting regular resource is approved for a request that a speculative task
  already serves:
  - the speculative task is queued or unplaced → cancel it, start the regular task (7-9);
  - it runs on the machine of the approved resource → upgrade it in place (10-11);
  - it runs elsewhere with progress > tau → keep it and reserve the resource (12-14);
  - otherwise → kill it and start the regular task on the new resource (15-17).
* Time-out rescheduling: a speculative task waiting in a node queue for longer than the
  time-out is re-dispatched to a machine of the latest Alg. 4 result, chosen at random
  (Sec. 3.3: "in a random or round-robin way"), preferring a machine other than its current one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from policies.oversubscription.config import OversubscriptionConfig


class SpeculativeState(Enum):
    """Where a speculative task is."""

    UNPLACED = "unplaced"  # no destination found (specTaskLoc is null)
    QUEUED = "queued"  # waiting in a node queue
    RUNNING = "running"


class UpgradeAction(Enum):
    """The outcome of Alg. 5 lines 5-19 (the line numbers of each branch)."""

    CANCEL_AND_START_REGULAR = "cancel_and_start_regular"  # lines 7-9
    UPGRADE_IN_PLACE = "upgrade_in_place"  # lines 10-11
    KEEP_AND_RESERVE = "keep_and_reserve"  # lines 12-14
    KILL_AND_START_REGULAR = "kill_and_start_regular"  # lines 15-17


@dataclass(frozen=True)
class SpeculativeTask:
    """A job master's view of one speculative task."""

    task_id: str
    state: SpeculativeState
    machine: str | None
    progress: float = 0.0
    enqueued_at: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.progress <= 1.0:
            raise ValueError("task.progress: must be in [0, 1]")
        if self.state is not SpeculativeState.UNPLACED and self.machine is None:
            raise ValueError("task.machine: a queued or running task has a machine")


def should_dispatch_speculative(pending_requests: int) -> bool:
    """Alg. 5 lines 1-3: dispatch speculative tasks while requests remain unsatisfied."""
    if pending_requests < 0:
        raise ValueError("pending_requests: must be non-negative")
    return pending_requests > 0


def on_resource_approved(
    task: SpeculativeTask, resource_machine: str, config: OversubscriptionConfig
) -> UpgradeAction:
    """Alg. 5 lines 5-19 for the speculative task serving the approved request."""
    if task.state is not SpeculativeState.RUNNING:
        return UpgradeAction.CANCEL_AND_START_REGULAR
    if task.machine == resource_machine:
        return UpgradeAction.UPGRADE_IN_PLACE
    if task.progress > config.upgrade_progress_threshold:
        return UpgradeAction.KEEP_AND_RESERVE
    return UpgradeAction.KILL_AND_START_REGULAR


def timed_out(task: SpeculativeTask, now: float, config: OversubscriptionConfig) -> bool:
    """Sec. 6.3: has a queued task waited longer than the time-out bound?"""
    return task.state is SpeculativeState.QUEUED and now - task.enqueued_at > config.queue_timeout_s


@dataclass(frozen=True)
class Reschedule:
    """Move ``task_id`` from ``source`` to ``destination``."""

    task_id: str
    source: str
    destination: str


def reschedule_timed_out(
    tasks: Sequence[SpeculativeTask],
    candidates: Sequence[str],
    now: float,
    rng: np.random.Generator,
    config: OversubscriptionConfig,
) -> tuple[Reschedule, ...]:
    """Sec. 6.3: re-dispatch every timed-out queued task to a random latest candidate other than
    its current machine, in the given order. A task stays when no other candidate exists."""
    moves: list[Reschedule] = []
    for task in tasks:
        if not timed_out(task, now, config) or not candidates:
            continue
        source = task.machine or ""
        others = [machine for machine in candidates if machine != source]
        if not others:
            continue
        destination = others[int(rng.integers(len(others)))]
        moves.append(Reschedule(task.task_id, source, destination))
    return tuple(moves)
