"""An operator's hand (issue 28, section 1): a suspension or resize by `sluice task` stands
until the operator resumes it, across RM restarts; resuming what runs whole is refused; each
preemption step is stamped with when it happened; a finished job keeps what it sprinted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from plumbing.node_protocol import ResizeAllocation, ResumeAllocation, TaskReport
from policies.scheduling.containers import Goal
from policies.scheduling.framework import PreemptionAction
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.convert import job_summary_to_pb, task_to_pb
from resource_manager.errors import ConflictError
from resource_manager.records import OPERATOR
from sluice.cli import main
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.builders import observation, res
from tests.unit.resource_manager.harness import (
    Driver,
    add_node,
    commands,
    new_core,
    spec_of,
    want,
)
from tests.unit.resource_manager.test_change_task import change, running_task
from tests.unit.resource_manager.test_queues import (
    SHORT,
    containers,
    full_cluster,
    queued_core,
    run_job,
    running,
)
from tests.unit.resource_manager.test_service import Served
from tests.unit.resource_manager.test_sprints import shown, sprinting_core, sprints, started

HALF = res(0.5, 128)


def one_task(core: Driver, *, now: float = 1.0) -> tuple[str, str]:
    """A client-mode job whose task p-0 runs on n1 (1 cpu, 256 MiB): (job id, its container)."""
    job = core.submit(spec_of(1), client_mode=True, now=now)
    core.register_master(job.job_id, attempt=1, now=now)
    (granted,) = core.allocate(job.job_id, [want(1)], [], [], 0, now=now).granted
    core.report_events("n1", [live(job.job_id, granted.allocation_id, now)], now=now)
    return job.job_id, granted.allocation_id


def live(
    job_id: str, allocation_id: str, start: float, state: TaskState = TaskState.RUNNING, **more
) -> TaskReport:
    """The node's report of p-0 as agents send it: stamped with the task's start time."""
    return observation(
        job_id,
        "p-0",
        state,
        allocation_id=allocation_id,
        timestamp=start,
        start_time=start,
        **more,
    )


def operator_core(path: Path | str = ":memory:") -> Driver:
    core = new_core(path, node_timeout=1e9)
    add_node(core, "n1", cpu=4, memory_mb=4096)
    return core


# (what the operator does, what the node then shows, the goal and limits that must stand)
HOLDS = [
    pytest.param(
        PreemptionAction.SUSPEND, None, TaskState.SUSPENDED, Goal.SUSPEND, None, id="suspend"
    ),
    pytest.param(PreemptionAction.SHRINK, HALF, TaskState.RUNNING, Goal.RUN, HALF, id="resize"),
]


@pytest.mark.parametrize(("action", "limits", "state", "goal", "kept"), HOLDS)
def test_an_operators_hold_is_not_resumed_by_the_scheduler_nor_by_an_rm_restart(
    tmp_path: Path, action, limits, state, goal, kept
) -> None:
    path = tmp_path / "rm.db"
    core = operator_core(path)
    job_id, allocation_id = one_task(core)
    core.change_task(job_id, "p-0", action, limits=limits, now=2.0)
    report = live(job_id, allocation_id, 1.0, state, limits=limits)
    # the node carried it out; the node has room, and heartbeats offer it back many times
    sent = []
    for t in range(3, 12):
        sent += [c for c in commands(core, "n1", now=float(t), live=[report]) if _grows(c)]
    held = core.allocations[allocation_id]
    assert sent == []
    assert (held.goal, held.limits, held.held_by) == (goal, kept, OPERATOR)
    # an RM restart remembers who holds it
    again = new_core(path, node_timeout=1e9)
    restored = again.allocations[allocation_id]
    assert (restored.goal, restored.limits, restored.held_by) == (goal, kept, OPERATOR)
    add_node(again, "n1", cpu=4, memory_mb=4096, live=[report], now=20.0)
    for t in range(21, 26):
        sent += [c for c in commands(again, "n1", now=float(t), live=[report]) if _grows(c)]
    assert sent == []
    # the operator lifts it: it runs whole, held by nobody
    again.change_task(job_id, "p-0", None, now=30.0)
    resumed = again.allocations[allocation_id]
    assert (resumed.goal, resumed.limits, resumed.held_by) == (Goal.RUN, None, "")
    assert [c for c in commands(again, "n1", now=31.0, live=[report]) if _grows(c)]


def _grows(command: object) -> bool:
    """A command giving p-0 its whole grant (1 cpu, 256 MiB) back."""
    return isinstance(command, ResumeAllocation) or (
        isinstance(command, ResizeAllocation) and command.limits == res(1.0, 256)
    )


def test_an_operators_suspension_outlives_its_queues_longest_suspension() -> None:
    core = queued_core("immediate", max_suspended_s=30)
    long_job = full_cluster(core)
    (victim, *_) = containers(core, long_job)
    task = next(
        t for t in core.tables.tasks_of_job(long_job) if t.allocation_id == victim.allocation_id
    )
    core.change_task(long_job, task.task_id, PreemptionAction.SUSPEND, now=2.0)
    core.tick(100.0)
    assert core.allocations[victim.allocation_id].goal is Goal.SUSPEND
    assert core.next_wakeup() is None or core.next_wakeup() > 100.0


def test_the_schedulers_own_preemption_still_resumes_and_says_so() -> None:
    core = queued_core("immediate", resume_after_offers=0)
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    (victim,) = [a for a in containers(core, long_job) if a.goal is Goal.SUSPEND]
    task = next(
        t for t in core.tables.tasks_of_job(long_job) if t.allocation_id == victim.allocation_id
    )
    assert task_to_pb(task, "", victim).held_by == "scheduler"

    def reports() -> list[TaskReport]:
        return [
            running(long_job, a.allocation_id, i, state=TaskState.SUSPENDED, limits=res(0.01, 64))
            if a.allocation_id == victim.allocation_id
            else running(long_job, a.allocation_id, i)
            for i, a in enumerate(containers(core, long_job))
        ]

    core.heartbeat("n1", res(0, 0), reports(), now=3.0)
    core.finish_job(short_job, JobState.SUCCEEDED, "", [], now=4.0)
    core.heartbeat("n1", res(0, 0), reports(), now=5.0)
    assert core.allocations[victim.allocation_id].goal is Goal.RUN


def test_an_operator_taking_over_a_schedulers_preemption_holds_it() -> None:
    core = queued_core("immediate", resume_after_offers=0)
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    (victim,) = [a for a in containers(core, long_job) if a.goal is Goal.SUSPEND]
    task = next(
        t for t in core.tables.tasks_of_job(long_job) if t.allocation_id == victim.allocation_id
    )
    core.change_task(
        long_job, task.task_id, PreemptionAction.SUSPEND, limits=res(0.01, 64), now=3.0
    )
    assert core.allocations[victim.allocation_id].held_by == OPERATOR
    assert task_to_pb(task, "", core.allocations[victim.allocation_id]).held_by == "operator"


def test_resuming_a_task_that_runs_whole_is_refused_as_nothing_to_resume() -> None:
    core = operator_core()
    job_id, allocation_id = one_task(core)
    before = core.allocations[allocation_id]
    with pytest.raises(ConflictError, match="runs with its whole grant: nothing to resume"):
        core.change_task(job_id, "p-0", None, now=2.0)
    assert core.allocations[allocation_id] == before


@pytest.fixture
def served() -> Iterator[Served]:
    rm = Served()
    yield rm
    rm.close()


def test_resume_of_a_running_task_answers_failed_precondition_and_the_cli_says_so(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id, _ = running_task(served)
    with pytest.raises(grpc.RpcError) as caught:
        change(served, job_id, rm_pb.TASK_RESUME)
    assert caught.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "nothing to resume" in caught.value.details()
    assert main(["--rm", served.address, "task", "resume", job_id, "p-0"]) != 0
    err = capsys.readouterr().err
    assert "nothing to resume" in err and err.count("\n") == 1
    # suspended, then resumed: that one answers, and a second resume is refused again
    change(served, job_id, rm_pb.TASK_SUSPEND)
    assert change(served, job_id, rm_pb.TASK_RESUME).goal == "run"
    with pytest.raises(grpc.RpcError):
        change(served, job_id, rm_pb.TASK_RESUME)


def test_each_preemption_step_is_stamped_with_when_it_was_seen_not_the_task_start() -> None:
    core = operator_core()
    job_id, allocation_id = one_task(core, now=1.0)
    core.change_task(job_id, "p-0", PreemptionAction.SUSPEND, now=10.0)
    suspended = live(job_id, allocation_id, 1.0, TaskState.SUSPENDED)
    commands(core, "n1", now=12.0, live=[suspended])
    core.change_task(job_id, "p-0", None, now=20.0)
    commands(core, "n1", now=22.0, live=[live(job_id, allocation_id, 1.0)])
    core.change_task(job_id, "p-0", PreemptionAction.SHRINK, limits=HALF, now=30.0)
    commands(core, "n1", now=33.0, live=[live(job_id, allocation_id, 1.0, limits=HALF)])
    (task,) = core.tables.tasks_of_job(job_id)
    assert [(s.action, s.time) for s in task.preemptions] == [
        ("suspended", 12.0),
        ("resumed", 22.0),
        ("shrunk", 33.0),
    ]
    # a kill's step is stamped with the end its node reports
    core.change_task(job_id, "p-0", PreemptionAction.KILL, now=40.0)
    killed = live(job_id, allocation_id, 1.0, TaskState.KILLED, limits=HALF)
    core.report_events("n1", [TaskReport(**{**killed.__dict__, "timestamp": 41.0})], now=42.0)
    (task,) = core.tables.tasks_of_job(job_id)
    assert (task.preemptions[-1].action, task.preemptions[-1].time) == ("killed", 41.0)


@pytest.mark.parametrize("ending", [JobState.SUCCEEDED, JobState.KILLED])
def test_a_finished_job_keeps_what_it_sprinted(tmp_path: Path, ending: JobState) -> None:
    path = tmp_path / "rm.db"
    core = sprinting_core(path)
    high = started(core, 1, now=0.0)
    core.tick(10.0)
    assert sprints(core, high, now=10.0) == [2.0, 2.0]
    sprints(core, shown(high, 2.0), now=11.0)
    job_id = high[0].job_id
    if ending is JobState.KILLED:
        core.kill(job_id, now=30.0)
    else:
        core.finish_job(job_id, JobState.SUCCEEDED, "", (), now=30.0)
    summary = job_summary_to_pb(core.job(job_id)).dias
    assert summary.sprinted_s == pytest.approx(20.0)
    assert not summary.sprinting
    # kept in the store: a restarted RM shows it too, for a job long gone from memory
    restarted = sprinting_core(path)
    stored = restarted.tables.find_job(job_id)
    assert stored is not None
    assert job_summary_to_pb(stored).dias.sprinted_s == pytest.approx(20.0)
