"""Submitting jobs, placing job masters, node registration and heartbeats."""

from __future__ import annotations

import pytest

from policies.scheduling.jobspec import SpecError
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import (
    MASTER_RESOURCES,
    ConflictError,
    LaunchMaster,
    NotFoundError,
    StopAllocation,
)
from resource_manager.records import MASTER_PHASE, NodeState, PhaseProgress
from tests.builders import observation, res
from tests.unit.resource_manager.harness import (
    add_node,
    commands,
    new_core,
    running_job,
    spec_of,
    want,
)


def test_submit_numbers_jobs_and_records_progress():
    core = new_core()
    first = core.submit(spec_of(3), client_mode=True, now=5.0)
    second = core.submit(spec_of(1), client_mode=False, now=6.0)
    assert (first.job_id, first.seq, second.job_id) == ("job-000001", 1, "job-000002")
    assert first.state is JobState.SUBMITTED
    assert first.submit_time == 5.0
    assert first.progress == (PhaseProgress("p", 3, pending=3),)
    assert core.job("job-000002") is second
    assert core.job_tasks(first.job_id) == []


@pytest.mark.parametrize(
    ("nodes", "task_memory_mb", "client_mode", "message"),
    [
        ([], 256, False, None),  # nodes may register later
        ([(4.0, 4096)], 256, False, None),
        (
            [(0.5, 4096)],
            256,
            True,
            "phases[0].resources: 1 cpu / 256 MiB per task fits on no node "
            "(largest: 0.5 cpu, 4096 MiB)",
        ),
        (
            [(1.0, 200)],  # the task fits; a job master (256 MiB) does not
            100,
            False,
            "cluster: no node can host a job master (0.1 cpu, 256 MiB)",
        ),
        ([(1.0, 200)], 100, True, None),  # client mode needs no master container
    ],
)
def test_submit_refuses_what_fits_no_registered_node(
    nodes: list[tuple[float, int]], task_memory_mb: int, client_mode: bool, message: str | None
):
    core = new_core()
    for index, (cpu, memory_mb) in enumerate(nodes):
        add_node(core, f"n{index}", cpu, memory_mb)
    spec = spec_of(1, cpu=1.0, memory_mb=task_memory_mb)
    if message is None:
        job = core.submit(spec, client_mode=client_mode, now=0.0)
        assert core.jobs == {job.job_id: job}
        return
    with pytest.raises(SpecError) as caught:
        core.submit(spec, client_mode=client_mode, now=0.0)
    assert str(caught.value) == message
    assert core.jobs == {}


def test_lost_nodes_do_not_count_when_checking_the_fit():
    core = new_core(node_timeout=10.0)
    add_node(core, "big", 16.0, 16384, now=0.0)
    add_node(core, "small", 1.0, 1024, now=0.0)
    core.heartbeat("small", res(0.0, 0), [], now=15.0)
    core.tick(now=15.0)
    with pytest.raises(SpecError, match=r"^phases\[0\]\.resources: "):
        core.submit(spec_of(1, cpu=8.0), client_mode=True, now=15.0)


def test_master_is_placed_and_launched_once():
    core = new_core()
    add_node(core, "n1")
    job = core.submit(spec_of(), client_mode=False, now=1.0)
    assert job.state is JobState.STARTING
    (allocation,) = core.allocations.values()
    assert (allocation.phase, allocation.node_id) == (MASTER_PHASE, "n1")
    assert (job.master_node, job.master_allocation) == ("n1", allocation.allocation_id)
    assert commands(core, "n1") == [
        LaunchMaster(job.job_id, allocation.allocation_id, MASTER_RESOURCES)
    ]
    assert commands(core, "n1") == []


def test_master_waits_for_a_node_then_the_higher_priority_one_goes_first():
    core = new_core()
    low = core.submit(spec_of(priority=0), client_mode=False, now=1.0)
    high = core.submit(spec_of(priority=7), client_mode=False, now=2.0)
    assert (low.state, high.state) == (JobState.SUBMITTED, JobState.SUBMITTED)
    add_node(core, "n1", MASTER_RESOURCES.cpu, 4096, now=3.0)  # room for one master only
    assert (low.state, high.state) == (JobState.SUBMITTED, JobState.STARTING)
    assert [type(c) for c in commands(core, "n1")] == [LaunchMaster]


@pytest.mark.parametrize(
    ("client_mode", "place_master", "outcome"),
    [
        (True, False, JobState.RUNNING),  # the submitter is the job master
        (False, True, JobState.RUNNING),  # STARTING -> RUNNING
        (False, False, ConflictError),  # no master container yet: who is this?
    ],
)
def test_register_master(
    client_mode: bool, place_master: bool, outcome: JobState | type[Exception]
):
    core = new_core()
    if place_master:
        add_node(core)
    job = core.submit(spec_of(), client_mode=client_mode, now=1.0)
    if outcome is ConflictError:
        with pytest.raises(ConflictError, match="has no job master allocation yet"):
            core.register_master(job.job_id, now=2.0)
        assert job.state is JobState.SUBMITTED
        return
    registered, held = core.register_master(job.job_id, now=2.0)
    assert registered.state is outcome
    assert registered.start_time == 2.0
    assert held == []  # the master's own container is not among the job's containers


def test_register_master_again_returns_the_containers_held():
    core = new_core()
    add_node(core)
    job_id = running_job(core)
    granted = core.allocate(job_id, [want(2)], [], [], 0, now=2.0).granted
    job, held = core.register_master(job_id, now=9.0)
    assert job.start_time == 1.0  # a re-registration is not a new start
    assert sorted(a.allocation_id for a in held) == sorted(a.allocation_id for a in granted)


def test_unknown_job_is_not_found():
    core = new_core()
    with pytest.raises(NotFoundError, match="job 'job-404' not found"):
        core.register_master("job-404", now=0.0)
    assert str(NotFoundError("job 'x' not found")) == "job 'x' not found"  # no KeyError quotes


# --------------------------------------------------------------------------- nodes


def test_heartbeat_from_an_unknown_node_asks_it_to_register():
    core = new_core()
    assert core.heartbeat("ghost", res(0.0, 0), [], now=0.0) == (True, [])


def test_heartbeat_records_usage_and_live_task_count():
    core = new_core()
    add_node(core)
    job_id = running_job(core)
    (grant,) = core.allocate(job_id, [want(1)], [], [], 0, now=2.0).granted
    live = [
        observation(job_id, "p-0", TaskState.RUNNING, allocation_id=grant.allocation_id),
        observation(job_id, "p-1", TaskState.SUCCEEDED, allocation_id=grant.allocation_id),
    ]
    assert core.heartbeat("n1", res(0.7, 300), live, now=3.0) == (False, [])
    node = core.nodes["n1"]
    assert (node.used, node.running_tasks, node.last_heartbeat) == (res(0.7, 300), 1, 3.0)
    assert core.tasks[(job_id, "p-0", 1)].state is TaskState.RUNNING


@pytest.mark.parametrize(
    ("case", "stopped"),
    [
        ("unknown allocation", True),
        ("unknown job", True),
        ("final job", True),
        ("final observation of an unknown allocation", False),
        ("known allocation of a running job", False),
    ],
)
def test_heartbeat_stops_live_tasks_nobody_should_run(case: str, stopped: bool):
    core = new_core()
    add_node(core)
    job_id = running_job(core)
    (grant,) = core.allocate(job_id, [want(1)], [], [], 0, now=2.0).granted
    allocation_id, state = grant.allocation_id, TaskState.RUNNING
    reported_job = job_id
    if case == "unknown allocation":
        allocation_id = "job-000001-a99"
    elif case == "unknown job":
        reported_job = "job-000404"
    elif case == "final job":
        core.kill(job_id, now=3.0)
        commands(core, "n1")  # drain the kill's own StopAllocation
    elif case == "final observation of an unknown allocation":
        allocation_id, state = "job-000001-a99", TaskState.SUCCEEDED
    live = [observation(reported_job, "p-0", state, allocation_id=allocation_id)]
    _, sent = core.heartbeat("n1", res(1.0, 256), live, now=4.0)
    expected = [StopAllocation(reported_job, allocation_id, "no such allocation or job")]
    assert sent == (expected if stopped else [])


def test_register_node_reports_live_tasks_and_schedules():
    core = new_core()
    job_id = running_job(core)
    core.allocate(job_id, [want(2)], [], [], 0, now=1.0)
    assert core.allocations == {}
    add_node(core, "n1", 1.0, 4096, now=2.0)
    (allocation,) = core.allocations.values()  # the outstanding ask met the new node
    assert (allocation.job_id, allocation.node_id, allocation.delivered) == (job_id, "n1", False)
    # the node restarts and reports what still runs in that allocation
    live = [observation(job_id, "p-0", TaskState.RUNNING, allocation_id=allocation.allocation_id)]
    add_node(core, "n1", 1.0, 4096, live=live, now=3.0)
    assert core.tasks[(job_id, "p-0", 1)].state is TaskState.RUNNING
    assert core.nodes["n1"].state is NodeState.READY
