"""Speculative tasks as the RM learns of them through the agents (ROSE; docs/oversubscription.md):
never stopped as unknown while their job runs, counted as opportunistic, never as allocated."""

from __future__ import annotations

import pytest

from plumbing.node_protocol import StopAllocation, TaskReport
from policies.scheduling.lifecycle import JobState, TaskState
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


def test_node_addresses_are_those_of_live_nodes_asked_for():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    add_node(core, "n2", 4.0, 4096)
    found = core.node_addresses(["n2", "nowhere"])
    assert list(found) == ["n2"] and found["n2"]


def attempt(outcome: str, task: str = "map-0", number: int = 1, **fields: str):
    from sluice_pb import resource_manager_pb2 as rm_pb

    return rm_pb.SpeculativeAttempt(
        task_id=task, attempt=number, node_id="n1", outcome=outcome, **fields
    )


def test_the_speculative_log_keeps_each_attempts_latest_outcome_in_order():
    from resource_manager.speculative_log import SpeculativeLog

    log = SpeculativeLog()
    log.record("job-1", [attempt("queued", "map-1"), attempt("queued", "map-0")])
    log.record("job-1", [attempt("running", "map-0"), attempt("evicted", "map-1")])
    shown = [(a.task_id, a.outcome) for a in log.of("job-1")]
    assert shown == [("map-0", "running"), ("map-1", "evicted")]
    assert log.of("job-2") == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (attempt("exploded"), "speculative[0].outcome: must be one of"),
        (attempt("queued", message="x" * 201), "speculative[0].message: at most 200 characters"),
    ],
)
def test_a_bad_speculative_report_is_refused_naming_the_field(bad, message):
    from resource_manager.errors import InvalidRequestError
    from resource_manager.speculative_log import SpeculativeLog

    with pytest.raises(InvalidRequestError) as caught:
        SpeculativeLog.check([bad])
    assert str(caught.value).startswith(message)
