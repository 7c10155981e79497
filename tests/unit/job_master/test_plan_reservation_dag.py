"""Slot reservation on DAGs in the job master's plan (issue 28): a fork keeps containers for
every downstream phase, a join takes what its upstream phases keep; a kept container's deadline
counts from the start of its phase's last task; and every kept container's end is recorded."""

from __future__ import annotations

import math

import pytest

from job_master.plan import JobPlan
from job_master.plan_model import AttemptRecord
from policies.reservation.deadline import deadline_for_isolation
from policies.scheduling.jobspec import JobSpec, ReservationSpec, TaskTimePrior
from policies.scheduling.lifecycle import TaskState
from tests.builders import job_spec, phase_doc
from tests.unit.job_master.test_plan import asked, container
from tests.unit.job_master.test_plan_reservation import chain, finish, kept_for, report, start


def diamond(split: int, left: int, right: int, join: int) -> JobSpec:
    return job_spec(
        phase_doc("split", split),
        phase_doc("left", left, after=["split"]),
        phase_doc("right", right, after=["split"]),
        phase_doc("join", join, after=["left", "right"]),
    )


@pytest.mark.parametrize(
    ("split", "left", "right", "released", "kept"),
    [
        (4, 2, 2, 0, {"left": 2, "right": 2}),  # m = n on the fork: every container kept
        (6, 2, 2, 2, {"left": 2, "right": 2}),  # m > n: the first m - n finishers give back
        (3, 2, 1, 0, {"left": 2, "right": 1}),
    ],
)
def test_a_fork_keeps_containers_for_every_phase_its_barrier_releases(
    split: int, left: int, right: int, released: int, kept: dict[str, int]
):
    plan = JobPlan(diamond(split, left, right, 2), ReservationSpec(prereserve_at=1.0))
    start(plan, "split", split)
    gave_back = 0
    for index in range(split - 1):
        gave_back += len(finish(plan, f"split-{index}", at=1.0 + index).releases)
    barrier = finish(plan, f"split-{split - 1}", at=float(split))
    gave_back += len(barrier.releases)
    assert gave_back == released
    launched = [launch.task_id.rsplit("-", 1)[0] for launch in barrier.launches]
    assert {p: launched.count(p) for p in ("left", "right")} == kept
    assert asked(barrier) == {}  # every downstream task runs in a kept container at once


def test_a_fork_wider_than_its_phase_pre_reserves_for_the_phases_its_slots_do_not_cover():
    plan = JobPlan(diamond(2, 2, 2, 2), ReservationSpec(prereserve_at=0.4))
    start(plan, "split", 2)
    decisions = finish(plan, "split-0", at=3.0)  # 1/2 finished: past R = 0.4
    assert asked(decisions) == {"right": 2}  # split's two containers will serve left
    start(plan, "right", 2)  # granted ahead of the barrier: kept for right
    barrier = finish(plan, "split-1", at=4.0)
    launched = sorted(launch.task_id for launch in barrier.launches)
    assert launched == ["left-0", "left-1", "right-0", "right-1"] and asked(barrier) == {}


def test_a_join_asks_nothing_ahead_that_its_other_upstream_phase_will_keep():
    plan = JobPlan(diamond(4, 2, 2, 4), ReservationSpec(prereserve_at=0.4))
    start(plan, "split", 4)
    for index in range(4):
        finish(plan, f"split-{index}", at=1.0 + index)
    for phase in ("left", "right"):
        for index in range(2):
            report(plan, f"{phase}-{index}", TaskState.RUNNING)
    first = finish(plan, "left-0", at=6.0)  # 1/2 of left: past R, but right keeps 2 more
    assert asked(first) == {}
    finish(plan, "left-1", at=7.0)
    finish(plan, "right-0", at=8.0)
    barrier = finish(plan, "right-1", at=9.0)
    assert len(barrier.launches) == 4 and asked(barrier) == {}


def test_the_deadline_counts_from_the_start_of_the_phases_last_task():
    alpha, t_min = 2.0, 10.0
    settings = ReservationSpec(isolation=0.9, prior=TaskTimePrior(alpha, t_min))
    deadline = deadline_for_isolation(0.9, t_min, alpha, 2)
    plan = JobPlan(chain(2, 2), settings, now=100.0)  # p0 opens at 100, one container comes
    start(plan, "p0", 1)
    finish(plan, "p0-0", at=100.0 + deadline / 2)  # kept for p1; p0-1 still waits
    plan.advance(100.0 + 1.2 * deadline)  # past opened + D: p0-1 has not even started
    assert plan.decide().releases == () and len(kept_for(plan, "p1")) == 1
    late_start = 100.0 + 1.5 * deadline
    plan.advance(late_start)
    start(plan, "p0", 1)  # the last task of p0 starts: time 0 of the deadline
    plan.advance(late_start + deadline - 1e-6)
    assert plan.decide().releases == ()
    plan.advance(late_start + deadline)
    assert len(plan.decide().releases) == 1
    assert [end.reason for end in plan.kept_ends] == ["deadline"]


def _used(plan: JobPlan) -> None:
    finish(plan, "p0-1", at=5.0)  # the barrier: the kept container runs p1-0


def _deadline(plan: JobPlan) -> None:
    plan.advance(1e6)
    plan.decide()


def _killed(plan: JobPlan) -> None:
    plan.kill("killed")
    plan.decide()


def _lost(plan: JobPlan) -> None:
    (kept,) = kept_for(plan, "p1")
    plan.on_allocation_lost(kept)


@pytest.mark.parametrize(
    ("happens", "reason", "told"),
    [
        (_used, "used", True),
        (_deadline, "deadline", True),
        (_killed, "released", True),
        (_lost, "lost", False),
    ],
)
def test_each_kept_containers_end_is_recorded_with_why_and_told_to_the_rm(
    happens: object, reason: str, told: bool
):
    settings = ReservationSpec(isolation=0.5, prior=TaskTimePrior(2.0, 1.0))
    plan = JobPlan(chain(2, 2), settings)
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=1.0)
    (kept,) = kept_for(plan, "p1")
    plan.kept_changes()
    assert callable(happens)
    happens(plan)
    (end,) = [end for end in plan.kept_ends if end.allocation_id == kept]
    assert (end.allocation_id, end.phase, end.origin, end.reason) == (kept, "p1", "p0", reason)
    changes = {a: (phase, ended) for a, phase, _until, ended in plan.kept_changes()}
    assert (changes.get(kept) == ("p1", reason)) is told
    assert math.isfinite(end.at)


def test_a_container_lost_before_it_was_kept_records_no_end():
    plan = JobPlan(chain(1, 1), ReservationSpec())
    plan.on_granted(container("p0"))
    plan.decide()
    (allocation_id,) = plan.containers
    plan.on_allocation_lost(allocation_id)
    assert plan.kept_ends == []


def test_a_job_master_that_adopts_a_running_phase_counts_its_deadline_from_then():
    settings = ReservationSpec(isolation=0.9, prior=TaskTimePrior(2.0, 10.0))
    deadline = deadline_for_isolation(0.9, 10.0, 2.0, 2)
    plan = JobPlan(chain(2, 2), settings, now=50.0)  # a second attempt, started at 50
    held = [container("p0"), container("p0")]
    for c in held:
        plan.on_granted(c)
    plan.adopt(
        [
            AttemptRecord(f"p0-{i}", 1, TaskState.RUNNING, c.allocation_id)
            for i, c in enumerate(held)
        ]
    )
    finish(plan, "p0-0", at=60.0)
    ((_, phase, expiry, _),) = plan.kept_changes()
    assert (phase, expiry) == ("p1", 50.0 + deadline)  # not "no deadline" for ever


def test_a_last_task_heard_only_as_ended_starts_the_deadline():
    """The RM hands a job master each attempt's latest state: a task that started and ended
    between two rounds is heard succeeded, never running.  Its phase's kept containers still
    get their deadline (before, they were kept for ever)."""
    alpha, t_min = 2.0, 10.0
    settings = ReservationSpec(isolation=0.9, prior=TaskTimePrior(alpha, t_min))
    deadline = deadline_for_isolation(0.9, t_min, alpha, 2)
    plan = JobPlan(chain(2, 2), settings, now=0.0)
    for _ in range(2):
        plan.on_granted(container("p0"))
    assert len(plan.decide().launches) == 2  # neither is heard running
    report(plan, "p0-0", TaskState.RUNNING)
    finish(plan, "p0-1", at=5.0)  # kept for p1; heard only as ended: the last to start
    assert len(kept_for(plan, "p1")) == 1
    plan.advance(5.0 + deadline)
    assert len(plan.decide().releases) == 1
    assert [end.reason for end in plan.kept_ends] == ["deadline"]


@pytest.mark.parametrize(
    ("ran_s", "fitted_t_min"),
    [
        (None, 1.0),  # heard running at 9 and succeeded at 10: it seemed to run 1 s
        (10.0, 10.0),  # its node says it ran 10 s
    ],
)
def test_task_times_are_what_the_node_measured(ran_s: float | None, fitted_t_min: float):
    plan = JobPlan(chain(8, 1), ReservationSpec(isolation=0.9), now=0.0)
    for _ in range(8):
        plan.on_granted(container("p0"))
    plan.decide()
    plan.advance(9.0)
    for index in range(8):
        report(plan, f"p0-{index}", TaskState.RUNNING)
    for index in range(8):
        plan.advance(10.0 + index)
        extra = None if ran_s is None else ran_s + index
        plan.on_task_event(f"p0-{index}", 1, TaskState.SUCCEEDED, 0, "", ran_s=extra)
    fit = plan._slots._fit if plan._slots is not None else None
    assert fit is not None and fit[1] == pytest.approx(fitted_t_min)
