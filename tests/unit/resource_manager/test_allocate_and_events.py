"""The job master's Allocate round (asks, grants, releases, events) and task reports."""

from __future__ import annotations

import pytest

from policies.scheduling.asks import PhaseAsk
from policies.scheduling.lifecycle import TaskState
from resource_manager.errors import InvalidRequestError
from resource_manager.records import PhaseProgress
from tests.builders import job_spec, observation, phase_doc, res
from tests.unit.resource_manager.harness import (
    Driver,
    add_node,
    at,
    new_core,
    running_job,
    spec_of,
    want,
)


def granted_ids(core: Driver, job_id: str, asks: list[PhaseAsk]) -> list[str]:
    result = core.allocate(job_id, asks, [], [], 0, now=5.0)
    return [a.allocation_id for a in result.granted]


def test_grants_as_many_as_fit_and_delivers_each_once():
    core = new_core()
    add_node(core, "n1", 2.0, 4096)
    job_id = running_job(core)
    first = core.allocate(job_id, [want(3)], [], [], 0, now=2.0)
    assert [(a.phase, a.node_id, a.resources, a.delivered) for a in first.granted] == [
        ("p", "n1", res(1.0, 256), True),
        ("p", "n1", res(1.0, 256), True),
    ]
    assert all(a.granted_time == 2.0 for a in first.granted)
    assert len({a.allocation_id for a in first.granted}) == 2
    assert core.node_allocated("n1") == res(2.0, 512)
    # asked again (the master still misses one): nothing fits, nothing is re-delivered
    assert granted_ids(core, job_id, [want(1)]) == []


def test_asks_are_absolute_a_zero_ask_withdraws_the_rest():
    core = new_core()
    add_node(core, "n1", 1.0, 4096)
    job_id = running_job(core)
    (held,) = granted_ids(core, job_id, [want(3)])
    core.allocate(job_id, [want(0)], [held], [], 0, now=3.0)  # done: release, want nothing
    assert core.allocations == {}
    add_node(core, "n2", 4.0, 4096, now=4.0)
    assert core.allocations == {}


def test_grants_made_between_rounds_count_towards_the_next_ask():
    core = new_core()
    add_node(core, "n1", 2.0, 4096)
    job_id = running_job(core, spec_of(4))
    assert len(granted_ids(core, job_id, [want(4)])) == 2
    add_node(core, "n2", 2.0, 4096, now=3.0)  # the outstanding two are granted here...
    assert len(core.allocations) == 4
    # ...so the master, which has not heard of them yet and still asks for two, gets exactly those
    assert len(granted_ids(core, job_id, [want(2)])) == 2
    add_node(core, "n3", 8.0, 8192, now=6.0)
    assert len(core.allocations) == 4  # nothing more was outstanding


def test_releases_free_the_node_refuse_other_jobs_containers_and_ignore_unknown_ones():
    core = new_core()
    add_node(core, "n1", 2.0, 4096)
    mine = running_job(core)
    other = running_job(core)
    (a,) = granted_ids(core, mine, [want(1)])
    (b,) = granted_ids(core, other, [want(1)])
    with pytest.raises(InvalidRequestError, match=r"releases\[1\]: .* is not a task container of"):
        core.allocate(mine, [], ["job-000009-a1", b, a], [], 0, now=6.0)
    assert set(core.allocations) == {a, b}  # refused whole: not even a was released
    core.allocate(mine, [], [a, "job-000009-a1"], [], 0, now=6.0)  # unknown: already gone
    assert set(core.allocations) == {b}
    assert core.node_allocated("n1") == res(1.0, 256)


def test_strict_priority_between_two_jobs_asks():
    core = new_core()
    add_node(core, "n1", 2.0, 4096)
    filler = running_job(core)
    held = granted_ids(core, filler, [want(2)])
    low = running_job(core, spec_of(priority=1))
    high = running_job(core, spec_of(priority=5))
    assert granted_ids(core, low, [want(2)]) == []  # the node is full: both asks wait
    assert granted_ids(core, high, [want(2)]) == []
    core.allocate(filler, [], held, [], 0, now=7.0)
    assert len(granted_ids(core, high, [want(2)])) == 2
    assert granted_ids(core, low, [want(2)]) == []


def test_fifo_within_a_priority():
    core = new_core()
    add_node(core, "n1", 1.0, 4096)
    filler = running_job(core)
    held = granted_ids(core, filler, [want(1)])
    older = running_job(core)
    newer = running_job(core)
    granted_ids(core, newer, [want(1)])
    granted_ids(core, older, [want(1)])
    core.allocate(filler, [], held, [], 0, now=7.0)
    assert granted_ids(core, newer, [want(1)]) == []
    assert len(granted_ids(core, older, [want(1)])) == 1


def test_asks_of_a_job_that_is_not_running_are_ignored():
    core = new_core()
    add_node(core)
    job = core.submit(spec_of(), client_mode=True, now=1.0)
    result = core.allocate(job.job_id, [want(2)], [], [], 0, now=2.0)
    assert result.granted == ()
    assert core.allocations == {}


def test_progress_is_stored():
    core = new_core()
    job_id = running_job(core, spec_of(3))
    progress = [PhaseProgress("p", 3, pending=1, running=1, succeeded=1)]
    core.allocate(job_id, [], [], progress, 0, now=2.0)
    assert core.job(job_id).progress == tuple(progress)
    core.allocate(job_id, [], [], [], 0, now=3.0)  # no progress given: kept
    assert core.job(job_id).progress == tuple(progress)


# --------------------------------------------------------------------------- task reports


def launched(core: Driver, count: int = 1) -> tuple[str, list[str]]:
    """A running job with ``count`` containers on n1 (4 cpu)."""
    add_node(core, "n1")
    job_id = running_job(core, job_spec(phase_doc("map", 4), phase_doc("sum", 1, after=["map"])))
    return job_id, granted_ids(core, job_id, [want(count, phase="map")])


def test_reports_become_task_records_with_their_transitions():
    core = new_core()
    job_id, (alloc,) = launched(core)
    report = observation(job_id, "map-0", TaskState.RUNNING, allocation_id=alloc, timestamp=10.0)
    core.report_events("n1", [report], now=11.0)
    task = core.tasks[(job_id, "map-0", 1)]
    assert (task.phase, task.node_id, task.allocation_id) == ("map", "n1", alloc)
    assert (task.state, task.start_time, task.finish_time) == (TaskState.RUNNING, 10.0, 0.0)
    running_seq = task.seq
    core.report_events(
        "n1",
        [
            observation(
                job_id, "map-0", TaskState.FAILED, allocation_id=alloc, exit_code=3, message="boom"
            )
        ],
        now=12.0,
    )
    task = core.tasks[(job_id, "map-0", 1)]
    assert (task.state, task.exit_code, task.message) == (TaskState.FAILED, 3, "boom")
    assert task.finish_time == 12.0  # no timestamp in the report: the RM's clock
    assert task.seq > running_seq
    assert core.job_tasks(job_id) == [task]


@pytest.mark.parametrize(
    ("start_time", "timestamp", "recorded"),
    [
        (7.0, 10.0, 7.0),  # the agent's start time of the attempt
        (0.0, 10.0, 10.0),  # else the report's time
        (0.0, 0.0, 11.0),  # else the RM's clock
    ],
)
def test_a_task_record_starts_when_the_agent_says(
    start_time: float, timestamp: float, recorded: float
):
    core = new_core()
    job_id, (alloc,) = launched(core)
    report = observation(
        job_id,
        "map-0",
        TaskState.RUNNING,
        allocation_id=alloc,
        start_time=start_time,
        timestamp=timestamp,
    )
    core.report_events("n1", [report], now=11.0)
    assert core.tasks[(job_id, "map-0", 1)].start_time == recorded


@pytest.mark.parametrize(
    ("reports", "final_state", "changes"),
    [
        ([TaskState.SUCCEEDED, TaskState.RUNNING], TaskState.SUCCEEDED, 1),  # stale after the end
        ([TaskState.LOST, TaskState.SUCCEEDED], TaskState.LOST, 1),
        ([TaskState.RUNNING, TaskState.SUSPENDED, TaskState.RUNNING], TaskState.RUNNING, 3),
        ([TaskState.SUCCEEDED], TaskState.SUCCEEDED, 1),  # finished before seen running
        ([TaskState.RUNNING, TaskState.RUNNING], TaskState.RUNNING, 1),  # a repeat is no change
    ],
)
def test_only_allowed_transitions_are_recorded(
    reports: list[TaskState], final_state: TaskState, changes: int
):
    core = new_core()
    job_id, (alloc,) = launched(core)
    seqs = set()
    for state in reports:
        core.report_events("n1", [observation(job_id, "map-0", state, allocation_id=alloc)], now=1)
        seqs.add(core.tasks[(job_id, "map-0", 1)].seq)
    assert core.tasks[(job_id, "map-0", 1)].state is final_state
    assert len(seqs) == changes


def test_reports_for_unknown_jobs_are_dropped():
    core = new_core()
    core.report_events("n1", [observation("job-000404", "p-0", TaskState.RUNNING)], now=1.0)
    assert core.tasks == {}


def test_events_after_a_sequence_number_in_order_without_the_master():
    core = new_core()
    job_id, (a0, a1) = launched(core, 2)
    for task_id, alloc, state in [
        ("map-1", a1, TaskState.RUNNING),
        ("map-0", a0, TaskState.RUNNING),
        ("map-1", a1, TaskState.SUCCEEDED),
    ]:
        core.report_events("n1", [observation(job_id, task_id, state, allocation_id=alloc)], now=1)
    core.report_events(
        "n1", [observation(job_id, "master", TaskState.RUNNING, job_master=True)], now=1
    )
    events = core.allocate(job_id, [], [], [], 0, now=3.0).events
    # each record carries its latest change, ordered by when that change happened
    assert [(e.task_id, e.state) for e in events] == [
        ("map-0", TaskState.RUNNING),
        ("map-1", TaskState.SUCCEEDED),
    ]
    assert events[0].seq < events[1].seq
    after_first = core.allocate(job_id, [], [], [], events[0].seq, now=4.0).events
    assert [e.task_id for e in after_first] == ["map-1"]
    assert core.allocate(job_id, [], [], [], events[1].seq, now=4.0).events == ()


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("asks", "progress", "error"),
    [
        ([want(1, phase="nope")], [], "asks[0].phase: the job has no phase 'nope'"),
        ([want(1, cpu=-1.0)], [], "asks[0].resources: must be phase 'p''s 1 cpu / 256 MiB"),
        ([want(40_000)], [], "asks[0].count: 40000 is more than phase 'p' can still use"),
        ([want(1)], [PhaseProgress("x", 4)], "progress[0]: must be phase 'p' of 4 tasks"),
        ([want(1)], [PhaseProgress("p", 4, pending=-1)], "progress[0]: task counts must be"),
        ([want(1)], [PhaseProgress("p", 4), PhaseProgress("p", 4)], "progress: must list"),
    ],
)
def test_an_ask_or_progress_the_spec_does_not_allow_changes_nothing(
    asks: list[PhaseAsk], progress: list[PhaseProgress], error: str
):
    core = new_core()
    add_node(core, "n1", 8.0, 8192)
    job_id = running_job(core, spec_of(4))
    (held,) = granted_ids(core, job_id, [want(1)])
    before = (dict(core.jobs), dict(core.allocations))
    with pytest.raises(InvalidRequestError) as caught:
        core.allocate(job_id, asks, [held], progress, 0, now=3.0)
    assert str(caught.value).startswith(error)
    assert (dict(core.jobs), dict(core.allocations)) == before  # not even the release happened


def test_the_count_allowed_counts_the_containers_delivered():
    core = new_core()
    add_node(core, "n1", 8.0, 8192)
    job_id = running_job(core, spec_of(4))
    granted_ids(core, job_id, [want(3)])
    with pytest.raises(InvalidRequestError, match=r"asks\[0\]\.count: 2 is more"):
        core.allocate(job_id, [want(2)], [], [], 0, now=3.0)
    assert len(granted_ids(core, job_id, [want(1)])) == 1


def test_a_burst_of_grants_is_placed_over_several_bounded_passes():
    core = new_core(max_placements_per_pass=2)
    add_node(core, "n1", 8.0, 4096)
    job_id = running_job(core, spec_of(5))
    tables = core.core.tables
    tables.begin()
    inline = core.core.allocate(job_id, [want(5)], [], [], 0, now=at(2.0))
    tables.commit()
    assert len(inline.granted) == 2  # Allocate's own pass stopped at its limit
    assert core.needs_pass and core.pass_backlog  # the shell runs the next one at once
    passes = 0
    while core.needs_pass:
        tables.begin()
        core.core.schedule(at(2.0))
        tables.commit()
        passes += 1
    assert passes == 2 and not core.pass_backlog
    assert len(core.allocate(job_id, [want(3)], [], [], 0, now=3.0).granted) == 3


def test_a_delivery_rolled_back_with_its_unit_is_delivered_again():
    core = new_core()
    add_node(core, "n1", 2.0, 4096)
    job_id = running_job(core)
    tables = core.core.tables
    tables.begin()
    first = core.core.allocate(job_id, [want(1)], [], [], 0, now=at(2.0))
    assert len(first.granted) == 1
    tables.rollback()  # the answer never left: as if the call had failed
    assert tables.delivered_of_job(job_id) == {}
    again = core.allocate(job_id, [want(1)], [], [], 0, now=3.0)
    assert len(again.granted) == 1
    assert tables.delivered_of_job(job_id) == {"p": 1}
    assert tables.undelivered_of_job(job_id) == []
