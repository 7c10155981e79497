"""The RM's sprint budget: jobs sprint T_k after dispatch, nodes are told, the budget drains,
replenishes and survives a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.approximation.dias_config import DiasConfig, parse_dias_config
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import CoreSettings, SprintAllocation
from resource_manager.records import TaskReport
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.builders import observation
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
