"""Submitting jobs, placing job masters (within their share), node registration and heartbeats."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plumbing.node_protocol import LaunchMaster, StopAllocation
from policies.scheduling.jobspec import ReservationSpec, SpecError
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import MASTER_RESOURCES
from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
)
from resource_manager.records import AllocationKind, NodeState, Now, PhaseProgress
from tests.builders import job_spec, observation, phase_doc, res
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
    assert (first.master_attempt, second.master_attempt) == (1, 0)  # client mode: the submitter
    assert core.job("job-000002") == second
    assert core.job_tasks(first.job_id) == []


def test_a_repeated_idempotency_key_answers_the_first_job():
    core = new_core()
    first = core.submit(spec_of(3), client_mode=True, now=5.0, idempotency_key="k-1")
    again = core.submit(spec_of(3), client_mode=True, now=6.0, idempotency_key="k-1")
    assert again == first
    assert list(core.jobs) == [first.job_id]
    with pytest.raises(ConflictError, match="idempotency_key 'k-1' was used for job-000001"):
        core.submit(spec_of(4), client_mode=True, now=7.0, idempotency_key="k-1")
    other = core.submit(spec_of(3), client_mode=True, now=8.0, idempotency_key="k-2")
    assert other.job_id == "job-000002"


DEFAULT_RESERVATION = ReservationSpec(isolation=0.5, max_copies=None)


@pytest.mark.parametrize(
    ("own", "default", "recorded"),
    [
        (None, None, None),
        (None, DEFAULT_RESERVATION, DEFAULT_RESERVATION),  # the cluster's default is recorded
        (ReservationSpec(isolation=0.9), DEFAULT_RESERVATION, ReservationSpec(isolation=0.9)),
        (ReservationSpec(isolation=0.9), None, ReservationSpec(isolation=0.9)),
    ],
)
def test_a_job_without_a_reservation_gets_the_clusters_default(
    own: ReservationSpec | None, default: ReservationSpec | None, recorded: object
):
    core = new_core(default_reservation=default)
    spec = replace(spec_of(2), reservation=own)
    job = core.submit(spec, client_mode=True, now=1.0, idempotency_key="k")
    assert job.spec.reservation == recorded
    assert core.submit(spec, client_mode=True, now=2.0, idempotency_key="k") == job  # a retry


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
        assert list(core.jobs) == [job.job_id]
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


def test_master_is_placed_in_a_typed_container_and_launched_until_it_runs():
    core = new_core()
    add_node(core, "n1")
    job = core.job(core.submit(spec_of(), client_mode=False, now=1.0).job_id)
    assert job.state is JobState.STARTING
    (allocation,) = core.allocations.values()
    assert (allocation.kind, allocation.phase, allocation.node_id) == (
        AllocationKind.JOB_MASTER,
        "",
        "n1",
    )
    assert (job.master_node, job.master_allocation) == ("n1", allocation.allocation_id)
    launch = LaunchMaster(job.job_id, allocation.allocation_id, MASTER_RESOURCES, 1)
    assert commands(core, "n1", now=1.0) == [launch]
    assert commands(core, "n1", now=2.0) == [launch]  # the answer was lost? it comes again
    running = observation(
        job.job_id,
        "master",
        TaskState.RUNNING,
        allocation_id=allocation.allocation_id,
        job_master=True,
    )
    assert commands(core, "n1", now=3.0, live=[running]) == []  # the node runs it: done


def test_a_phase_named_like_anything_internal_is_just_a_phase():
    core = new_core()
    add_node(core, "n1")
    spec = job_spec(phase_doc("master", 1), phase_doc("job-master", 1))
    job = core.submit(spec, client_mode=False, now=1.0)
    core.register_master(job.job_id, attempt=1, now=2.0)
    granted = core.allocate(
        job.job_id, [want(1, phase="master"), want(1, phase="job-master")], [], [], 0, now=3.0
    ).granted
    assert sorted(a.phase for a in granted) == ["job-master", "master"]
    assert all(a.kind is AllocationKind.TASK for a in granted)


def test_master_waits_for_a_node_then_the_higher_priority_one_goes_first():
    core = new_core(max_master_share=1.0)
    low = core.submit(spec_of(priority=0), client_mode=False, now=1.0)
    high = core.submit(spec_of(priority=7), client_mode=False, now=2.0)
    add_node(core, "n1", MASTER_RESOURCES.cpu, 4096, now=3.0)  # room for one master only
    assert (core.job(low.job_id).state, core.job(high.job_id).state) == (
        JobState.SUBMITTED,
        JobState.STARTING,
    )
    assert [type(c) for c in commands(core, "n1")] == [LaunchMaster]


@pytest.mark.parametrize(
    ("share", "nodes", "jobs", "masters"),
    [
        (0.1, 2, 100, 1),  # 2 x (2 cpu, 2048 MiB): 10% is 409 MiB, room for one 256 MiB master
        (0.1, 2, 1, 1),
        (0.1, 20, 100, 16),  # 10% of 40960 MiB: 16 masters of 256 MiB
        (0.5, 2, 100, 8),
        (1.0, 2, 100, 16),  # all of it: memory for 16, the cpu of 40
        (0.001, 2, 3, 1),  # one job master may always run
    ],
)
def test_job_masters_hold_at_most_their_share_of_the_cluster(
    share: float, nodes: int, jobs: int, masters: int
):
    core = new_core(max_master_share=share)
    for index in range(nodes):
        add_node(core, f"n{index}", 2.0, 2048)
    for _ in range(jobs):
        core.submit(spec_of(1), client_mode=False, now=1.0)
    placed = [a for a in core.allocations.values() if a.kind is AllocationKind.JOB_MASTER]
    assert len(placed) == masters
    waiting = [j for j in core.jobs.values() if j.state is JobState.SUBMITTED]
    assert len(waiting) == jobs - masters
    # below the whole cluster, tasks still fit beside the masters: the first job can run
    first = next(j for j in core.jobs.values() if j.state is JobState.STARTING)
    core.register_master(first.job_id, attempt=1, now=2.0)
    granted = core.allocate(first.job_id, [want(1)], [], [], 0, now=3.0).granted
    assert bool(granted) is (share < 1.0)


@pytest.mark.parametrize(
    ("client_mode", "place_master", "attempt", "outcome"),
    [
        (True, False, 1, JobState.RUNNING),  # the submitter is the job master
        (False, True, 1, JobState.RUNNING),  # STARTING -> RUNNING
        (False, False, 0, "has no job master allocation yet"),  # no master container: who?
        (False, True, 2, "has no job master attempt 2"),
    ],
)
def test_register_master(client_mode: bool, place_master: bool, attempt: int, outcome: object):
    core = new_core()
    if place_master:
        add_node(core)
    job = core.submit(spec_of(), client_mode=client_mode, now=1.0)
    if isinstance(outcome, str):
        with pytest.raises(ConflictError, match=outcome):
            core.register_master(job.job_id, attempt=attempt, now=2.0)
        assert core.job(job.job_id).state in (JobState.SUBMITTED, JobState.STARTING)
        return
    registration = core.register_master(job.job_id, attempt=attempt, now=2.0)
    assert registration.job.state is outcome
    assert registration.job.start_time == 2.0
    assert registration.held == ()  # the master's own container is not a task container
    assert registration.history == ()


def test_register_master_again_returns_the_containers_held_and_the_history():
    core = new_core()
    add_node(core)
    job_id = running_job(core)
    granted = core.allocate(job_id, [want(2)], [], [], 0, now=2.0).granted
    report = observation(job_id, "p-0", TaskState.RUNNING, allocation_id=granted[0].allocation_id)
    core.report_events("n1", [report], now=3.0)
    registration = core.register_master(job_id, attempt=1, now=9.0)
    assert registration.job.start_time == 1.0  # a re-registration is not a new start
    assert sorted(a.allocation_id for a in registration.held) == sorted(
        a.allocation_id for a in granted
    )
    assert [(t.task_id, t.state) for t in registration.history] == [("p-0", TaskState.RUNNING)]


def test_unknown_job_is_not_found():
    core = new_core()
    with pytest.raises(NotFoundError, match="job 'job-404' not found"):
        core.register_master("job-404", attempt=1, now=0.0)
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
    ("case", "reason"),
    [
        ("unknown allocation", "allocation job-000001-a99 is not job-000001's"),
        ("unknown job", "no such job"),
        ("final job", "job killed"),
        ("final observation of an unknown allocation", None),
        ("known allocation of a running job", None),
        ("a task reported in the job master's container", "is not for this process"),
    ],
)
def test_heartbeat_stops_live_tasks_nobody_should_run(case: str, reason: str | None):
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
    elif case == "final observation of an unknown allocation":
        allocation_id, state = "job-000001-a99", TaskState.SUCCEEDED
    elif case == "a task reported in the job master's container":
        cluster = core.submit(spec_of(), client_mode=False, now=3.0)
        reported_job = cluster.job_id
        allocation_id = core.job(cluster.job_id).master_allocation
    live = [observation(reported_job, "p-0", state, allocation_id=allocation_id)]
    sent = [c for c in commands(core, "n1", now=4.0, live=live) if isinstance(c, StopAllocation)]
    if reason is None:
        assert sent == []
    else:
        (stop,) = sent
        assert (stop.job_id, stop.allocation_id) == (reported_job, allocation_id)
        assert reason in stop.reason


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


@pytest.mark.parametrize(
    ("node_id", "problem"),
    [
        ("", "must not be empty"),
        ("9uzz-o\bde", "must be letters, digits"),
        ("a/b", "must be letters, digits"),
        ("-x", "starting with a letter or digit"),
        ("n" * 254, "at most 253 characters"),
    ],
)
def test_a_malformed_node_id_is_refused(node_id: str, problem: str):
    core = new_core()
    with pytest.raises(InvalidRequestError, match=f"node_id: .*{problem}"):
        add_node(core, node_id)
    assert core.nodes == {}


def test_a_second_live_agent_with_the_same_node_id_is_refused():
    core = new_core(node_timeout=10.0)
    add_node(core, "n1", now=0.0, instance_id="first")
    core.heartbeat("n1", res(0.0, 0), [], now=5.0, instance_id="first")
    with pytest.raises(AlreadyExistsError, match="n1 is held by another live agent at n1:7000"):
        add_node(core, "n1", now=6.0, instance_id="second")
    # the same agent, restarted (same state directory, same instance id), is welcome at once
    add_node(core, "n1", now=7.0, instance_id="first")
    # a heartbeat from an agent the RM does not know as this node's is told to register
    assert core.heartbeat("n1", res(0.0, 0), [], now=8.0, instance_id="second") == (True, [])
    # once the first agent is silent for longer than the timeout, another may take the node
    add_node(core, "n1", now=18.0, instance_id="second")
    assert core.nodes["n1"].instance_id == "second"


def test_an_agent_of_another_cluster_is_refused():
    core = new_core(cluster_id="lab")
    with pytest.raises(ConflictError, match="started for cluster 'other'"):
        core.register_node("n1", "n1:7", "process", res(), [], now=0.0, cluster_id="other")
    core.register_node("n1", "n1:7", "process", res(), [], now=0.0, cluster_id="lab")


def test_liveness_follows_the_monotonic_clock_not_the_wall_clock():
    core = new_core(node_timeout=10.0)
    core.register_node("n1", "n1:7", "process", res(), [], now=Now(wall=1000.0, monotonic=5.0))
    states = []
    core.tick(Now(wall=1000.0 + 3600.0, monotonic=6.0))  # the wall clock jumped an hour
    states.append(core.nodes["n1"].state)
    core.tick(Now(wall=1000.0 - 3600.0, monotonic=15.5))  # ...and back; 10.5 s really passed
    states.append(core.nodes["n1"].state)
    assert states == [NodeState.READY, NodeState.LOST]
