"""An RM restart loses nothing, and a request is one unit: whole or not at all, in memory and
in SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from plumbing.node_protocol import LaunchMaster
from policies.scheduling.framework import Placement
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager import scheduling
from resource_manager.core import MASTER_RESOURCES
from resource_manager.records import AllocationKind, Goal, Now, PhaseProgress, Shown
from resource_manager.sqlite_store import SCHEMA_VERSION, StoreError
from resource_manager.sqlite_store import SqliteStore as Store
from resource_manager.state import CoreState
from tests.builders import chain_spec, observation, res
from tests.unit.resource_manager.harness import (
    add_node,
    at,
    commands,
    new_core,
    running_job,
    spec_of,
    want,
)


def test_a_restarted_core_sees_every_job_task_and_allocation(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    before = new_core(path)
    add_node(before, "n1", 1.0, 4096)
    job_id = running_job(before, chain_spec("map", "sum", tasks=2, priority=3, max_retries=1))
    progress = [PhaseProgress("map", 2, pending=1, running=1), PhaseProgress("sum", 2, pending=2)]
    (delivered,) = before.allocate(job_id, [want(1, phase="map")], [], progress, 0, now=2.0).granted
    before.report_events(
        "n1",
        [observation(job_id, "map-0", TaskState.RUNNING, allocation_id=delivered.allocation_id)],
        now=3.0,
    )
    before.allocate(job_id, [want(1, phase="map")], [], [], 0, now=4.0)  # no room for a second
    add_node(before, "n2", 2.0, 4096, now=5.0)  # granted here, not delivered before the crash
    finished = running_job(before)
    before.finish_job(finished, JobState.SUCCEEDED, "ok", [], now=6.0)
    queued = before.submit(chain_spec("x"), client_mode=False, now=7.0)

    after = new_core(path)
    assert after.jobs == before.jobs
    assert after.tasks == before.tasks
    assert after.allocations == before.allocations
    assert after.job(job_id).spec.priority == 3
    assert after.job(queued.job_id).state is JobState.STARTING
    # counters continue: no reused job, allocation or event numbers
    assert after.submit(chain_spec("y"), client_mode=True, now=8.0).job_id == "job-000004"
    # the grant made just before the restart is still handed out, once
    add_node(after, "n1", 1.0, 4096, now=9.0)
    add_node(after, "n2", 2.0, 4096, now=9.0)
    regranted = after.allocate(job_id, [], [], [], 0, now=10.0).granted
    assert [a.node_id for a in regranted] == ["n2"]
    assert after.allocate(job_id, [], [], [], 0, now=11.0).granted == ()
    report = observation(
        job_id, "map-0", TaskState.SUCCEEDED, allocation_id=delivered.allocation_id
    )
    after.report_events("n1", [report], now=12.0)
    assert after.tasks[(job_id, "map-0", 1)].seq > before.tasks[(job_id, "map-0", 1)].seq


def test_store_refuses_a_newer_schema(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"state schema version {SCHEMA_VERSION + 1}, expected"):
        Store(path)


def test_a_version_1_state_directory_is_migrated(tmp_path: Path):
    """Version 1 marked job master containers with the phase name '__master__'."""
    path = tmp_path / "rm.sqlite"
    spec = json.dumps(
        {
            "name": "j",
            "priority": 0,
            "max_retries": 2,
            "phases": [
                {
                    "name": "p",
                    "tasks": 1,
                    "command": ["true"],
                    "resources": {"cpu": 1.0, "memory_mb": 256},
                }
            ],
        }
    )
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE jobs (job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE,
                spec TEXT NOT NULL, state TEXT NOT NULL, submit_time REAL NOT NULL,
                client_mode INTEGER NOT NULL, kill_requested INTEGER NOT NULL,
                start_time REAL NOT NULL, finish_time REAL NOT NULL, message TEXT NOT NULL,
                progress TEXT NOT NULL, master_node TEXT NOT NULL,
                master_allocation TEXT NOT NULL);
            CREATE TABLE allocations (allocation_id TEXT PRIMARY KEY, job_id TEXT NOT NULL,
                phase TEXT NOT NULL, node_id TEXT NOT NULL, cpu REAL NOT NULL,
                memory_mb INTEGER NOT NULL, granted_time REAL NOT NULL,
                delivered INTEGER NOT NULL);
            PRAGMA user_version=1;
            """
        )
        db.execute(
            "INSERT INTO jobs VALUES ('job-000001', 1, ?, 'running', 1, 0, 0, 2, 0, '', '[]', "
            "'n1', 'job-000001-a1')",
            (spec,),
        )
        db.execute(
            "INSERT INTO allocations VALUES ('job-000001-a1', 'job-000001', '__master__', 'n1', "
            "0.1, 256, 1, 0)"
        )
        db.execute(
            "INSERT INTO allocations VALUES ('job-000001-a2', 'job-000001', 'p', 'n1', 1, 256, 2, 1)"
        )
    core = new_core(path)
    assert core.job("job-000001").master_attempt == 1
    kinds = {a.allocation_id: (a.kind, a.phase) for a in core.allocations.values()}
    assert kinds == {
        "job-000001-a1": (AllocationKind.JOB_MASTER, ""),
        "job-000001-a2": (AllocationKind.TASK, "p"),
    }
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_version_3_state_directory_is_migrated(tmp_path: Path):
    """Version 3 had no container goals, nothing of what nodes showed, and no preempted flag."""
    path = tmp_path / "rm.sqlite"
    core = new_core(path)
    add_node(core, "n1", 4.0, 4096)
    job_id = running_job(core, spec_of(1))
    (granted,) = core.allocate(job_id, [want(1)], [], [], 0, now=2.0).granted
    report = observation(job_id, "p-0", TaskState.RUNNING, allocation_id=granted.allocation_id)
    core.report_events("n1", [report], now=3.0)
    core.core.tables._store.close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE tasks DROP COLUMN preempted")
        for column in (
            "goal",
            "limit_cpu",
            "limit_memory_mb",
            "goal_reason",
            "shown",
            "shown_cpu",
            "shown_memory_mb",
        ):
            db.execute(f"ALTER TABLE allocations DROP COLUMN {column}")
        db.execute("PRAGMA user_version=3")
    after = new_core(path)
    allocation = after.allocations[granted.allocation_id]
    assert (allocation.goal, allocation.limits, allocation.shown) == (Goal.RUN, None, Shown.IDLE)
    assert allocation.holds == granted.resources
    assert not after.tasks[(job_id, "p-0", 1)].preempted
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_version_4_state_directory_is_migrated(tmp_path: Path):
    """Version 4 did not record who submitted a job: such jobs have no owner (admins only)."""
    path = tmp_path / "rm.sqlite"
    core = new_core(path)
    job_id = running_job(core, spec_of(1))
    core.core.tables._store.close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE jobs DROP COLUMN owner")
        db.execute("PRAGMA user_version=4")
    after = new_core(path)
    assert after.job(job_id).owner == ""
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_counters_are_durable_and_independent(tmp_path: Path):
    """Numbers are handed out in memory and each counter that moved is written once, when the
    unit commits."""
    core = new_core(tmp_path / "rm.sqlite")
    tables = core.core.tables
    tables.begin()
    numbers = [tables.next_counter(name) for name in ("job", "job", "allocation")]
    tables.commit()
    assert numbers == [1, 2, 1]
    tables.begin()
    tables.next_counter("job")
    tables.rollback()  # gives its number back
    reopened = Store(tmp_path / "rm.sqlite")
    assert (reopened.counter("job"), reopened.counter("allocation"), reopened.counter("never")) == (
        2,
        1,
        0,
    )
    again = new_core(tmp_path / "rm.sqlite").core.tables
    again.begin()
    assert again.next_counter("job") == 3
    again.commit()


def test_a_master_placed_just_before_a_restart_is_still_launched(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    before = new_core(path)
    add_node(before, "n1")
    job = before.job(before.submit(chain_spec("x"), client_mode=False, now=1.0).job_id)
    assert job.state is JobState.STARTING  # LaunchMaster goes with n1's next heartbeat...

    after = new_core(path)  # ...which reaches a restarted RM
    assert after.heartbeat("n1", res(0.0, 0), [], now=2.0) == (True, [])
    add_node(after, "n1", now=2.0)
    launch = LaunchMaster(job.job_id, job.master_allocation, MASTER_RESOURCES, 1)
    assert commands(after, "n1", now=3.0) == [launch]


# --------------------------------------------------------------------------- one request, one unit


def failing_after_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that changes jobs, allocations, tasks and soft state, then hits a bug."""
    original = scheduling.grant

    def grant_then_fail(state: CoreState, placement: Placement, now: Now) -> bool:
        original(state, placement, now)
        raise RuntimeError("a bug after the first grant")

    monkeypatch.setattr(scheduling, "grant", grant_then_fail)


def test_a_request_that_raises_leaves_memory_and_the_database_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "rm.sqlite"
    core = new_core(path)
    add_node(core, "n1", 4.0, 4096)
    job_id = running_job(core, spec_of(4))
    (held,) = core.allocate(job_id, [want(1)], [], [], 0, now=2.0).granted
    report = observation(job_id, "p-0", TaskState.RUNNING, allocation_id=held.allocation_id)
    core.report_events("n1", [report], now=3.0)
    snapshot = (dict(core.jobs), dict(core.tasks), dict(core.allocations), dict(core.nodes))
    progress = [PhaseProgress("p", 4, pending=2, running=2)]

    failing_after_changes(monkeypatch)
    with pytest.raises(RuntimeError, match="a bug after the first grant"):
        core.allocate(job_id, [want(3)], [held.allocation_id], progress, 0, now=4.0)
    assert (dict(core.jobs), dict(core.tasks), dict(core.allocations), dict(core.nodes)) == snapshot
    assert core.core.pending.of_job(job_id) == []
    # the indexes were rolled back with the records: the node still holds just ``held``
    node = core.core.tables.capacity.get("n1")
    assert node is not None and node.allocated == held.resources
    assert core.core.tables.undelivered_of_job(job_id) == []
    restarted = new_core(path)
    assert (restarted.jobs, restarted.tasks, restarted.allocations) == snapshot[:3]
    # the numbers the failed request drew are drawn again: none is skipped or reused
    monkeypatch.undo()
    again = core.allocate(job_id, [want(3)], [], progress, 0, now=5.0).granted
    assert [a.allocation_id for a in again] == [f"{job_id}-a2", f"{job_id}-a3", f"{job_id}-a4"]


def test_a_unit_cannot_be_nested_and_changes_need_one():
    core = new_core()
    tables = core.core.tables
    with pytest.raises(RuntimeError, match="need a unit of work"):
        core.core.submit(spec_of(1), client_mode=True, now=at(1.0))
    tables.begin()
    with pytest.raises(RuntimeError, match="already open"):
        tables.begin()
    tables.rollback()
    assert core.jobs == {}


def test_a_stored_job_this_version_refuses_is_left_out_not_fatal(tmp_path: Path):
    """A spec stored before a rule existed (priority beyond int32 once broke ListJobs for
    every user, after every restart) no longer stops the RM from loading the others."""
    path = tmp_path / "rm.sqlite"
    core = new_core(path)
    kept = running_job(core)
    broken = running_job(core)
    with sqlite3.connect(path) as db:
        (spec,) = db.execute("SELECT spec FROM job_specs WHERE job_id = ?", (broken,)).fetchone()
        document = json.loads(spec)
        document["priority"] = 2**31
        db.execute("UPDATE job_specs SET spec = ? WHERE job_id = ?", (json.dumps(document), broken))
    restarted = new_core(path)
    assert list(restarted.jobs) == [kept]
    store = restarted.core.tables._store
    assert store.unreadable_jobs == [
        (broken, "priority: must be at most 2147483647, got 2147483648")
    ]
    with sqlite3.connect(path) as db:  # the row stays, for the operator
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2
