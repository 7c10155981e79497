"""How jobs end: finish_job, kill, the job master exiting early, lost nodes, and job master
attempts (a lost job master is relaunched and adopts the job)."""

from __future__ import annotations

import pytest

from plumbing.node_protocol import LaunchMaster, StopAllocation, TaskReport
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import MASTER_RESOURCES
from resource_manager.errors import ConflictError, InvalidRequestError
from resource_manager.records import NodeState, PhaseProgress
from tests.builders import observation, res
from tests.unit.resource_manager.harness import (
    Driver,
    add_node,
    commands,
    new_core,
    running_job,
    spec_of,
    want,
)


def cluster_job(core: Driver, *, now: float = 1.0) -> tuple[str, str, list[str]]:
    """A cluster-mode job RUNNING with its master placed and two task containers granted.

    Returns (job id, master allocation id, task allocation ids)."""
    job = core.submit(spec_of(4), client_mode=False, now=now)
    job = core.job(job.job_id)
    (launch,) = commands(core, job.master_node, now=now)
    assert isinstance(launch, LaunchMaster)
    assert launch.attempt == 1
    core.register_master(job.job_id, attempt=1, now=now + 1)
    granted = core.allocate(job.job_id, [want(2)], [], [], 0, now=now + 2).granted
    return job.job_id, launch.allocation_id, [a.allocation_id for a in granted]


def master_report(
    job_id: str, allocation_id: str, state: TaskState, *, exit_code: int = 0
) -> TaskReport:
    return observation(
        job_id, "master", state, allocation_id=allocation_id, job_master=True, exit_code=exit_code
    )


def task_reports(core: Driver, job_id: str, allocations: list[str]) -> list[TaskReport]:
    """Each task container running one task, as its node reports it."""
    return [
        observation(job_id, f"p-{index}", TaskState.RUNNING, allocation_id=allocation_id)
        for index, allocation_id in enumerate(allocations)
    ]


def stops(
    core: Driver, node_id: str, live: list[TaskReport], *, now: float = 10.0
) -> dict[str, str]:
    """Allocation id -> reason, for what the node's next heartbeat (reporting ``live``) stops."""
    return {
        c.allocation_id: c.reason
        for c in commands(core, node_id, now=now, live=live)
        if isinstance(c, StopAllocation)
    }


def node_states(core: Driver) -> dict[str, NodeState]:
    return {node_id: node.state for node_id, node in core.nodes.items()}


# --------------------------------------------------------------------------- finish_job


@pytest.mark.parametrize(
    ("state", "master_stopped"),
    [
        (JobState.SUCCEEDED, False),  # the master's process ends by itself after reporting
        (JobState.FAILED, True),
        (JobState.KILLED, True),
    ],
)
def test_finish_job_releases_the_tasks_containers_and_stops_what_still_runs(
    state: JobState, master_stopped: bool
):
    core = new_core()
    add_node(core)
    job_id, master, tasks = cluster_job(core)
    progress = [PhaseProgress("p", 4, succeeded=4)]
    job = core.finish_job(job_id, state, "done", progress, now=9.0)
    assert (job.state, job.message, job.finish_time) == (state, "done", 9.0)
    assert job.progress == tuple(progress)
    assert set(core.allocations) == {master}  # released when the master's process ends
    live = [*task_reports(core, job_id, tasks), master_report(job_id, master, TaskState.RUNNING)]
    expected = set(tasks) | ({master} if master_stopped else set())
    assert set(stops(core, "n1", live)) == expected
    # re-sent with every heartbeat until the node's report shows them gone
    assert set(stops(core, "n1", live, now=11.0)) == expected
    assert stops(core, "n1", [], now=12.0) == {}


def test_the_master_of_a_succeeded_job_is_stopped_only_if_it_lingers():
    core = new_core(master_exit_grace=30.0)
    add_node(core)
    job_id, master, _ = cluster_job(core)
    core.finish_job(job_id, JobState.SUCCEEDED, "", [], now=10.0)
    live = [master_report(job_id, master, TaskState.RUNNING)]
    assert stops(core, "n1", live, now=39.0) == {}
    assert stops(core, "n1", live, now=41.0) == {master: "job succeeded 30 s ago"}
    core.report_events("n1", [master_report(job_id, master, TaskState.KILLED)], now=42.0)
    assert core.allocations == {}


@pytest.mark.parametrize(
    ("state", "error"),
    [(JobState.RUNNING, "state: running is not a final job state")],
)
def test_finish_job_refuses_a_state_that_is_not_final(state: JobState, error: str):
    core = new_core()
    job_id = running_job(core)
    with pytest.raises(InvalidRequestError, match=error):
        core.finish_job(job_id, state, "", [], now=2.0)


def test_a_final_job_stays_as_it_ended():
    core = new_core()
    job_id = running_job(core)
    core.finish_job(job_id, JobState.SUCCEEDED, "", [], now=2.0)
    assert core.finish_job(job_id, JobState.FAILED, "late", [], now=3.0).state is JobState.SUCCEEDED
    assert core.kill(job_id, now=4.0).state is JobState.SUCCEEDED
    assert core.job(job_id).finish_time == 2.0


# --------------------------------------------------------------------------- kill


def test_kill_is_final_at_once_and_stops_every_container():
    core = new_core()
    add_node(core)
    job_id, master, tasks = cluster_job(core)
    job = core.kill(job_id, now=5.0)
    assert (job.state, job.kill_requested, job.message) == (JobState.KILLED, True, "killed by user")
    assert job.finish_time == 5.0
    live = [*task_reports(core, job_id, tasks), master_report(job_id, master, TaskState.RUNNING)]
    assert stops(core, "n1", live) == {
        tasks[0]: f"allocation {tasks[0]} is not {job_id}'s",
        tasks[1]: f"allocation {tasks[1]} is not {job_id}'s",
        master: "job killed",
    }
    result = core.allocate(job_id, [want(2)], [], [], 0, now=6.0)
    assert result.kill_requested
    assert result.granted == ()
    assert set(core.allocations) == {master}


def test_kill_before_a_master_was_placed():
    core = new_core()
    job = core.submit(spec_of(4), client_mode=False, now=1.0)
    killed = core.kill(job.job_id, now=2.0, reason="changed my mind")
    assert (killed.state, killed.message) == (JobState.KILLED, "changed my mind")
    add_node(core, now=3.0)
    assert core.allocations == {}  # a killed job's master is never placed
    assert commands(core, "n1") == []


def test_kill_while_the_master_is_being_launched_releases_its_container():
    core = new_core()
    add_node(core)
    job = core.submit(spec_of(4), client_mode=False, now=1.0)
    assert core.job(job.job_id).state is JobState.STARTING
    core.kill(job.job_id, now=2.0)
    assert len(core.allocations) == 1
    # the node does not report the master: it never started, so nothing will end it
    assert commands(core, "n1", now=3.0) == []
    assert core.allocations == {}


# --------------------------------------------------------------------------- the master exits


def test_a_master_that_exits_before_reporting_gets_another_attempt_then_the_job_fails():
    core = new_core(max_master_attempts=2)
    add_node(core)
    job_id, master, tasks = cluster_job(core)
    core.report_events("n1", [master_report(job_id, master, TaskState.FAILED, exit_code=3)], now=5)
    job = core.job(job_id)
    assert job.state is JobState.STARTING  # attempt 2 placed at once
    assert job.master_attempt == 2
    assert job.message == (
        "job master attempt 1 exited with code 3 before reporting a final state; "
        "job master attempt 2 pending"
    )
    assert set(tasks) <= set(core.allocations)  # the job's tasks keep their containers
    (launch,) = commands(core, "n1", now=6.0, live=task_reports(core, job_id, tasks))
    assert launch == LaunchMaster(job_id, job.master_allocation, MASTER_RESOURCES, 2)
    core.register_master(job_id, attempt=2, now=7.0)
    second = job.master_allocation
    core.report_events("n1", [master_report(job_id, second, TaskState.FAILED, exit_code=1)], now=8)
    failed = core.job(job_id)
    assert failed.state is JobState.FAILED
    assert failed.message == (
        "job master attempt 2 exited with code 1 before reporting a final state (attempt 2 of 2)"
    )


def test_a_master_that_reported_then_exited_ends_nothing():
    core = new_core()
    add_node(core)
    job_id, master, _ = cluster_job(core)
    core.finish_job(job_id, JobState.SUCCEEDED, "", [], now=4.0)
    core.report_events("n1", [master_report(job_id, master, TaskState.FAILED, exit_code=3)], now=5)
    assert core.job(job_id).state is JobState.SUCCEEDED
    assert core.tasks == {}  # the master is not a task of the job
    assert core.allocations == {}


def test_a_stale_masters_exit_is_not_the_jobs_end():
    core = new_core()
    add_node(core)
    job_id, _, _ = cluster_job(core)
    stale = master_report(job_id, "job-000001-a77", TaskState.FAILED, exit_code=3)
    core.report_events("n1", [stale], now=5.0)
    assert core.job(job_id).state is JobState.RUNNING


# --------------------------------------------------------------------------- attempts


def test_a_superseded_attempt_is_refused_and_the_new_one_adopts_the_jobs_history():
    core = new_core(node_timeout=10.0)
    add_node(core, "n1", now=0.0)
    job_id, _, tasks = cluster_job(core, now=0.0)
    add_node(core, "n2", now=3.0)
    running = task_reports(core, job_id, tasks)
    core.report_events("n1", running, now=3.0)
    core.heartbeat("n2", res(0.0, 0), [], now=9.0)
    core.tick(now=11.0)  # n1, with the master (and both tasks), is lost
    job = core.job(job_id)
    assert (job.state, job.master_attempt, job.master_node) == (JobState.STARTING, 2, "n2")
    # the first attempt, partitioned but alive, is fenced off
    with pytest.raises(ConflictError, match="attempt 1 of job-000001 was superseded by attempt 2"):
        core.allocate(job_id, [], [], [], 0, now=12.0, attempt=1)
    with pytest.raises(ConflictError, match="superseded"):
        core.register_master(job_id, attempt=1, now=12.0)
    registration = core.register_master(job_id, attempt=2, now=12.0)
    assert registration.job.state is JobState.RUNNING
    assert registration.job.start_time == 1.0  # the job started with its first attempt
    assert [(t.task_id, t.state) for t in registration.history] == [
        ("p-0", TaskState.LOST),
        ("p-1", TaskState.LOST),
    ]
    assert core.allocate(job_id, [want(4)], [], [], 0, now=13.0, attempt=2).granted


def test_an_attempt_the_rm_never_launched_is_refused():
    core = new_core()
    job_id = running_job(core)
    with pytest.raises(ConflictError, match="has no job master attempt 3"):
        core.allocate(job_id, [], [], [], 0, now=2.0, attempt=3)


# --------------------------------------------------------------------------- lost nodes


def test_a_silent_node_is_lost_with_its_containers_and_tasks():
    core = new_core(node_timeout=10.0)
    add_node(core, "n1", 1.0, 4096, now=0.0)
    add_node(core, "n2", 1.0, 4096, now=0.0)
    job_id = running_job(core, now=0.0)
    granted = {
        a.node_id: a.allocation_id
        for a in core.allocate(job_id, [want(2)], [], [], 0, now=0.0).granted
    }
    running = [
        observation(job_id, "p-0", TaskState.RUNNING, allocation_id=granted["n1"]),
        observation(job_id, "p-1", TaskState.RUNNING, allocation_id=granted["n2"]),
    ]
    core.report_events("n1", running[:1], now=1.0)
    core.report_events("n2", running[1:], now=1.0)
    core.heartbeat("n2", res(1.0, 256), running[1:], now=9.0)
    core.tick(now=10.0)  # exactly the timeout: n1 is still alive
    assert node_states(core) == {"n1": NodeState.READY, "n2": NodeState.READY}
    core.tick(now=12.0)
    assert node_states(core) == {"n1": NodeState.LOST, "n2": NodeState.READY}
    assert set(core.allocations) == {granted["n2"]}
    lost = core.tasks[(job_id, "p-0", 1)]
    assert (lost.state, lost.message, lost.finish_time) == (TaskState.LOST, "node n1 lost", 12.0)
    assert core.tasks[(job_id, "p-1", 1)].state is TaskState.RUNNING
    result = core.allocate(job_id, [], [], [], 0, now=13.0)
    assert result.lost_allocations == (granted["n1"],)
    assert core.allocate(job_id, [], [], [], 0, now=14.0).lost_allocations == ()  # told once
    assert core.heartbeat("n1", res(0.0, 0), [], now=15.0) == (True, [])  # must re-register
    add_node(core, "n1", 1.0, 4096, now=16.0)
    assert node_states(core)["n1"] is NodeState.READY


def test_a_lost_node_is_forgotten_after_the_retention():
    core = new_core(node_timeout=10.0, lost_node_retention=60.0)
    add_node(core, "n1", now=0.0)
    core.tick(now=11.0)
    assert node_states(core) == {"n1": NodeState.LOST}
    core.tick(now=60.0)
    assert node_states(core) == {"n1": NodeState.LOST}
    core.tick(now=61.0)
    assert core.nodes == {}


def test_lost_master_node_before_registration_places_a_new_attempt():
    core = new_core(node_timeout=10.0)
    add_node(core, "n1", now=0.0)
    job = core.submit(spec_of(4), client_mode=False, now=0.0)
    assert core.job(job.job_id).master_node == "n1"
    add_node(core, "n2", now=5.0)
    core.tick(now=11.0)  # the new attempt is placed on n2 in the same pass
    job = core.job(job.job_id)
    assert (job.state, job.master_node, job.master_attempt) == (JobState.STARTING, "n2", 2)
    assert [type(c) for c in commands(core, "n2", now=12.0)] == [LaunchMaster]


def test_lost_master_node_of_a_running_job_keeps_the_other_nodes_tasks():
    core = new_core(node_timeout=10.0, max_master_attempts=2)
    add_node(core, "n1", now=0.0)
    add_node(core, "n2", now=0.0)
    job_id, master, tasks = cluster_job(core, now=0.0)
    on_n2 = {a for a in tasks if core.allocations[a].node_id == "n2"}
    assert core.allocations[master].node_id == "n1"
    assert on_n2  # the tasks spread over both nodes
    core.heartbeat("n2", res(0.0, 0), [], now=9.0)
    core.tick(now=12.0)
    job = core.job(job_id)
    assert job.state is JobState.STARTING
    assert job.message == "job master's node n1 was lost; job master attempt 2 pending"
    assert on_n2 <= set(core.allocations)  # n2's containers stay with the job


def test_lost_master_node_without_attempts_left_fails_the_job():
    core = new_core(node_timeout=10.0, max_master_attempts=1)
    add_node(core, "n1", now=0.0)
    add_node(core, "n2", now=0.0)
    job_id, _, tasks = cluster_job(core, now=0.0)
    core.heartbeat("n2", res(0.0, 0), [], now=9.0)
    core.tick(now=12.0)
    job = core.job(job_id)
    assert (job.state, job.message) == (
        JobState.FAILED,
        "job master's node n1 was lost (attempt 1 of 1)",
    )
    assert core.allocations == {}
    # whatever of the job still runs is stopped
    assert set(stops(core, "n2", task_reports(core, job_id, tasks), now=12.5)) == set(tasks)
