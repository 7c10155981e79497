"""The pure dispatch pieces: the permit, the eviction victim, resource waste."""

from __future__ import annotations

import pytest

from policies.approximation.dispatch import (
    JobsInExecution,
    RunningJob,
    eviction_victim,
    waste_share,
)
from policies.scheduling.capacity_index import CapacityIndex
from policies.scheduling.framework import AllocationKind, PassContext, PendingAsk, Refusal
from policies.scheduling.resources import Resources


def ask(kind: AllocationKind) -> PendingAsk:
    return PendingAsk("j", 0, 1, "", 1, Resources(0.1, 256), kind)


@pytest.mark.parametrize(
    ("in_execution", "kind", "admitted"),
    [
        (0, AllocationKind.JOB_MASTER, True),
        (1, AllocationKind.JOB_MASTER, True),
        (2, AllocationKind.JOB_MASTER, False),
        (5, AllocationKind.TASK, True),  # the tasks of jobs in execution are never held back
    ],
)
def test_the_permit_bounds_jobs_in_execution(
    in_execution: int, kind: AllocationKind, admitted: bool
) -> None:
    context = PassContext(now=0.0, cluster=CapacityIndex(), jobs_in_execution=in_execution)
    refusal = JobsInExecution(2).admit(ask(kind), context)
    assert (refusal is None) is admitted
    if not admitted:
        assert refusal == Refusal(
            "JobsInExecution", "2 jobs are in execution, the most DiAS dispatches (max_running)"
        )


def test_the_permit_needs_room_for_one_job() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        JobsInExecution(0)


@pytest.mark.parametrize(
    ("head", "running", "victim"),
    [
        (5, [], None),
        (5, [RunningJob("a", 5, 1.0)], None),  # equal priority: never
        (5, [RunningJob("a", 7, 1.0)], None),
        (5, [RunningJob("a", 0, 1.0), RunningJob("b", 3, 2.0)], "a"),  # the lowest priority
        (5, [RunningJob("a", 0, 1.0), RunningJob("b", 0, 2.0)], "b"),  # dispatched last
    ],
)
def test_eviction_victim(head: int, running: list[RunningJob], victim: str | None) -> None:
    assert eviction_victim(head, running) == victim


@pytest.mark.parametrize(
    ("wasted", "completed", "share"), [(0.0, 0.0, 0.0), (1.0, 3.0, 0.25), (0.0, 5.0, 0.0)]
)
def test_waste_share(wasted: float, completed: float, share: float) -> None:
    assert waste_share(wasted, completed) == share
