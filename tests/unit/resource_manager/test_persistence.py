"""An RM restart loses nothing: a new core over the same SQLite file sees every record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.core import MASTER_RESOURCES, LaunchMaster
from resource_manager.records import PhaseProgress
from resource_manager.store import SCHEMA_VERSION, Store, StoreError
from tests.builders import chain_spec, observation, res
from tests.unit.resource_manager.harness import add_node, commands, new_core, running_job, want


def test_a_restarted_core_sees_every_job_task_and_allocation(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    before = new_core(path)
    add_node(before, "n1", 2.0, 4096)
    job_id = running_job(before, chain_spec("map", "sum", tasks=2, priority=3, max_retries=1))
    progress = [PhaseProgress("map", 2, pending=1, running=1), PhaseProgress("sum", 2, pending=2)]
    (delivered,) = before.allocate(job_id, [want(1, phase="map")], [], progress, 0, now=2.0).granted
    before.report_events(
        "n1",
        [observation(job_id, "map-0", TaskState.RUNNING, allocation_id=delivered.allocation_id)],
        now=3.0,
    )
    before.allocate(job_id, [want(2, phase="map")], [], [], 0, now=4.0)  # no room for a second
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
    add_node(after, "n1", 2.0, 4096, now=9.0)
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


def test_counters_are_durable_and_independent(tmp_path: Path):
    store = Store(tmp_path / "rm.sqlite")
    numbers = [store.next_counter(name) for name in ("job", "job", "allocation")]
    assert numbers == [1, 2, 1]
    store.close()
    reopened = Store(tmp_path / "rm.sqlite")
    assert (reopened.counter("job"), reopened.counter("never")) == (2, 0)


def test_a_master_placed_just_before_a_restart_is_still_launched(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    before = new_core(path)
    add_node(before, "n1")
    job = before.submit(chain_spec("x"), client_mode=False, now=1.0)
    assert job.state is JobState.STARTING  # LaunchMaster waits for n1's next heartbeat...

    after = new_core(path)  # ...which reaches a restarted RM
    assert after.heartbeat("n1", res(0.0, 0), [], now=2.0) == (True, [])
    add_node(after, "n1", now=2.0)
    assert commands(after, "n1", now=3.0) == [
        LaunchMaster(job.job_id, job.master_allocation, MASTER_RESOURCES)
    ]
    assert commands(after, "n1", now=4.0) == []
