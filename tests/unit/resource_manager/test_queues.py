"""Queues in the RM core: fair shares, the BIG-C post-filter, claims, delayed resumption, and
the longest suspension; driven through the core's entry points as the services call them."""

from __future__ import annotations

from typing import Any

import pytest

from plumbing.node_protocol import (
    ResizeAllocation,
    ResumeAllocation,
    StopAllocation,
    SuspendAllocation,
    TaskReport,
)
from policies.preemption.queues import QueueError, parse_queue_config
from policies.scheduling.containers import Goal, Shown
from policies.scheduling.framework import Resumption
from policies.scheduling.jobspec import SpecError
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import AllocationRecord
from resource_manager.sqlite_store import SqliteStore
from resource_manager.tables import Tables
from tests.builders import job_spec, observation, phase_doc, res
from tests.unit.resource_manager.harness import Driver, at, want

SHORT = want(1, cpu=0.5, memory_mb=512)


def queues_doc(long_mode: str = "immediate", **long_fields: Any) -> dict[str, object]:
    return {
        "default": "long",
        "queues": {
            "short": {"share": 0.95},
            "long": {"share": 0.05, "mode": long_mode, **long_fields},
        },
    }


def queued_core(
    long_mode: str = "immediate", *, swap: bool = True, path: str = ":memory:", **long: Any
) -> Driver:
    core = Driver(
        ResourceManagerCore(
            Tables(SqliteStore(path)),
            CoreSettings(preemption_interval=0.0, node_timeout=1000.0),
            queues=parse_queue_config(queues_doc(long_mode, **long)),
        )
    )
    core.register_node("n1", "n1:1", "process", res(4.0, 4096), [], now=0.0, has_swap=swap)
    return core


def run_job(
    core: Driver, queue: str, tasks: int, *, now: float, cpu: float = 1.0, memory_mb: int = 1024
) -> str:
    spec = job_spec(phase_doc("p", tasks, cpu=cpu, memory_mb=memory_mb), name=queue)
    spec = type(spec)(**{**spec.__dict__, "queue": queue})
    job = core.submit(spec, client_mode=True, now=now)
    core.register_master(job.job_id, attempt=1, now=now)
    return str(job.job_id)


def start_all(
    core: Driver, job_id: str, tasks: int, *, now: float, cpu: float = 1.0, memory_mb: int = 1024
) -> None:
    """Ask for ``tasks`` containers and report a task running in each granted one."""
    granted = core.allocate(
        job_id, [want(tasks, cpu=cpu, memory_mb=memory_mb)], [], [], 0, now=now
    ).granted
    core.report_events(
        "n1", [running(a.job_id, a.allocation_id, i) for i, a in enumerate(granted)], now=now
    )


def running(job_id: str, allocation_id: str, index: int = 0, **changes: Any) -> TaskReport:
    report = observation(job_id, f"p-{index}", TaskState.RUNNING, allocation_id=allocation_id)
    return TaskReport(**{**report.__dict__, **changes})


def containers(core: Driver, job_id: str) -> list[AllocationRecord]:
    return [a for a in core.tables.allocations_of_job(job_id) if not a.is_master]


def assert_queue_totals(core: Driver) -> None:
    """What the tables keep per queue is what a recount of the containers gives."""
    for queue in ("short", "long"):
        mine = [a for a in core.allocations.values() if core.queues.spec_of(a.job_id).name == queue]
        held = sum((a.holds for a in mine), res(0, 0))
        taking = sum((a.holds - a.settles_at for a in mine if a.preempted_at), res(0, 0))
        kept_held, kept_taking = core.tables.held_by_queue(queue)
        assert kept_held.memory_mb == held.memory_mb and abs(kept_held.cpu - held.cpu) < 1e-9
        assert kept_taking.memory_mb == taking.memory_mb
        assert abs(kept_taking.cpu - taking.cpu) < 1e-9


def full_cluster(core: Driver) -> str:
    """A long job holding all of n1 (4 × ⟨1 cpu, 1 GiB⟩), every task running."""
    long_job = run_job(core, "long", 4, now=1.0)
    start_all(core, long_job, 4, now=1.0)
    return long_job


def test_a_job_naming_an_unknown_queue_is_refused_with_the_queues_named():
    core = queued_core()
    spec = job_spec(phase_doc("p", 1))
    spec = type(spec)(**{**spec.__dict__, "queue": "batch"})
    with pytest.raises(SpecError, match=r"queue: unknown queue 'batch' \(queues: short, long\)"):
        core.submit(spec, client_mode=True, now=1.0)


@pytest.mark.parametrize(
    ("mode", "goal", "limits"),
    [
        ("immediate", Goal.SUSPEND, res(0.01, 64)),
        ("kill", Goal.STOP, None),
        ("graceful", Goal.SHRINK, res(0.5, 512)),
    ],
)
def test_a_short_job_that_fits_nowhere_preempts_the_long_queue_in_its_mode(mode, goal, limits):
    core = queued_core(mode, graceful_step={"cpu": 1, "memory_mb": 1024})
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    preempted = [a for a in containers(core, long_job) if a.goal is not Goal.RUN]
    if goal is Goal.STOP:  # a killed container stays until its task is shown stopped
        assert [a.goal for a in preempted] == [Goal.STOP]
        return
    assert [(a.goal, a.limits) for a in preempted] == [(goal, limits)]
    # the last granted container is taken first (it has the least work to lose)
    assert (
        preempted[0].allocation_id
        == max(containers(core, long_job), key=lambda a: a.granted_time).allocation_id
        or len({a.granted_time for a in containers(core, long_job)}) == 1
    )


def test_immediate_suspends_to_the_footprint_and_the_freed_capacity_goes_to_the_short_queue():
    core = queued_core("immediate")
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    (victim,) = [a for a in containers(core, long_job) if a.goal is Goal.SUSPEND]
    live = [running(long_job, a.allocation_id, i) for i, a in enumerate(containers(core, long_job))]
    _, sent = core.heartbeat("n1", res(0, 0), live, now=3.0)
    assert (
        SuspendAllocation(long_job, victim.allocation_id, victim.goal_reason, res(0.01, 64)) in sent
    )
    # frozen, memory not yet swapped out: its memory still counts as held, nothing is placed
    live = [
        running(long_job, a.allocation_id, i, state=TaskState.SUSPENDED)
        if a.allocation_id == victim.allocation_id
        else running(long_job, a.allocation_id, i)
        for i, a in enumerate(containers(core, long_job))
    ]
    core.heartbeat("n1", res(0, 0), live, now=4.0)
    assert not containers(core, short_job)
    # a long-queue ask may not take what is being freed for the short queue
    assert core.book.claimed_for("short") == res(1.0, 1024 - 64)  # frozen: no CPU held
    # the node shows it cut to the footprint: the short job gets its container
    live = [
        running(long_job, a.allocation_id, i, state=TaskState.SUSPENDED, limits=res(0.01, 64))
        if a.allocation_id == victim.allocation_id
        else running(long_job, a.allocation_id, i)
        for i, a in enumerate(containers(core, long_job))
    ]
    core.heartbeat("n1", res(0, 0), live, now=5.0)
    core.allocate(short_job, [SHORT], [], [], 0, now=5.0)
    assert len(containers(core, short_job)) == 1
    # what is left of the claim goes once the short queue wants nothing more
    core.heartbeat("n1", res(0, 0), live, now=6.0)
    assert core.book.claimed_for("short") == res(0.0, 0)
    steps = [s.action for t in core.tables.tasks_of_job(long_job) for s in t.preemptions]
    assert steps == ["suspended", "swapped out"]
    assert_queue_totals(core)


def test_a_suspended_container_resumes_after_declining_d_offers_limits_first():
    core = queued_core("immediate", resume_after_offers=2)
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    (victim,) = [a for a in containers(core, long_job) if a.goal is Goal.SUSPEND]

    def live() -> list[TaskReport]:
        return [
            running(long_job, a.allocation_id, i, state=TaskState.SUSPENDED, limits=res(0.01, 64))
            if a.allocation_id == victim.allocation_id
            else running(long_job, a.allocation_id, i)
            for i, a in enumerate(containers(core, long_job))
        ]

    core.heartbeat("n1", res(0, 0), live(), now=3.0)
    core.allocate(short_job, [SHORT], [], [], 0, now=3.0)
    assert len(containers(core, short_job)) == 1
    core.finish_job(short_job, JobState.SUCCEEDED, "", [], now=4.0)
    # the short job is done: room for the grant; two fitting offers are declined first
    verdicts = []
    for t in (5.0, 6.0, 7.0):
        _, sent = core.heartbeat("n1", res(0, 0), live(), now=t)
        verdicts.append([c for c in sent if isinstance(c, ResumeAllocation)])
    assert verdicts[:2] == [[], []]
    assert verdicts[2] == [ResumeAllocation(long_job, victim.allocation_id, res(1.0, 1024))]
    resumed = [r for plan in core.plans for r in plan.resumptions]
    assert resumed == [
        Resumption(victim.allocation_id, "offered room on n1 after declining 2 offers")
    ]
    assert core.allocations[victim.allocation_id].goal is Goal.RUN
    assert core.allocations[victim.allocation_id].preempted_at == 0.0
    assert_queue_totals(core)


def test_graceful_steps_are_sent_with_the_queue_step_and_a_swap_freeze_frees_cpu():
    core = queued_core("graceful", graceful_step={"cpu": 0.5, "memory_mb": 256})
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    shrinking = [a for a in containers(core, long_job) if a.goal is Goal.SHRINK]
    assert shrinking
    live = [running(long_job, a.allocation_id, i) for i, a in enumerate(containers(core, long_job))]
    _, sent = core.heartbeat("n1", res(0, 0), live, now=3.0)
    resizes = [c for c in sent if isinstance(c, ResizeAllocation)]
    assert resizes and all(c.step == res(0.5, 256) and c.freeze_on_swap for c in resizes)
    # the node froze one on swapping: it holds no CPU and the memory it was shown at
    first = shrinking[0]
    live = [
        running(long_job, a.allocation_id, i, state=TaskState.SUSPENDED, limits=res(0.5, 768))
        if a.allocation_id == first.allocation_id
        else running(long_job, a.allocation_id, i)
        for i, a in enumerate(containers(core, long_job))
    ]
    _, sent = core.heartbeat("n1", res(0, 0), live, now=4.0)
    frozen = core.allocations[first.allocation_id]
    assert frozen.shown is Shown.SUSPENDED and frozen.holds == res(0.0, 768)
    assert not [c for c in sent if getattr(c, "allocation_id", "") == first.allocation_id]
    assert_queue_totals(core)


@pytest.mark.parametrize(
    ("short_memory", "expected"),
    [
        (256, Goal.SUSPEND),  # 1 GiB free: CPU is what is needed, frozen with its memory
        (2048, Goal.STOP),  # memory is what is needed: without swap, killed
    ],
)
def test_without_swap_only_cpu_is_taken_alive_and_memory_needs_a_kill(short_memory, expected):
    core = queued_core("immediate", swap=False)
    long_job = run_job(core, "long", 4, now=1.0, memory_mb=768)
    start_all(core, long_job, 4, now=1.0, memory_mb=768)
    short_job = run_job(core, "short", 1, now=2.0, memory_mb=short_memory)
    core.allocate(short_job, [want(1, memory_mb=short_memory)], [], [], 0, now=2.0)
    preempted = [a for a in containers(core, long_job) if a.goal is not Goal.RUN]
    assert preempted and all(a.goal is expected for a in preempted)
    if expected is Goal.SUSPEND:
        assert all(a.limits is None for a in preempted)


def test_a_container_suspended_longer_than_its_queue_allows_is_killed_and_retried():
    core = queued_core("immediate", max_suspended_s=30)
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    (victim,) = [a for a in containers(core, long_job) if a.goal is Goal.SUSPEND]
    core.tick(20.0)
    assert core.allocations[victim.allocation_id].goal is Goal.SUSPEND
    assert core.next_wakeup() is not None
    core.tick(40.0)
    assert core.allocations[victim.allocation_id].goal is Goal.STOP
    live = [running(long_job, a.allocation_id, i) for i, a in enumerate(containers(core, long_job))]
    _, sent = core.heartbeat("n1", res(0, 0), live, now=41.0)
    (stop,) = [c for c in sent if isinstance(c, StopAllocation)]
    assert "max_suspended_s" in stop.reason


def test_a_reload_that_drops_a_queue_in_use_is_refused_and_changes_nothing():
    core = queued_core()
    full_cluster(core)
    smaller = parse_queue_config({"queues": {"short": {"share": 1.0}}})
    with pytest.raises(QueueError, match="queue 'long' is gone"):
        core.set_queues(smaller, source="q.yaml", now=5.0)
    assert [q.name for q in core.book.config.queues] == ["short", "long"]


def test_preemption_goals_and_times_survive_an_rm_restart(tmp_path):
    path = str(tmp_path / "rm.db")
    core = queued_core("immediate", path=path)
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=2.0, cpu=0.5, memory_mb=512)
    core.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    (victim,) = [a for a in containers(core, long_job) if a.goal is Goal.SUSPEND]
    again = ResourceManagerCore(
        Tables(SqliteStore(path)), queues=parse_queue_config(queues_doc("immediate"))
    )
    restored = again.allocations[victim.allocation_id]
    assert (restored.goal, restored.limits, restored.preempted_at) == (
        Goal.SUSPEND,
        res(0.01, 64),
        2.0,
    )
    assert [a.allocation_id for a in again.tables.preempted_of_node("n1")] == [victim.allocation_id]


def test_decisions_are_spaced_by_the_preemption_interval():
    core = Driver(
        ResourceManagerCore(
            Tables(SqliteStore(":memory:")),
            CoreSettings(preemption_interval=3.0, node_timeout=100.0),
            queues=parse_queue_config(queues_doc("kill")),
        )
    )
    core.register_node("n1", "n1:1", "process", res(4.0, 4096), [], now=0.0, has_swap=True)
    long_job = full_cluster(core)
    first = run_job(core, "short", 1, now=10.0)
    core.allocate(first, [want(1, memory_mb=1024)], [], [], 0, now=10.0)
    assert len([a for a in containers(core, long_job) if a.goal is Goal.STOP]) == 1
    second = run_job(core, "short", 1, now=11.0)
    core.allocate(second, [want(1, memory_mb=1024)], [], [], 0, now=11.0)
    assert len([a for a in containers(core, long_job) if a.goal is Goal.STOP]) == 1
    assert core.book.wanted
    assert core.next_wakeup() == pytest.approx(13.0)
    core.tick(at(13.0))
    assert len([a for a in containers(core, long_job) if a.goal is Goal.STOP]) == 2


def test_after_a_restart_no_container_is_preempted_on_a_node_that_has_not_registered(tmp_path):
    """A restarted RM knows no node until it registers: whether it can swap is unknown, and
    a suspension there was taken for a kill (seen live: an RM restart killed a task that a
    suspension would have kept)."""
    path = str(tmp_path / "rm.db")
    core = queued_core("immediate", path=path)
    long_job = full_cluster(core)
    short_job = run_job(core, "short", 1, now=1.5, cpu=0.5, memory_mb=512)
    again = Driver(
        ResourceManagerCore(
            Tables(SqliteStore(path)),
            CoreSettings(preemption_interval=0.0, node_timeout=1000.0),
            queues=parse_queue_config(queues_doc("immediate")),
        )
    )
    # n2 is back, too small for the short job's ask; n1, which holds the long job, is not yet
    again.register_node("n2", "n2:1", "process", res(0.25, 256), [], now=2.0, has_swap=True)
    again.allocate(short_job, [SHORT], [], [], 0, now=2.0)
    assert all(a.goal is Goal.RUN for a in containers(again, long_job))
    # once n1 registers with its tasks, the preemption is the queue's: a suspension
    live = [
        running(long_job, a.allocation_id, i) for i, a in enumerate(containers(again, long_job))
    ]
    again.register_node("n1", "n1:1", "process", res(4.0, 4096), live, now=3.0, has_swap=True)
    again.allocate(short_job, [SHORT], [], [], 0, now=3.0)
    assert {a.goal for a in containers(again, long_job)} == {Goal.RUN, Goal.SUSPEND}
