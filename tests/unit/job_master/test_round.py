"""One job master round (job_master/round.py): what the plan says in Allocate, and what each kind
of answer does to it.  The live master and the simulator both run exactly this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from job_master.plan import JobPlan, Step
from job_master.round import (
    SPECULATIVE_MESSAGE_MAX,
    AllocateAnswer,
    AllocateCall,
    Grant,
    Heard,
    KeptChange,
    SequencedTaskEvent,
    TaskEnd,
    absorb,
    allocate_call,
    begin_round,
)
from job_master.speculation import Candidate
from policies.scheduling.jobspec import ReservationSpec, TaskTimePrior, parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from tests.builders import job_doc, job_spec, phase_doc, res
from tests.unit.job_master.test_plan_reservation import RESERVE, chain, finish, start

WALL = 1_000.0  # the RM's wall clock less the plan's, in these tests


def call_of(plan: JobPlan, now: float, **extra: object) -> AllocateCall:
    decisions = begin_round(plan, now)
    return allocate_call(
        plan,
        decisions,
        job_id="job-1",
        attempt=2,
        events_after=7,
        wall_offset=WALL,
        **extra,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- the call


def test_the_call_carries_the_rounds_decisions_and_the_plans_progress() -> None:
    plan = JobPlan(job_spec(phase_doc("a", 2), phase_doc("b", 1, after=["a"])), now=0.0)
    decisions = begin_round(plan, 1.0)
    call = allocate_call(
        plan, decisions, job_id="job-1", attempt=2, events_after=7, resolve_nodes=["n9"]
    )
    assert call == AllocateCall(
        job_id="job-1",
        attempt=2,
        asks=decisions.asks,
        releases=decisions.releases,
        progress=plan.progress(),
        events_after=7,
        resolve_nodes=("n9",),
    )
    assert [(a.phase, a.count) for a in call.asks] == [("a", 2)]


NO_DEADLINE = RESERVE
PRIOR = ReservationSpec(
    isolation=0.9, prereserve_at=1.0, max_copies=0, prior=TaskTimePrior(2.0, 5.0)
)


@dataclass(frozen=True)
class KeptCase:
    name: str
    reservation: ReservationSpec
    act: Callable[[JobPlan], None]  # after p0's tasks run; p0-0 finished at 10
    kept: Callable[[JobPlan], tuple[KeptChange, ...]]


def _first_p0(plan: JobPlan) -> str:
    return min(plan.containers)


def _finish_p0_1(plan: JobPlan) -> None:
    finish(plan, "p0-1", at=11.0)


KEPT_CASES = [
    KeptCase(
        # Alg. 1 keeps p0-0's container for p1; no task times yet: no deadline (0)
        "kept, no deadline",
        NO_DEADLINE,
        lambda plan: None,
        lambda plan: (KeptChange(_first_p0(plan), "p1", 0.0, ""),),
    ),
    KeptCase(
        # with a prior, the deadline (Eq. 4, on the plan's clock) goes out in the RM's time
        "kept until its deadline",
        PRIOR,
        lambda plan: None,
        lambda plan: (KeptChange(_first_p0(plan), "p1", plan._slots.expiry("p0") + WALL, ""),),  # type: ignore[union-attr]
    ),
    KeptCase(
        # the barrier passes: both kept containers run p1's tasks, and each end is told
        "used",
        NO_DEADLINE,
        _finish_p0_1,
        lambda plan: tuple(KeptChange(a, "p1", 0.0, "used") for a in sorted(plan.containers)),
    ),
]


@pytest.mark.parametrize("case", KEPT_CASES, ids=lambda c: c.name)
def test_a_plan_with_kept_slots_says_so_in_the_call(case: KeptCase) -> None:
    plan = JobPlan(chain(2, 2), case.reservation)
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=10.0)
    case.act(plan)
    expected = case.kept(plan)
    call = call_of(plan, 12.0)
    assert call.kept == expected
    assert call_of(plan, 13.0).kept == ()  # told once


def test_without_a_reservation_nothing_is_kept() -> None:
    plan = JobPlan(chain(2, 2))
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=10.0)
    assert call_of(plan, 12.0).kept == ()


def test_the_call_reports_each_speculative_change_once_with_its_message_cut() -> None:
    spec = parse_job_spec(
        job_doc(phase_doc("map", 1), speculative={"after_s": 2.0, "queue_timeout_s": 10.0})
    )
    plan = JobPlan(spec, now=0.0)
    nodes = [Candidate("n1", "n1:7000")]
    (placed,) = begin_round(plan, 2.0, nodes, np.random.default_rng(1)).speculative
    plan.on_speculative_answer(placed.task_id, placed.attempt, accepted=True)
    plan.on_speculative_status(placed.task_id, placed.attempt, TaskState.FAILED, message="x" * 500)
    call = allocate_call(plan, begin_round(plan, 3.0), job_id="j", attempt=1, events_after=0)
    (record,) = call.speculative
    assert (record.task_id, record.attempt, record.node_id) == ("map-0", 1, "n1")
    assert record.message == "x" * SPECULATIVE_MESSAGE_MAX
    again = allocate_call(plan, begin_round(plan, 4.0), job_id="j", attempt=1, events_after=0)
    assert again.speculative == ()


# --------------------------------------------------------------------------- the answer


def grant(allocation_id: str, phase: str = "a") -> Grant:
    return Grant(allocation_id, phase, "n1", "n1:7000", res(1.0, 256), b"token")


def running_plan() -> JobPlan:
    """Phase a's two tasks: a-0 runs in g1 (since 5); a-1 waits for a container."""
    plan = JobPlan(job_spec(phase_doc("a", 2), max_retries=1), now=0.0)
    call = call_of(plan, 1.0)
    absorb(plan, call, AllocateAnswer(granted=(grant("g1"),)), 1.0)
    (launch,) = begin_round(plan, 2.0).launches
    assert launch.task_id == "a-0"
    running = SequencedTaskEvent(1, "a-0", 1, TaskState.RUNNING, start_time=4.0, end_time=4.0)
    absorb(plan, call, AllocateAnswer(events=(running,)), 5.0)
    return plan


@dataclass(frozen=True)
class AnswerCase:
    name: str
    answer: AllocateAnswer
    heard: Heard  # the call's events_after is 7
    news: bool  # the simulator wakes the job master again
    check: Callable[[JobPlan], bool]


def ended(
    task_id: str, attempt: int, state: TaskState, node_id: str = "", *, preempted: bool = False
) -> tuple[TaskEnd, ...]:
    return (TaskEnd(task_id, attempt, node_id, state, preempted),)


SUCCEEDED = SequencedTaskEvent(
    12, "a-0", 1, TaskState.SUCCEEDED, 0, "", start_time=4.0, end_time=9.0, node_id="n1"
)
PREEMPTED = SequencedTaskEvent(9, "a-0", 1, TaskState.KILLED, 137, "", preempted=True)
ANSWER_CASES = [
    AnswerCase(
        "nothing",
        AllocateAnswer(),
        Heard(7),
        False,
        lambda plan: plan.tasks["a-0"].step is Step.RUNNING,
    ),
    AnswerCase(
        "a grant: a container for a-1, with its token",
        AllocateAnswer(granted=(grant("g2"),)),
        Heard(7, granted=1),
        True,
        lambda plan: (
            plan.containers["g2"].grant_token == b"token"
            and [launch.task_id for launch in plan.decide().launches] == ["a-1"]
        ),
    ),
    AnswerCase(
        "a task's end: its container goes back",
        AllocateAnswer(events=(SUCCEEDED,)),
        Heard(12, ended=ended("a-0", 1, TaskState.SUCCEEDED, "n1")),
        True,
        lambda plan: plan.tasks["a-0"].step is Step.SUCCEEDED and plan.decide().releases == ("g1",),
    ),
    AnswerCase(
        "a preemption: retried, no retry used up",
        AllocateAnswer(events=(PREEMPTED,)),
        Heard(9, ended=ended("a-0", 1, TaskState.KILLED, preempted=True)),
        True,
        lambda plan: plan.tasks["a-0"].step is Step.READY and plan.tasks["a-0"].failures == 0,
    ),
    AnswerCase(
        "a stale end (an attempt not live) is heard, and changes nothing",
        AllocateAnswer(events=(SequencedTaskEvent(8, "a-0", 5, TaskState.FAILED),)),
        Heard(8, ended=ended("a-0", 5, TaskState.FAILED)),
        True,
        lambda plan: plan.tasks["a-0"].step is Step.RUNNING,
    ),
    AnswerCase(
        "a state this job master does not know: skipped, its seq counted",
        AllocateAnswer(events=(SequencedTaskEvent(20, "a-0", 1, None),)),
        Heard(20),
        False,
        lambda plan: plan.tasks["a-0"].step is Step.RUNNING,
    ),
    AnswerCase(
        "an event already seen does not move events_after back",
        AllocateAnswer(events=(SequencedTaskEvent(3, "a-0", 1, TaskState.RUNNING),)),
        Heard(7),
        False,
        lambda plan: plan.tasks["a-0"].step is Step.RUNNING,
    ),
    AnswerCase(
        "a lost container: its task is ready again",
        AllocateAnswer(lost_allocations=("g1",)),
        Heard(7, lost=1),
        True,
        lambda plan: "g1" not in plan.containers and plan.tasks["a-0"].step is Step.READY,
    ),
    AnswerCase(
        "a kill",
        AllocateAnswer(kill_requested=True),
        Heard(7, kill_requested=True),
        False,
        lambda plan: plan.outcome == (JobState.KILLED, "killed"),
    ),
]


@pytest.mark.parametrize("case", ANSWER_CASES, ids=lambda c: c.name)
def test_each_kind_of_answer_changes_the_plan_and_is_heard(case: AnswerCase) -> None:
    plan = running_plan()
    call = call_of(plan, 10.0)
    heard = absorb(plan, call, case.answer, 10.5)
    assert plan.now == 10.5
    assert heard == case.heard
    assert heard.news is case.news
    assert case.check(plan)


@pytest.mark.parametrize(
    ("start_time", "end_time", "fitted_t_min"),
    [
        (0.0, 30.0, 1.0),  # its node did not say when it started: heard running at 9, ended at 10
        (5.0, 15.0, 10.0),  # its node says it ran 10 s
    ],
)
def test_a_finished_tasks_time_is_what_its_node_measured(
    start_time: float, end_time: float, fitted_t_min: float
) -> None:
    plan = JobPlan(chain(8, 1), ReservationSpec(isolation=0.9), now=0.0)
    call = call_of(plan, 0.0)
    absorb(plan, call, AllocateAnswer(granted=tuple(grant(f"g{i}", "p0") for i in range(8))), 0.0)
    begin_round(plan, 1.0)
    running = tuple(SequencedTaskEvent(i + 1, f"p0-{i}", 1, TaskState.RUNNING) for i in range(8))
    absorb(plan, call, AllocateAnswer(events=running), 9.0)
    for index in range(8):
        ended = SequencedTaskEvent(
            20 + index,
            f"p0-{index}",
            1,
            TaskState.SUCCEEDED,
            start_time=start_time,
            end_time=end_time + index,
        )
        absorb(plan, call, AllocateAnswer(events=(ended,)), 10.0 + index)
    fit = plan._slots._fit if plan._slots is not None else None
    assert fit is not None and fit[1] == pytest.approx(fitted_t_min)


def test_a_granted_container_is_the_plans_own_copy() -> None:
    """The answer is immutable: the plan changes its containers, never the grants."""
    plan = JobPlan(job_spec(phase_doc("a", 1)), now=0.0)
    given = grant("g1")
    absorb(plan, call_of(plan, 0.0), AllocateAnswer(granted=(given,)), 0.0)
    begin_round(plan, 1.0)
    assert plan.containers["g1"].task_id == "a-0"
    assert given == grant("g1")
