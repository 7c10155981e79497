"""What a restarted RM does with the nodes its recovered state puts work on (issue 27, item 7).

* Nodes are kept in memory only: a node that held work when the RM restarted is silent since the
  RM's start, and lost after the node timeout (its tasks retried or failed as their job says, its
  containers freed), unless it registers before; then its registration reconciles.
* A registration's snapshot of live tasks may predate task events of the same agent process
  that reached the RM first: what that process reported ahead of its registration is not lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from plumbing.node_protocol import LaunchMaster, TaskReport
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.errors import InvalidRequestError
from resource_manager.records import NodeState
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

TIMEOUT = 10.0
START = 100.0  # when the restarted RM starts (both clocks)


def _register(
    core: Driver,
    live: Sequence[TaskReport] = (),
    *,
    now: float,
    session: str = "",
    node_id: str = "n1",
) -> None:
    core.register_node(
        node_id, f"{node_id}:7000", "process", res(2.0, 4096), list(live), now=now, session=session
    )


def _before_restart(path: Path) -> tuple[str, list[str]]:
    """n1 runs task p-0 of a client-mode job in one container and holds a second container,
    granted to p-1 and not yet started; the RM stops.  Returns (job, [p-0's, p-1's])."""
    core = new_core(path, node_timeout=TIMEOUT)
    _register(core, now=0.0, session="before")
    job_id = running_job(core, spec_of(2, cpu=1.0))
    allocations = [
        a.allocation_id for a in core.allocate(job_id, [want(2)], [], [], 0, now=1.0).granted
    ]
    core.report_events(
        "n1",
        [observation(job_id, "p-0", TaskState.RUNNING, allocation_id=allocations[0])],
        now=2.0,
        session="before",
    )
    core.core.tables._store.close()
    return job_id, allocations


def _restarted(path: Path) -> Driver:
    core = new_core(path, node_timeout=TIMEOUT)
    core.started(now=START)
    return core


# ------------------------------------------------------------------------- a node never back


@pytest.mark.parametrize(
    ("case", "registers_at", "reports_task", "task_after"),
    [
        # never registers: lost at the node timeout after the RM's start, as a silent node is
        ("never back", None, False, (TaskState.LOST, "node n1 lost")),
        # back in time, still running its task: adopted, nothing lost then or later
        ("back with its task", START + 5.0, True, (TaskState.RUNNING, "")),
        # back in time and empty: the registration loses what it no longer holds
        ("back empty", START + 5.0, False, (TaskState.LOST, "node n1 restarted without it")),
    ],
)
def test_a_node_holding_work_after_an_rm_restart_is_lost_unless_it_registers_in_time(
    tmp_path: Path,
    case: str,
    registers_at: float | None,
    reports_task: bool,
    task_after: tuple[TaskState, str],
) -> None:
    path = tmp_path / "rm.sqlite3"
    job_id, (started, _) = _before_restart(path)
    core = _restarted(path)
    assert core.nodes == {}  # nodes are kept in memory only
    assert core.next_wakeup() == START + TIMEOUT  # the one timer of every unheard node
    if registers_at is not None:
        live = []
        if reports_task:
            live = [observation(job_id, "p-0", TaskState.RUNNING, allocation_id=started)]
        _register(core, live, now=registers_at, session="after")

    core.tick(START + TIMEOUT)  # (not yet: silent for the timeout, not more)
    assert core.tasks[(job_id, "p-0", 1)].state is (
        TaskState.LOST if case == "back empty" else TaskState.RUNNING
    )
    core.tick(START + TIMEOUT + 0.5)

    task = core.tasks[(job_id, "p-0", 1)]
    assert (task.state, task.message) == task_after
    node = core.nodes["n1"]
    if case == "never back":
        assert node.state is NodeState.LOST  # listed as lost (sluice nodes)
        assert core.allocations == {}  # both containers freed: nothing held on a ghost
        assert core.node_allocated("n1") == res(0.0, 0)
        assert sorted(core.allocate(job_id, [], [], [], 0, now=START + 11.0).lost_allocations)
        assert core.job(job_id).state is JobState.RUNNING  # its job master retries it
        assert core.next_wakeup() == START + 600.0  # then only: forget it (unheard since START)
    else:
        assert node.state is NodeState.READY
        assert (started in core.allocations) is reports_task


def test_a_node_back_after_being_lost_registers_as_any_node(tmp_path: Path) -> None:
    path = tmp_path / "rm.sqlite3"
    job_id, _ = _before_restart(path)
    core = _restarted(path)
    core.tick(START + TIMEOUT + 1.0)
    lost = core.nodes["n1"]
    assert (lost.state, lost.address) == (NodeState.LOST, "")  # (its address unknown)
    _register(core, now=START + 20.0, session="after")
    back = core.nodes["n1"]
    assert (back.state, back.address) == (NodeState.READY, "n1:7000")
    assert core.tasks[(job_id, "p-0", 1)].message == "node n1 lost"  # lost once, not twice


def test_a_job_master_on_a_node_never_back_gets_another_attempt(tmp_path: Path) -> None:
    path = tmp_path / "rm.sqlite3"
    core = new_core(path, node_timeout=TIMEOUT, max_master_attempts=2)
    _register(core, now=0.0)
    job = core.submit(spec_of(1), client_mode=False, now=1.0)
    (launch,) = commands(core, "n1", now=1.0)
    assert isinstance(launch, LaunchMaster)
    core.register_master(job.job_id, attempt=1, now=2.0)
    core.core.tables._store.close()

    core = _restarted(path)
    _register(core, now=START + 1.0, node_id="n2")  # another node, which does come back
    core.tick(START + TIMEOUT + 1.0)
    after = core.job(job.job_id)
    assert after.master_attempt == 2  # placed again, on n2
    assert {a.node_id for a in core.allocations.values()} == {"n2"}


def test_a_shell_that_never_calls_started_is_timed_from_its_first_tick(tmp_path: Path) -> None:
    path = tmp_path / "rm.sqlite3"
    _before_restart(path)
    core = new_core(path, node_timeout=TIMEOUT)
    assert core.next_wakeup() is None  # not started: no time known yet
    core.tick(START)
    core.tick(START + TIMEOUT + 0.5)
    assert core.nodes["n1"].state is NodeState.LOST


# ------------------------------------------------------------------------- the registration race


@pytest.mark.parametrize(
    ("case", "event_session", "registration_session", "events", "p1_after"),
    [
        # The interleaving: the agent takes its snapshot (p-0 only), p-1 starts, p-1's event
        # reaches the RM, then the registration does.  The same process: p-1 is not lost.
        ("started after the snapshot", "s1", "s1", ["running"], TaskState.RUNNING),
        # ...and ended, both events delivered first: its end is recorded, nothing is lost.
        ("started and ended", "s1", "s1", ["running", "succeeded"], TaskState.SUCCEEDED),
        # Reported by an earlier agent process (since gone with its tasks): lost.
        ("reported by another process", "s0", "s1", ["running"], TaskState.LOST),
        # An older agent, without sessions: as before, lost.
        ("no session", "", "", ["running"], TaskState.LOST),
        # Reported before the RM restarted, never since, and missing from the snapshot: lost.
        ("reported only before", "s1", "s1", [], TaskState.LOST),
    ],
)
def test_what_the_registering_process_reported_first_is_not_lost(
    tmp_path: Path,
    case: str,
    event_session: str,
    registration_session: str,
    events: list[str],
    p1_after: TaskState,
) -> None:
    path = tmp_path / "rm.sqlite3"
    job_id, (first, second) = _before_restart(path)
    core = new_core(path, node_timeout=TIMEOUT)
    if case == "reported only before":  # p-1 started and was reported to the RM before it
        core.core.tables._store.close()
        core = new_core(path, node_timeout=TIMEOUT)
        p0 = observation(job_id, "p-0", TaskState.RUNNING, allocation_id=first)
        _register(core, [p0], now=START - 50.0, session="s0")
        running = observation(job_id, "p-1", TaskState.RUNNING, allocation_id=second)
        core.report_events("n1", [running], now=START - 49.0, session="s0")
        core.core.tables._store.close()
        core = new_core(path, node_timeout=TIMEOUT)
    core.started(now=START)

    snapshot = [observation(job_id, "p-0", TaskState.RUNNING, allocation_id=first)]
    states = {"running": TaskState.RUNNING, "succeeded": TaskState.SUCCEEDED}
    reports = [observation(job_id, "p-1", states[e], allocation_id=second) for e in events]
    if reports:
        core.report_events("n1", reports, now=START + 1.0, session=event_session)
    _register(core, snapshot, now=START + 2.0, session=registration_session)

    assert core.tasks[(job_id, "p-0", 1)].state is TaskState.RUNNING  # in the snapshot
    assert core.tasks[(job_id, "p-1", 1)].state is p1_after
    assert (second in core.allocations) is (p1_after is not TaskState.LOST)
    if p1_after is TaskState.RUNNING:  # its end, queued after the snapshot, still counts
        ended = observation(job_id, "p-1", TaskState.SUCCEEDED, allocation_id=second)
        core.report_events("n1", [ended], now=START + 3.0, session=registration_session)
        assert core.tasks[(job_id, "p-1", 1)].state is TaskState.SUCCEEDED


def test_events_of_a_registered_process_are_not_held_for_a_later_registration() -> None:
    """Once registered, a process's events are older than any snapshot it takes later: a task
    it reported and then lost track of is lost at its next registration."""
    core = new_core(node_timeout=TIMEOUT)
    _register(core, now=0.0, session="s1")
    job_id = running_job(core, spec_of(1, cpu=1.0))
    (granted,) = core.allocate(job_id, [want(1)], [], [], 0, now=1.0).granted
    running = observation(job_id, "p-0", TaskState.RUNNING, allocation_id=granted.allocation_id)
    core.report_events("n1", [running], now=2.0, session="s1")
    _register(core, [], now=3.0, session="s1")
    assert core.tasks[(job_id, "p-0", 1)].state is TaskState.LOST


def test_a_session_longer_than_an_id_is_refused_naming_the_field() -> None:
    core = new_core()
    with pytest.raises(InvalidRequestError) as refused:
        _register(core, now=0.0, session="x" * 65)
    assert str(refused.value) == "session: must be at most 64 characters, got 65"
    add_node(core, "n1")  # (an older agent: no session)
    assert core.nodes["n1"].state is NodeState.READY


def test_an_end_still_in_the_outbox_comes_with_the_registration(tmp_path: Path) -> None:
    """p-1 started and was reported by an earlier agent process; it ended before the new
    process took its snapshot, and its final event had not left the outbox: the registration
    carries it (``NodeAgent.registration_events``), so p-1 ends succeeded and is not lost."""
    path = tmp_path / "rm.sqlite3"
    job_id, (first, second) = _before_restart(path)
    core = new_core(path, node_timeout=TIMEOUT)
    core.started(now=START)
    running = observation(job_id, "p-1", TaskState.RUNNING, allocation_id=second)
    core.report_events("n1", [running], now=START + 1.0, session="s0")
    snapshot = [
        observation(job_id, "p-1", TaskState.SUCCEEDED, allocation_id=second),  # the outbox
        observation(job_id, "p-0", TaskState.RUNNING, allocation_id=first),  # live
    ]
    _register(core, snapshot, now=START + 2.0, session="s1")
    assert core.tasks[(job_id, "p-0", 1)].state is TaskState.RUNNING
    assert core.tasks[(job_id, "p-1", 1)].state is TaskState.SUCCEEDED
