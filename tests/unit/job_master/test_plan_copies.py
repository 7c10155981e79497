"""Straggler copies on kept containers (slot reservation, Sec. IV-C): what a copy that wins
leaves kept, and that copies are decided from the latest view of the tasks' ends."""

from __future__ import annotations

import pytest

from job_master.plan import AttemptKind, JobPlan
from policies.scheduling.jobspec import ReservationSpec
from policies.scheduling.lifecycle import JobState, TaskState
from tests.unit.job_master.test_plan import asked
from tests.unit.job_master.test_plan_reservation import chain, finish, report, start

COPIES = ReservationSpec(isolation=0.9, prereserve_at=1.0, max_copies=None)


def run_until_straggler(plan: JobPlan, sizes: tuple[int, ...], phase: int) -> str:
    """Run phases 0..``phase`` - 1 through, start ``phase`` in containers kept from there (or
    new ones), and finish all its tasks but the last: the straggler, whose id is returned."""
    for index in range(phase + 1):
        name = f"p{index}"
        missing = plan.progress()[index].pending - len(plan.decide().launches)
        running = [t for t in plan.tasks.values() if t.phase == name and t.attempts]
        for task in running:
            report(plan, task.task_id, TaskState.RUNNING)
        start(plan, name, max(missing, 0))
        last = index == phase
        for task_index in range(sizes[index] - (1 if last else 0)):
            finish(plan, f"{name}-{task_index}", at=10.0 * index + task_index + 1)
    return f"p{phase}-{sizes[phase] - 1}"


@pytest.mark.parametrize(
    ("sizes", "phase"),
    [
        ((2, 2, 2), 1),  # the case: a three-phase job, the middle phase's straggler
        ((2, 2), 0),  # m = n
        ((3, 2, 1), 0),  # m > n: the copy wins past the first m - n finishers
        ((1, 3, 3), 1),  # the middle phase started in new containers beside the kept one
    ],
)
def test_a_copy_that_wins_keeps_the_winners_and_the_losers_containers_for_downstream(
    sizes: tuple[int, ...], phase: int
):
    plan = JobPlan(chain(*sizes), COPIES)
    straggler = run_until_straggler(plan, sizes, phase)
    loser = plan.tasks[straggler].allocation_id
    (copy,) = plan.decide().launches  # decided last round, confirmed now
    assert (copy.task_id, copy.kind) == (straggler, AttemptKind.COPY)
    report(plan, straggler, TaskState.RUNNING, attempt=copy.attempt)
    plan.advance(100.0)
    report(plan, straggler, TaskState.SUCCEEDED, attempt=copy.attempt)  # the copy wins
    won = plan.decide()
    assert [(s.task_id, s.attempt) for s in won.stops] == [(straggler, 1)]
    assert (won.releases, asked(won)) == ((), {})  # the loser's is kept: nothing asked
    report(plan, straggler, TaskState.KILLED, attempt=1)  # the stop is seen done
    after = plan.decide()
    downstream = {la.container.allocation_id for la in (*won.launches, *after.launches)}
    assert {copy.container.allocation_id, loser} <= downstream
    assert (after.releases, asked(after)) == ((), {})


def test_the_final_phases_copy_that_wins_gives_both_containers_back_at_its_end():
    plan = JobPlan(chain(1, 2), COPIES)
    straggler = run_until_straggler(plan, (1, 2), 1)
    loser = plan.tasks[straggler].allocation_id
    (copy,) = plan.decide().launches
    report(plan, straggler, TaskState.RUNNING, attempt=copy.attempt)
    report(plan, straggler, TaskState.SUCCEEDED, attempt=copy.attempt)
    assert plan.outcome is not None and plan.outcome[0] is JobState.SUCCEEDED
    assert set(plan.decide().releases) == {copy.container.allocation_id, loser}


@pytest.mark.parametrize(
    ("original_ends", "copies"),
    [
        ("never", 1),  # it straggles on: the next round starts its copy
        ("with the trigger", 0),  # its end came in the answer that freed the kept container
        ("before the confirming round", 0),  # its end came in the next answer
    ],
)
def test_a_task_whose_end_is_reported_before_its_copy_is_confirmed_gets_no_copy(
    original_ends: str, copies: int
):
    plan = JobPlan(chain(2, 2), COPIES)
    start(plan, "p0", 2)
    plan.advance(1.0)
    report(plan, "p0-0", TaskState.SUCCEEDED)  # frees a kept container: p0-1 may be copied
    if original_ends == "with the trigger":
        report(plan, "p0-1", TaskState.SUCCEEDED)
    first = plan.decide()
    assert [la for la in first.launches if la.kind is AttemptKind.COPY] == []
    if original_ends == "before the confirming round":
        plan.advance(1.3)
        report(plan, "p0-1", TaskState.SUCCEEDED)
    second = plan.decide()
    started = [la for la in second.launches if la.kind is AttemptKind.COPY]
    assert len(started) == copies
    if not copies:  # both kept containers run p1 at the barrier: nothing started to stop
        assert len(first.launches) + len(second.launches) == 2
        assert (second.stops, asked(second)) == ((), {})


def test_a_copy_launch_whose_task_ended_meanwhile_is_withdrawn_and_its_container_serves():
    plan = JobPlan(chain(2, 2), COPIES)
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=1.0)
    (copy,) = plan.decide().launches
    report(plan, "p0-1", TaskState.SUCCEEDED, attempt=1)  # before the launch was carried out
    assert plan.withdrawn(copy)  # the shell does not start it
    launched = {la.container.allocation_id for la in plan.decide().launches}
    assert copy.container.allocation_id in launched and len(launched) == 2


def test_a_live_copy_launch_is_not_withdrawn():
    plan = JobPlan(chain(2, 2), COPIES)
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=1.0)
    (copy,) = plan.decide().launches
    assert not plan.withdrawn(copy)
