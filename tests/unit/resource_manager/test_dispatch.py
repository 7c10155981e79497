"""DiAS dispatch in the RM core: priority buffers, a bound on jobs in execution, no eviction."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plumbing.node_protocol import StopAllocation
from policies.approximation.dispatch import DispatchMode
from policies.preemption.queues import parse_queue_config
from policies.scheduling.framework import Eviction
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.errors import ConflictError
from resource_manager.records import Goal
from resource_manager.sqlite_store import SqliteStore
from resource_manager.tables import Tables
from tests.builders import job_spec, observation, phase_doc, res
from tests.unit.resource_manager.harness import (
    Driver,
    add_node,
    commands,
    new_core,
    spec_of,
    want,
)

DIAS = DispatchMode.DIAS


def buffered_core(max_running: int = 1, mode: DispatchMode = DIAS) -> Driver:
    # (masters' containers are freed when their node shows them ended; no node reports here)
    core = new_core(dispatch=mode, max_running_jobs=max_running, max_master_share=1.0)
    add_node(core, "n1", cpu=16, memory_mb=16384)
    return core


def submit(core: Driver, priority: int, now: float) -> str:
    return str(core.submit(spec_of(priority=priority), client_mode=False, now=now).job_id)


def states(core: Driver, *job_ids: str) -> list[JobState]:
    return [core.job(j).state for j in job_ids]


def finish(core: Driver, job_id: str, now: float) -> None:
    job = core.job(job_id)
    core.register_master(job_id, attempt=job.master_attempt, now=now)
    core.finish_job(job_id, JobState.SUCCEEDED, "", (), now=now, attempt=job.master_attempt)


@pytest.mark.parametrize(
    ("mode", "max_running", "started"),
    [
        (DispatchMode.PRIORITY, 1, 3),  # no buffers: every job master that fits
        (DIAS, 1, 1),
        (DIAS, 2, 2),
        (DIAS, 5, 3),
    ],
)
def test_jobs_in_execution_are_bounded(mode: DispatchMode, max_running: int, started: int) -> None:
    core = buffered_core(max_running, mode)
    jobs = [submit(core, 0, now=float(i)) for i in range(3)]
    assert states(core, *jobs).count(JobState.STARTING) == started


def test_the_head_of_the_highest_buffer_goes_next_and_nothing_is_evicted() -> None:
    core = buffered_core()
    low = submit(core, 0, now=1.0)
    later_low = submit(core, 0, now=2.0)
    high = submit(core, 5, now=3.0)
    # The high-priority arrival waits: the running low-priority job is never evicted.
    assert states(core, low, later_low, high) == [
        JobState.STARTING,
        JobState.SUBMITTED,
        JobState.SUBMITTED,
    ]
    finish(core, low, now=4.0)
    assert states(core, later_low, high) == [JobState.SUBMITTED, JobState.STARTING]
    finish(core, high, now=5.0)
    assert states(core, later_low) == [JobState.STARTING]


def test_a_job_in_execution_counts_until_it_ends_and_a_kill_frees_its_place() -> None:
    core = buffered_core()
    first, second = submit(core, 0, now=1.0), submit(core, 0, now=2.0)
    core.register_master(first, attempt=1, now=3.0)  # RUNNING still counts
    assert states(core, first, second) == [JobState.RUNNING, JobState.SUBMITTED]
    core.kill(first, now=4.0)
    core.finish_job(first, JobState.KILLED, "killed", (), now=4.0)
    assert states(core, second) == [JobState.STARTING]


@pytest.mark.parametrize("mode", [DIAS, DispatchMode.PREEMPTIVE])
def test_client_mode_would_bypass_the_buffers_and_is_refused(mode: DispatchMode) -> None:
    core = buffered_core(mode=mode)
    with pytest.raises(ConflictError, match=r"client mode: .*--dispatch"):
        core.submit(spec_of(), client_mode=True, now=1.0)
    assert core.list_jobs() == []


@pytest.mark.parametrize(("mode", "taken"), [(DispatchMode.PRIORITY, 1), (DIAS, 0)])
def test_under_dias_the_queues_preemption_is_off(mode: DispatchMode, taken: int) -> None:
    """A short job that fits nowhere preempts the long queue under priority dispatch, and
    waits under dias: nothing running is taken from."""
    queues = parse_queue_config(
        {
            "default": "long",
            "queues": {"short": {"share": 0.95}, "long": {"share": 0.05, "mode": "kill"}},
        }
    )
    settings = CoreSettings(
        preemption_interval=0.0, dispatch=mode, max_running_jobs=2, max_master_share=1.0
    )
    core = Driver(ResourceManagerCore(Tables(SqliteStore(":memory:")), settings, queues=queues))
    core.register_node("n1", "n1:1", "process", res(4.2, 4608), [], now=0.0)

    def started(queue: str, tasks: int, now: float) -> str:
        spec = job_spec(phase_doc("p", tasks, cpu=1.0, memory_mb=1024), name=queue)
        job = core.submit(replace(spec, queue=queue), client_mode=False, now=now)
        core.register_master(job.job_id, attempt=1, now=now)
        asks = [want(tasks, cpu=1.0, memory_mb=1024)]
        granted = core.allocate(job.job_id, asks, [], [], 0, now=now).granted
        reports = [
            observation(job.job_id, f"p-{i}", TaskState.RUNNING, allocation_id=a.allocation_id)
            for i, a in enumerate(granted)
        ]
        core.report_events("n1", reports, now=now)
        return str(job.job_id)

    long_job = started("long", 4, now=1.0)
    started("short", 1, now=2.0)
    held = [a for a in core.tables.allocations_of_job(long_job) if not a.is_master]
    assert len(held) == 4
    assert sum(a.goal is not Goal.RUN for a in held) == taken


PREEMPTIVE = DispatchMode.PREEMPTIVE


def running_with_tasks(core: Driver, job_id: str, tasks: int, now: float) -> list[str]:
    """Register the job's master and start ``tasks`` tasks; their allocation ids."""
    attempt = core.job(job_id).master_attempt
    core.register_master(job_id, attempt=attempt, now=now)
    granted = core.allocate(job_id, [want(tasks)], [], [], 0, now=now, attempt=attempt).granted
    reports = [
        observation(job_id, f"p-{i}", TaskState.RUNNING, allocation_id=a.allocation_id)
        for i, a in enumerate(granted)
    ]
    core.report_events("n1", reports, now=now)
    return [a.allocation_id for a in granted]


def test_preemptive_evicts_the_lower_priority_job_back_to_the_head_of_its_buffer() -> None:
    core = buffered_core(mode=PREEMPTIVE)
    low = submit(core, 0, now=1.0)
    containers = running_with_tasks(core, low, 2, now=2.0)
    later_low = submit(core, 0, now=3.0)
    high = submit(core, 5, now=10.0)

    evicted = core.job(low)
    assert states(core, low, later_low, high) == [
        JobState.SUBMITTED,
        JobState.SUBMITTED,
        JobState.STARTING,
    ]
    assert (evicted.execution.number, evicted.execution.evictions) == (2, 1)
    # Dispatched at 1 (its job master's container granted), evicted at 10.
    assert evicted.execution.wasted_s == pytest.approx(9.0)
    assert "evicted for job" in evicted.message
    # Decided as a plan, after the pass that left the high-priority job waiting.
    (eviction,) = [e for plan in core.plans for e in plan.evictions]
    assert eviction == Eviction(low, f"evicted for job {high} of priority 5")
    killed = [t for t in core.job_tasks(low) if t.execution == 1]
    assert [(t.state, t.preempted) for t in killed] == [(TaskState.KILLED, True)] * 2
    assert not any(a in core.allocations for a in containers)
    # The node is told to stop the evicted job's tasks and its job master.
    master = [a.allocation_id for a in core.tables.allocations_of_job(low) if a.is_master]
    live = [
        observation(low, "master", TaskState.RUNNING, allocation_id=master[0], job_master=True),
        *(
            observation(low, f"p-{i}", TaskState.RUNNING, allocation_id=a)
            for i, a in enumerate(containers)
        ),
    ]
    stops = [c for c in commands(core, "n1", now=10.5, live=live) if isinstance(c, StopAllocation)]
    assert sorted(c.allocation_id for c in stops) == sorted([*master, *containers])
    assert any("evicted for job" in c.reason for c in stops)
    # The evicted job's master is superseded: what it still sends is refused.
    with pytest.raises(ConflictError, match="is gone"):
        core.allocate(low, [want(1)], [], [], 0, now=11.0, attempt=1)

    finish(core, high, now=20.0)
    # Back at the head of its buffer: before the low-priority job submitted after it.
    assert states(core, low, later_low) == [JobState.STARTING, JobState.SUBMITTED]
    registration = core.register_master(low, attempt=core.job(low).master_attempt, now=21.0)
    assert registration.job.execution.number == 2
    assert {t.execution for t in registration.history} == {1}


def test_an_eviction_uses_up_no_job_master_attempt() -> None:
    core = buffered_core(mode=PREEMPTIVE)  # max_master_attempts 2
    low = submit(core, 0, now=1.0)
    for round_ in range(3):
        start = 10.0 * round_ + 2.0
        running_with_tasks(core, low, 1, now=start)
        high = submit(core, 5, now=start + 1)
        assert core.job(low).state is JobState.SUBMITTED
        finish(core, high, now=start + 2)
    assert core.job(low).execution.evictions == 3
    assert core.job(low).state is JobState.STARTING


@pytest.mark.parametrize(("mode", "evicted"), [(DIAS, False), (PREEMPTIVE, True)])
def test_only_preemptive_evicts_and_never_for_an_equal_priority(
    mode: DispatchMode, evicted: bool
) -> None:
    core = buffered_core(mode=mode)
    low = submit(core, 1, now=1.0)
    running_with_tasks(core, low, 1, now=2.0)
    submit(core, 1, now=3.0)  # equal: waits either way
    assert core.job(low).state is JobState.RUNNING
    submit(core, 2, now=4.0)
    assert (core.job(low).state is JobState.SUBMITTED) is evicted


def test_an_evicted_jobs_executions_survive_an_rm_restart(tmp_path: Path) -> None:
    path = tmp_path / "rm.db"
    settings: dict[str, Any] = {"dispatch": PREEMPTIVE, "max_master_share": 1.0}
    core = new_core(path, **settings)
    add_node(core, "n1", cpu=16, memory_mb=16384)
    low = submit(core, 0, now=1.0)
    running_with_tasks(core, low, 2, now=2.0)
    submit(core, 5, now=10.0)
    before = core.job(low)

    restarted = new_core(path, **settings)
    assert restarted.job(low).execution == before.execution
    assert [t.execution for t in restarted.job_tasks(low)] == [1, 1]


def test_the_buffers_survive_an_rm_restart(tmp_path: Path) -> None:
    path = tmp_path / "rm.db"
    settings: dict[str, Any] = {"dispatch": DIAS, "max_master_share": 1.0}
    core = new_core(path, **settings)
    add_node(core, "n1", cpu=16, memory_mb=16384)
    running = submit(core, 0, now=1.0)
    waiting = [submit(core, 0, now=2.0), submit(core, 5, now=3.0), submit(core, 5, now=4.0)]

    restarted = new_core(path, **settings)
    add_node(restarted, "n1", cpu=16, memory_mb=16384, now=5.0)
    assert states(restarted, *waiting) == [JobState.SUBMITTED] * 3
    order = []
    for now in (6.0, 7.0, 8.0, 9.0):
        job_id = next(j for j in [running, *waiting] if restarted.job(j).state is JobState.STARTING)
        order.append(job_id)
        finish(restarted, job_id, now=now)
    assert order == [running, waiting[1], waiting[2], waiting[0]]
