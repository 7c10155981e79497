"""The RM's sprint budget: jobs sprint T_k after their first task runs, nodes are told, the
budget drains while tasks run, replenishes and survives a restart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plumbing.node_protocol import SprintAllocation, TaskReport
from policies.approximation.dias_config import DiasConfig, parse_dias_config
from policies.scheduling.framework import SprintChange
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import CoreSettings
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.builders import job_spec, observation, phase_doc
from tests.unit.resource_manager.harness import Driver, add_node, commands, new_core, spec_of, want
from tests.unit.resource_manager.test_service import Served


def dias(budget_s: float = 100.0, replenish_s_per_hour: float = 0.0) -> DiasConfig:
    return parse_dias_config(
        {
            "priorities": [{"priority": 1, "sprint_timeout_s": 10}],
            "sprint": {"budget_s": budget_s, "replenish_s_per_hour": replenish_s_per_hour},
        }
    )


def sprinting_core(path: Path | str = ":memory:", **budget: float) -> Driver:
    core = new_core(path, dias=dias(**budget), node_timeout=1e9, max_master_share=1.0)
    add_node(core, "n1", cpu=16, memory_mb=16384)
    return core


def run(core: Driver, job_id: str, phase: str, count: int, now: float) -> list[TaskReport]:
    """Grant ``count`` containers of ``phase`` and report their tasks running at ``now``."""
    granted = core.allocate(job_id, [want(count, phase=phase)], [], [], 0, now=now).granted
    reports = [
        observation(job_id, f"{phase}-{i}", TaskState.RUNNING, allocation_id=a.allocation_id)
        for i, a in enumerate(granted)
    ]
    core.report_events("n1", reports, now=now)
    return reports


def started(core: Driver, priority: int, now: float) -> list[TaskReport]:
    """Submit a job, register its master, run 2 tasks; what the node reports of them."""
    job = core.submit(spec_of(2, priority=priority), client_mode=False, now=now)
    core.register_master(job.job_id, attempt=1, now=now)
    granted = core.allocate(job.job_id, [want(2)], [], [], 0, now=now).granted
    reports = [
        observation(job.job_id, f"p-{i}", TaskState.RUNNING, allocation_id=a.allocation_id)
        for i, a in enumerate(granted)
    ]
    core.report_events("n1", reports, now=now)
    return reports


def sprints(core: Driver, live: list[TaskReport], now: float) -> list[float]:
    sent = commands(core, "n1", now=now, live=live)
    return [c.factor for c in sent if isinstance(c, SprintAllocation)]


def shown(reports: list[TaskReport], factor: float) -> list[TaskReport]:
    return [TaskReport(**{**r.__dict__, "sprint_factor": factor}) for r in reports]


def test_a_job_sprints_after_its_timeout_until_it_ends_and_the_budget_pays() -> None:
    core = sprinting_core()
    high = started(core, 1, now=0.0)
    low = started(core, 0, now=0.0)  # a priority without a timeout never sprints
    assert sprints(core, high + low, now=5.0) == []
    core.tick(10.0)
    assert sprints(core, high + low, now=10.0) == [2.0, 2.0]  # the high job's two tasks
    assert sprints(core, shown(high, 2.0) + low, now=11.0) == []  # done: nothing re-sent
    job_id = high[0].job_id
    core.finish_job(job_id, JobState.SUCCEEDED, "", (), now=30.0)
    assert core.sprints.budget_at(30.0) == pytest.approx(80.0)
    (record,) = core.sprints.history
    assert (record.job_id, record.started_at, record.ended_at) == (job_id, 10.0, 30.0)
    assert record.sprinted_s == pytest.approx(20.0)


def test_the_sprint_ends_when_the_budget_runs_dry_and_the_nodes_are_told() -> None:
    core = sprinting_core(budget_s=5.0)
    high = started(core, 1, now=0.0)
    core.tick(10.0)
    assert core.next_wakeup() == pytest.approx(15.0)  # when the budget runs dry
    core.tick(15.0)
    assert sprints(core, shown(high, 2.0), now=15.0) == [1.0, 1.0]
    assert core.sprints.history[0].why == "the budget ran dry"
    job_id = high[0].job_id
    assert [c for plan in core.plans for c in plan.sprints] == [
        SprintChange(
            job_id, True, "in execution past its priority's sprint timeout, with budget left"
        ),
        SprintChange(job_id, False, "the budget ran dry"),
    ]


def test_the_budget_survives_an_rm_restart(tmp_path: Path) -> None:
    path = tmp_path / "rm.db"
    core = sprinting_core(path, replenish_s_per_hour=360.0)
    started(core, 1, now=0.0)
    core.tick(20.0)  # sprinting since 10: 10 spent, 1 back (full until then)
    restarted = sprinting_core(path, replenish_s_per_hour=360.0)
    assert restarted.sprints.budget_at(20.0) == pytest.approx(91.0)
    assert [r.job_id for r in restarted.sprints.history] == [r.job_id for r in core.sprints.history]


def test_without_sprint_timeouts_nothing_is_sent() -> None:
    core = new_core(node_timeout=1e9)
    add_node(core, "n1", cpu=16, memory_mb=16384)
    reports = started(core, 1, now=0.0)
    core.tick(100.0)
    assert sprints(core, reports, now=100.0) == []


def test_get_sprint_reports_the_budget_and_a_sprint_going_on() -> None:
    served = Served(settings=CoreSettings(dias=dias(), node_timeout=1e9))
    try:
        core = Driver(served.core)  # (no agent calls this RM meanwhile)
        add_node(core, "n1", cpu=16, memory_mb=16384)
        started(core, 1, now=1.0)
        served.clock_value = 21.0
        core.tick(21.0)  # sprinting since 11
        status = served.jobs.GetSprint(rm_pb.GetSprintRequest(), timeout=10)
        assert status.enabled and status.budget_s == pytest.approx(90.0)
        (run,) = status.sprints
        assert (run.started_at, run.ended_at, run.sprinted_s) == (11.0, 0.0, 10.0)
        jobs = served.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs
        assert [(j.dias.sprinting, j.dias.sprinted_s) for j in jobs] == [(True, 10.0)]
    finally:
        served.close()


@pytest.mark.parametrize(
    ("first_task_at", "budget_s", "sprint_starts", "runs_dry_at"),
    [
        (0.0, 100.0, 10.0, None),  # tasks at once: T after the grant, as ever
        (4.0, 100.0, 14.0, None),  # a job master 4 s in starting: T after its first task
        # The clock of the grant sprinted from 10 and spent all 5 s by 15, before any task ran.
        (30.0, 5.0, 40.0, 45.0),
    ],
)
def test_the_sprint_timeout_counts_from_the_first_task_running_not_the_grant(
    first_task_at: float, budget_s: float, sprint_starts: float, runs_dry_at: float | None
) -> None:
    core = sprinting_core(budget_s=budget_s)
    job = core.submit(spec_of(2, priority=1), client_mode=False, now=0.0)  # master granted at 0
    assert job.job_id in core.tables.in_execution
    core.tick(first_task_at)
    assert core.sprints.next_change() is None  # no timer runs before a task does
    core.register_master(job.job_id, attempt=1, now=first_task_at)
    tasks = run(core, job.job_id, "p", 2, now=first_task_at)
    assert core.sprints.next_change() == pytest.approx(sprint_starts)
    core.tick(sprint_starts - 0.01)
    assert sprints(core, tasks, now=sprint_starts - 0.01) == []
    assert core.sprints.budget_at(sprint_starts - 0.01) == pytest.approx(budget_s)  # unspent
    core.tick(sprint_starts)
    assert sprints(core, tasks, now=sprint_starts) == [2.0, 2.0]
    assert core.sprints.history[0].started_at == pytest.approx(sprint_starts)
    if runs_dry_at is not None:
        core.tick(runs_dry_at)
        assert sprints(core, shown(tasks, 2.0), now=runs_dry_at) == [1.0, 1.0]
        (record,) = core.sprints.history
        assert (record.why, record.ended_at) == ("the budget ran dry", runs_dry_at)


def test_between_phases_a_sprinting_job_spends_nothing_and_its_next_tasks_sprint() -> None:
    """Decided: a job whose tasks all ended (its next phase not started yet) keeps sprinting
    (its timer is not started again) but spends no budget until a task runs again."""
    core = sprinting_core()
    spec = job_spec(phase_doc("map", 2), phase_doc("reduce", 1, after=["map"]), priority=1)
    job_id = core.submit(spec, client_mode=False, now=0.0).job_id
    core.register_master(job_id, attempt=1, now=2.0)
    maps = run(core, job_id, "map", 2, now=2.0)  # the first task at 2: the sprint at 12
    core.tick(12.0)
    assert sprints(core, maps, now=12.0) == [2.0, 2.0]
    ended = [replace(r, state=TaskState.SUCCEEDED, sprint_factor=2.0) for r in maps]
    core.report_events("n1", ended, now=15.0)  # 3 s spent; nothing runs until 25
    core.tick(25.0)
    assert core.sprints.sprinting(job_id)
    assert core.sprints.budget_at(25.0) == pytest.approx(97.0)
    reduce = run(core, job_id, "reduce", 1, now=25.0)
    assert sprints(core, reduce, now=25.0) == [2.0]  # sprinted as it starts
    core.finish_job(job_id, JobState.SUCCEEDED, "", (), now=30.0)
    assert core.sprints.budget_at(30.0) == pytest.approx(92.0)
    (record,) = core.sprints.history
    assert (record.started_at, record.ended_at) == (12.0, 30.0)
    assert record.sprinted_s == pytest.approx(8.0)  # 12-15 and 25-30: with tasks running


def test_a_restart_before_the_first_task_keeps_the_clock_waiting(tmp_path: Path) -> None:
    path = tmp_path / "rm.db"
    core = sprinting_core(path)
    job_id = core.submit(spec_of(1, priority=1), client_mode=False, now=0.0).job_id
    core.tick(20.0)
    restarted = sprinting_core(path)
    assert restarted.sprints.next_change() is None
    restarted.register_master(job_id, attempt=1, now=21.0)
    run(restarted, job_id, "p", 1, now=21.0)
    assert restarted.sprints.next_change() == pytest.approx(31.0)
    assert restarted.sprints.budget_at(31.0) == pytest.approx(100.0)
