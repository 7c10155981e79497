"""Speculative tasks as the RM learns of them through the agents (ROSE; docs/oversubscription.md):
never stopped as unknown while their job runs, counted as opportunistic, never as allocated."""

from __future__ import annotations

import pytest

from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import StopAllocation
from resource_manager.records import TaskReport
from tests.builders import res
from tests.unit.resource_manager.harness import add_node, commands, new_core, running_job


def speculative(job_id: str, index: int, state: TaskState = TaskState.RUNNING) -> TaskReport:
    return TaskReport(
        job_id,
        f"p-{index}",
        1,
        f"spec:{job_id}.p-{index}.1",
        state,
        limits=res(1.0, 256),
        speculative=True,
    )


def test_a_running_jobs_speculative_tasks_run_on_and_count_as_opportunistic():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id = running_job(core)
    live = [speculative(job_id, 0), speculative(job_id, 1)]
    assert commands(core, "n1", now=2.0, live=live) == []
    assert core.opportunistic("n1") == (res(2.0, 512), 2)
    assert core.node_allocated("n1") == res(0, 0)  # never as allocated
    ended = [speculative(job_id, 0, TaskState.SUCCEEDED), speculative(job_id, 1)]
    assert commands(core, "n1", now=3.0, live=ended) == []
    assert core.opportunistic("n1") == (res(1.0, 256), 1)


@pytest.mark.parametrize("ending", ["failed", "unknown"])
def test_a_speculative_task_of_an_ended_or_unknown_job_is_stopped(ending: str):
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id = running_job(core)
    if ending == "failed":
        core.finish_job(job_id, JobState.FAILED, "a task gave up", [], now=2.0, attempt=1)
    report = speculative(job_id if ending == "failed" else "job-999999", 0)
    (stop,) = commands(core, "n1", now=3.0, live=[report])
    assert isinstance(stop, StopAllocation) and stop.allocation_id == report.allocation_id
