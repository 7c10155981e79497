"""How jobs end: finish_job, kill, the job master exiting early, and lost nodes."""

from __future__ import annotations

import pytest

from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import ConflictError, LaunchMaster, ResourceManagerCore, StopAllocation
from resource_manager.records import MASTER_TASK_ID, NodeState, PhaseProgress
from tests.builders import observation, res
from tests.unit.resource_manager.harness import (
    add_node,
    commands,
    new_core,
    running_job,
    spec_of,
    want,
)


def cluster_job(core: ResourceManagerCore, *, tasks_on: str = "n1") -> tuple[str, str, list[str]]:
    """A cluster-mode job RUNNING with its master on n1 and two task containers granted.

    Returns (job id, master allocation id, task allocation ids)."""
    job = core.submit(spec_of(4), client_mode=False, now=1.0)
    (launch,) = commands(core, job.master_node, now=1.0)
    assert isinstance(launch, LaunchMaster)
    core.register_master(job.job_id, now=2.0)
    granted = core.allocate(job.job_id, [want(2)], [], [], 0, now=3.0).granted
    return job.job_id, launch.allocation_id, [a.allocation_id for a in granted]


def stops(core: ResourceManagerCore, node_id: str = "n1") -> set[str]:
    """Allocation ids the node's next heartbeat is told to stop."""
    return {c.allocation_id for c in commands(core, node_id) if isinstance(c, StopAllocation)}


def node_states(core: ResourceManagerCore) -> dict[str, NodeState]:
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
def test_finish_job_stops_and_releases_the_tasks_containers(state: JobState, master_stopped: bool):
    core = new_core()
    add_node(core)
    job_id, master, tasks = cluster_job(core)
    progress = [PhaseProgress("p", 4, succeeded=4)]
    job = core.finish_job(job_id, state, "done", progress, now=9.0)
    assert (job.state, job.message, job.finish_time) == (state, "done", 9.0)
    assert job.progress == tuple(progress)
    assert stops(core) == set(tasks) | ({master} if master_stopped else set())
    assert set(core.allocations) == {master}  # released when the master's process ends


def test_finish_job_refuses_a_state_that_is_not_final():
    core = new_core()
    job_id = running_job(core)
    with pytest.raises(ConflictError, match="running is not a final job state"):
        core.finish_job(job_id, JobState.RUNNING, "", [], now=2.0)


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
    assert stops(core) == {master, *tasks}
    assert set(core.allocations) == {master}
    result = core.allocate(job_id, [want(2)], [], [], 0, now=6.0)
    assert result.kill_requested
    assert result.granted == ()
    assert set(core.allocations) == {master}


def test_kill_before_a_master_was_placed():
    core = new_core()
    job = core.submit(spec_of(4), client_mode=False, now=1.0)
    core.kill(job.job_id, now=2.0, reason="changed my mind")
    assert (job.state, job.message) == (JobState.KILLED, "changed my mind")
    add_node(core, now=3.0)
    assert core.allocations == {}  # a killed job's master is never placed
    assert commands(core, "n1") == []


# --------------------------------------------------------------------------- the master exits


@pytest.mark.parametrize(
    ("finished_first", "which_master", "state"),
    [
        (False, "current", JobState.FAILED),
        (True, "current", JobState.SUCCEEDED),  # the normal end: reported, then exited
        (False, "stale", JobState.RUNNING),  # an earlier master's allocation: not this job's end
    ],
)
def test_master_exit(finished_first: bool, which_master: str, state: JobState):
    core = new_core()
    add_node(core)
    job_id, master, tasks = cluster_job(core)
    if finished_first:
        core.finish_job(job_id, JobState.SUCCEEDED, "", [], now=4.0)
        commands(core, "n1")
    allocation_id = master if which_master == "current" else "job-000001-a77"
    exit_report = observation(
        job_id, MASTER_TASK_ID, TaskState.FAILED, allocation_id=allocation_id, exit_code=3
    )
    core.report_events("n1", [exit_report], now=5.0)
    job = core.job(job_id)
    assert job.state is state
    assert core.tasks == {}  # the master is not a task of the job
    if which_master == "current":
        assert master not in core.allocations
    if state is JobState.FAILED:
        assert job.message == "job master exited with code 3 before reporting a final state"
        assert stops(core) == set(tasks)  # the master's process is already gone
        assert core.allocations == {}


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


def test_lost_master_node_before_registration_places_a_new_master():
    core = new_core(node_timeout=10.0)
    add_node(core, "n1", now=0.0)
    job = core.submit(spec_of(4), client_mode=False, now=0.0)
    assert job.master_node == "n1"
    add_node(core, "n2", now=5.0)
    core.tick(now=11.0)
    assert job.state is JobState.SUBMITTED
    assert (job.master_node, job.master_allocation) == ("", "")
    assert core.allocations == {}
    core.heartbeat("n2", res(0.0, 0), [], now=11.0)  # the next scheduling pass places it again
    assert (job.state, job.master_node) == (JobState.STARTING, "n2")
    assert [type(c) for c in commands(core, "n2", now=12.0)] == [LaunchMaster]


def test_lost_master_node_of_a_running_job_fails_it():
    core = new_core(node_timeout=10.0)
    add_node(core, "n1", now=0.0)
    add_node(core, "n2", now=0.0)
    job_id, master, tasks = cluster_job(core)
    on_n2 = {a for a in tasks if core.allocations[a].node_id == "n2"}
    assert core.allocations[master].node_id == "n1"
    assert on_n2  # the tasks spread over both nodes
    core.heartbeat("n2", res(0.0, 0), [], now=9.0)
    core.tick(now=12.0)
    job = core.job(job_id)
    assert (job.state, job.message) == (JobState.FAILED, "job master's node n1 was lost")
    assert core.allocations == {}
    assert stops(core, "n2") == on_n2
