"""Preemptions, resumptions and resizes: the core sets a container's goal, re-sends the command
with every heartbeat until the node shows it done, and counts capacity as the node shows it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from plumbing.node_protocol import (
    ResizeAllocation,
    ResumeAllocation,
    StopAllocation,
    SuspendAllocation,
    TaskReport,
)
from policies.scheduling.framework import (
    PassContext,
    PendingAsk,
    Preemption,
    PreemptionAction,
    Resize,
    Resumption,
    baseline_profile,
)
from policies.scheduling.lifecycle import TaskState
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.errors import ConflictError, NotFoundError
from resource_manager.records import Goal, Shown, evolve
from resource_manager.sqlite_store import SqliteStore
from resource_manager.tables import Tables
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

SUSPEND = PreemptionAction.SUSPEND
KILL = PreemptionAction.KILL
SHRINK = PreemptionAction.SHRINK


def one_running(core: Driver, *, cpu: float = 2.0, memory_mb: int = 1024) -> tuple[str, str]:
    """A job with one container on n1 whose task runs: (job id, allocation id)."""
    job_id = running_job(core, spec_of(1, cpu=cpu, memory_mb=memory_mb))
    (allocation,) = core.allocate(
        job_id, [want(1, cpu=cpu, memory_mb=memory_mb)], [], [], 0, now=1.0
    ).granted
    core.report_events("n1", [report(job_id, allocation.allocation_id)], now=1.0)
    return job_id, allocation.allocation_id


def report(
    job_id: str,
    allocation_id: str,
    state: TaskState = TaskState.RUNNING,
    limits: object = None,
) -> TaskReport:
    return observation(
        job_id,
        "p-0",
        state,
        allocation_id=allocation_id,
        limits=limits,  # type: ignore[arg-type]
    )


def test_a_suspension_is_resent_until_shown_and_frees_cpu_only_then():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core)
    assert core.preempt(Preemption(allocation_id, SUSPEND, "queue a needs room"), now=2.0)
    running = [report(job_id, allocation_id)]
    for t in (3.0, 4.0):  # every heartbeat that still shows it running is told again
        assert commands(core, "n1", now=t, live=running) == [
            SuspendAllocation(job_id, allocation_id, "queue a needs room")
        ]
        assert core.node_allocated("n1") == res(2.0, 1024)  # not free before the freeze shows
    frozen = [report(job_id, allocation_id, TaskState.SUSPENDED)]
    assert commands(core, "n1", now=5.0, live=frozen) == []
    assert core.node_allocated("n1") == res(0.0, 1024)  # its memory stays put
    assert core.allocations[allocation_id].free_for_others == res(2.0, 0)
    assert core.tasks[(job_id, "p-0", 1)].state is TaskState.SUSPENDED  # the job master sees it


def test_a_resumption_takes_the_cpu_back_at_once_and_is_resent_until_shown():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core)
    core.preempt(Preemption(allocation_id, SUSPEND, "room"), now=2.0)
    frozen = [report(job_id, allocation_id, TaskState.SUSPENDED)]
    commands(core, "n1", now=3.0, live=frozen)
    assert core.resume(Resumption(allocation_id), now=4.0)
    assert core.node_allocated("n1") == res(2.0, 1024)
    for t in (5.0, 6.0):
        assert commands(core, "n1", now=t, live=frozen) == [
            ResumeAllocation(job_id, allocation_id, res(2.0, 1024))  # the grant, spelled out
        ]
    assert commands(core, "n1", now=7.0, live=[report(job_id, allocation_id)]) == []
    assert core.allocations[allocation_id].goal is Goal.RUN


def test_a_resumption_waits_while_the_node_has_no_room_for_the_grant():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core, cpu=3.0)
    core.preempt(Preemption(allocation_id, SUSPEND, "room"), now=2.0)
    commands(core, "n1", now=3.0, live=[report(job_id, allocation_id, TaskState.SUSPENDED)])
    other = running_job(core, spec_of(1, cpu=3.0, memory_mb=1024), now=4.0)
    assert (
        len(core.allocate(other, [want(1, cpu=3.0, memory_mb=1024)], [], [], 0, now=4.0).granted)
        == 1
    )
    with pytest.raises(ConflictError, match="n1 has no room for 3 cpu, 1024 MiB"):
        core.resume(Resumption(allocation_id), now=5.0)
    assert core.allocations[allocation_id].goal is Goal.SUSPEND


def test_a_shrink_holds_the_grant_until_the_node_shows_the_lower_limits():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core)
    limits = res(0.5, 1024)
    assert core.preempt(Preemption(allocation_id, SHRINK, "graceful step", limits), now=2.0)
    assert commands(core, "n1", now=3.0, live=[report(job_id, allocation_id)]) == [
        ResizeAllocation(job_id, allocation_id, limits)
    ]
    assert core.node_allocated("n1") == res(2.0, 1024)
    shrunk = [report(job_id, allocation_id, limits=limits)]
    assert commands(core, "n1", now=4.0, live=shrunk) == []
    assert core.node_allocated("n1") == res(0.5, 1024)
    # growing back to the grant is a resize to the grant
    assert core.resize(Resize(allocation_id, res(2.0, 1024)), now=5.0)
    assert core.node_allocated("n1") == res(2.0, 1024)
    assert commands(core, "n1", now=6.0, live=shrunk) == [
        ResizeAllocation(job_id, allocation_id, res(2.0, 1024))
    ]


def test_a_kill_by_preemption_takes_the_container_back_and_marks_the_attempt():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core)
    assert core.preempt(Preemption(allocation_id, KILL, "queue a is short"), now=2.0)
    running = [report(job_id, allocation_id)]
    for t in (3.0, 4.0):
        assert commands(core, "n1", now=t, live=running) == [
            StopAllocation(job_id, allocation_id, "preempted: queue a is short", preempted=True)
        ]
    core.report_events("n1", [report(job_id, allocation_id, TaskState.KILLED)], now=5.0)
    assert allocation_id not in core.allocations
    assert core.node_allocated("n1") == res(0.0, 0)
    answer = core.allocate(job_id, [], [], [], 0, now=6.0)
    assert answer.lost_allocations == (allocation_id,)
    (killed,) = [t for t in answer.events if t.state is TaskState.KILLED]
    assert killed.preempted
    assert killed.message == "preempted: queue a is short"


def test_a_task_that_ends_by_itself_before_the_kill_is_not_preempted():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core)
    core.preempt(Preemption(allocation_id, KILL, "room"), now=2.0)
    core.report_events("n1", [report(job_id, allocation_id, TaskState.SUCCEEDED)], now=3.0)
    assert not core.tasks[(job_id, "p-0", 1)].preempted


def test_killing_an_idle_container_takes_it_back_at_once():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job_id = running_job(core, spec_of(1, cpu=2.0))
    (allocation,) = core.allocate(job_id, [want(1, cpu=2.0)], [], [], 0, now=1.0).granted
    assert core.preempt(Preemption(allocation.allocation_id, KILL, "room"), now=2.0) is None
    assert allocation.allocation_id not in core.allocations
    assert core.allocate(job_id, [], [], [], 0, now=3.0).lost_allocations == (
        allocation.allocation_id,
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            lambda a: Preemption(a, SHRINK, "too big", res(3.0, 1024)),
            "limits of 3 cpu, 1024 MiB must be positive and within its grant of 2 cpu, 1024 MiB",
            id="above-grant",
        ),
        pytest.param(
            lambda a: Preemption(a, SHRINK, "zero", res(0.0, 1024)),
            "must be positive",
            id="zero-cpu",
        ),
        pytest.param(lambda a: Preemption(a, SHRINK, "no limits"), "needs limits", id="no-limits"),
        pytest.param(
            lambda a: Preemption("job-9-a1", SUSPEND, "who?"),
            "no task container 'job-9-a1'",
            id="unknown",
        ),
    ],
)
def test_changes_that_do_not_hold_are_refused_and_change_nothing(change, problem):
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    _, allocation_id = one_running(core)
    before = core.allocations[allocation_id]
    with pytest.raises((ConflictError, NotFoundError), match=problem):
        core.preempt(change(allocation_id), now=2.0)
    assert core.allocations[allocation_id] == before


def test_a_stopped_container_cannot_be_resumed_and_a_job_master_is_never_preempted():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    job = core.submit(spec_of(1), client_mode=False, now=1.0)
    master_allocation = core.job(job.job_id).master_allocation
    assert master_allocation
    with pytest.raises(NotFoundError, match="no task container"):
        core.preempt(Preemption(master_allocation, KILL, "no"), now=2.0)
    _, allocation_id = one_running(core)
    core.preempt(Preemption(allocation_id, KILL, "room"), now=3.0)
    with pytest.raises(ConflictError, match="goal stop -> run is not allowed"):
        core.resume(Resumption(allocation_id), now=4.0)
    assert core.allocations[allocation_id].goal is Goal.STOP


def test_goals_and_what_nodes_showed_survive_a_restart(tmp_path: Path):
    path = tmp_path / "state.db"
    core = new_core(path)
    add_node(core, "n1", 4.0, 4096)
    job_id, allocation_id = one_running(core)
    core.preempt(Preemption(allocation_id, SHRINK, "step", res(1.0, 512)), now=2.0)
    commands(core, "n1", now=3.0, live=[report(job_id, allocation_id, limits=res(1.0, 512))])
    before = core.allocations[allocation_id]
    assert (before.goal, before.shown, before.holds) == (Goal.RUN, Shown.RUNNING, res(1.0, 512))
    reopened = Tables(SqliteStore(path))
    assert reopened.allocations[allocation_id] == before


@dataclass
class SuspendToFit:
    """A post-filter that suspends the first container it is given, once nothing fits."""

    victims: list[str]
    asked: list[PendingAsk] = field(default_factory=list)
    name: ClassVar[str] = "SuspendToFit"

    def preempt(self, ask: PendingAsk, context: PassContext) -> list[Preemption]:
        self.asked.append(ask)
        return [Preemption(v, SUSPEND, f"for {ask.job_id}") for v in self.victims]


def test_a_pass_suspends_what_its_post_filter_chooses_and_places_once_the_freeze_shows():
    victims: list[str] = []
    plugin = SuspendToFit(victims)
    profile = dataclasses.replace(baseline_profile(), post_filters=(plugin,))
    core = Driver(
        ResourceManagerCore(Tables(SqliteStore(":memory:")), CoreSettings(), profile=profile)
    )
    add_node(core, "n1", 4.0, 4096)
    low, allocation_id = one_running(core, cpu=4.0)
    victims.append(allocation_id)
    high = running_job(core, spec_of(1, cpu=2.0, priority=5), now=2.0)
    assert core.allocate(high, [want(1, cpu=2.0)], [], [], 0, now=2.0).granted == ()
    assert plugin.asked and plugin.asked[0].job_id == high
    assert core.allocations[allocation_id].goal is Goal.SUSPEND
    assert commands(core, "n1", now=3.0, live=[report(low, allocation_id)]) == [
        SuspendAllocation(low, allocation_id, f"for {high}")
    ]
    assert core.allocate(high, [want(1, cpu=2.0)], [], [], 0, now=3.5).granted == ()
    commands(core, "n1", now=4.0, live=[report(low, allocation_id, TaskState.SUSPENDED)])
    (granted,) = core.allocate(high, [want(1, cpu=2.0)], [], [], 0, now=5.0).granted
    assert granted.node_id == "n1"
    assert core.node_allocated("n1") == res(2.0, 1024 + 256)


def test_evolve_copies_a_record_with_fields_replaced_and_refuses_unknown_ones():
    core = new_core()
    add_node(core, "n1", 4.0, 4096)
    _, allocation_id = one_running(core)
    allocation = core.allocations[allocation_id]
    shrunk = evolve(allocation, limits=res(1.0, 512))
    assert shrunk == dataclasses.replace(allocation, limits=res(1.0, 512))
    assert allocation.limits is None  # the original is untouched
    with pytest.raises(TypeError, match="AllocationRecord has no field 'limit'"):
        evolve(allocation, limit=res(1.0, 512))
