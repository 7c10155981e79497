"""What the RM accepts changes nothing it should not (issue 27, items 2, 6 and 13): a commit the
state directory refuses leaves memory as before the unit and does not wedge the RM; a node's
reports of another node's tasks are dropped; a refused Allocate delivers nothing.

SQLite's ``max_page_count`` makes the store refuse to grow, exactly as a full disk does
(SQLITE_FULL, "database or disk is full"); tests/integration/cluster/test_state_dir_full.py does
it with a real full filesystem."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.errors import StateUnavailableError
from resource_manager.records import JobRecord
from resource_manager.rm_state import RMState
from resource_manager.service import MAX_RESOLVED_NODES
from resource_manager.sqlite_store import SqliteStore
from resource_manager.tables import Tables
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.builders import chain_spec
from tests.integration.cluster.harness import wait_until
from tests.unit.resource_manager.harness import at
from tests.unit.resource_manager.test_service import SPEC, Served

# ------------------------------------------------------------------ a commit that fails (item 6)


def _limit_pages(store: SqliteStore, pages: int) -> None:
    """Let the database grow to ``pages`` pages at most: beyond, SQLite answers SQLITE_FULL."""
    store._db.execute(f"PRAGMA max_page_count={pages}")  # (a test reaching in, on purpose)


def _page_count(store: SqliteStore) -> int:
    return int(store._db.execute("PRAGMA page_count").fetchone()[0])


def _snapshot(core: ResourceManagerCore) -> tuple[object, ...]:
    tables = core.tables
    return (
        dict(tables.jobs),
        dict(tables.tasks),
        dict(tables.allocations),
        dict(tables.active_jobs),
        dict(tables.open_tasks_by_owner),
        [j.job_id for j in tables.all_jobs()],
    )


def _submit(state: RMState, name: str) -> JobRecord:
    spec = chain_spec(name)
    return state.run(lambda core, now: core.submit(spec, client_mode=True, now=now, owner="alice"))


def test_a_commit_the_full_state_refuses_rolls_memory_back_and_the_next_unit_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = tmp_path / "rm.sqlite3"
    store = SqliteStore(path)
    core = ResourceManagerCore(Tables(store), CoreSettings())
    state = RMState(core, lambda: at(1.0), advertise_address="rm:1")
    accepted = [_submit(state, "first").job_id]
    _limit_pages(store, _page_count(store) + 1)
    refused = None
    with caplog.at_level(logging.INFO):
        for index in range(200):  # a page or two per job: full long before that
            before = _snapshot(core)
            try:
                accepted.append(_submit(state, f"job{index}").job_id)
            except StateUnavailableError as error:
                refused = error
                break
        assert refused is not None, "the store never filled"
        assert refused.full
        assert str(refused).startswith(f"state directory full: {tmp_path}: database or disk")
        assert _snapshot(core) == before  # memory as before the unit, the store too
        assert not core.tables.in_unit
        with pytest.raises(StateUnavailableError):  # still full: refused alike, never wedged
            _submit(state, "again")
        assert _snapshot(core) == before
        _limit_pages(store, 1_000_000)  # room again: the RM recovers by itself
        recovered = _submit(state, "after")
    # the refused units gave their job numbers back
    assert recovered.job_id == f"job-{len(accepted) + 1:06d}"
    assert [j.job_id for j in core.tables.all_jobs()] == [*accepted, recovered.job_id]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("changes are refused until it can take them" in m for m in messages) == 1
    assert sum("takes changes again (2 refused meanwhile)" in m for m in messages) == 1
    store.close()
    reopened = Tables(SqliteStore(path))  # what was committed, and only that, survived
    assert [j.job_id for j in reopened.all_jobs()] == [*accepted, recovered.job_id]


@pytest.mark.parametrize("failing", ["counter", "commit"])
def test_tables_roll_back_when_the_store_fails_at_commit(tmp_path: Path, failing: str):
    """Table-driven over where the commit fails: writing the counters that moved, or the
    store's own commit."""
    store = SqliteStore(tmp_path / "rm.sqlite3")
    tables = Tables(store)
    core = ResourceManagerCore(tables, CoreSettings())
    state = RMState(core, lambda: at(1.0), advertise_address="rm:1")
    _submit(state, "kept")
    before = _snapshot(core)

    def refuse(*_: object) -> None:
        raise StateUnavailableError("state directory full: test", full=True)

    method = "save_counter" if failing == "counter" else "commit"
    original = getattr(store, method)
    setattr(store, method, refuse)
    with pytest.raises(StateUnavailableError):
        _submit(state, "refused")
    assert _snapshot(core) == before
    assert not tables.in_unit
    setattr(store, method, original)
    assert _submit(state, "next").job_id == "job-000002"  # the number was given back


# ------------------------------------------------------------------ the gRPC layer


@pytest.fixture
def served() -> Iterator[Served]:
    rm = Served()
    yield rm
    rm.close()


def test_a_full_state_answers_resource_exhausted_and_lists_no_refused_job(served: Served):
    first = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True))
    store = served.core.tables._store
    assert isinstance(store, SqliteStore)
    _limit_pages(store, _page_count(store) + 1)
    with pytest.raises(grpc.RpcError) as caught:
        for _ in range(200):
            served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details().startswith("state directory full: ")
    assert caught.value.details().endswith("; nothing was changed")
    listed = served.jobs.ListJobs(rm_pb.ListJobsRequest()).jobs
    assert len(listed) == len(served.core.tables.all_jobs())  # no refused job among them
    assert listed[0].job_id == first.job.job_id
    _limit_pages(store, 1_000_000)
    after = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True))
    assert after.job.job_id == f"job-{len(listed) + 1:06d}"


# ------------------------------------------------------------------ a refused Allocate (item 13)


def _client_job(served: Served) -> str:
    job = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True))
    served.masters.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job.job.job_id, attempt=1))
    return str(job.job.job_id)


ASK = rm_pb.Ask(phase="p", count=1, resources=pb.Resources(cpu=0.5, memory_mb=64))
TOO_MANY = ["n1"] * (MAX_RESOLVED_NODES + 1)


@pytest.mark.parametrize("when", ["granted in the refused call", "granted before it"])
def test_a_refused_allocate_delivers_nothing_and_the_next_one_gets_the_grant(
    served: Served, when: str
):
    if when == "granted in the refused call":
        served.register()  # room: the refused call's own asks would be granted at once
    job_id = _client_job(served)
    if when == "granted before it":
        # asked with no node up; a node joins and a pass places the grant, undelivered
        asked = rm_pb.AllocateRequest(job_id=job_id, asks=[ASK], master_attempt=1)
        assert not served.masters.Allocate(asked).granted
        served.register()
        wait_until(lambda: served.core.tables.undelivered_of_job(job_id), 10, "a grant")
    refused = rm_pb.AllocateRequest(
        job_id=job_id, asks=[ASK], master_attempt=1, resolve_nodes=TOO_MANY
    )
    with pytest.raises(grpc.RpcError) as caught:
        served.masters.Allocate(refused)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == f"resolve_nodes: at most {MAX_RESOLVED_NODES} nodes per call"
    valid = rm_pb.AllocateRequest(job_id=job_id, asks=[ASK], master_attempt=1, resolve_nodes=["n1"])
    answer = served.masters.Allocate(valid)
    assert [a.node_id for a in answer.granted] == ["n1"]
    assert dict(answer.node_addresses) == {"n1": "n1:7"}
    assert len(served.core.tables.allocations_of_job(job_id)) == 1  # that one, no other


# ------------------------------------------------------------------ another node's tasks (item 2)


def test_reports_of_another_nodes_task_are_dropped_on_every_path(
    served: Served, caplog: pytest.LogCaptureFixture
):
    served.register("n1")
    job_id = _client_job(served)
    asked = rm_pb.AllocateRequest(job_id=job_id, asks=[ASK], master_attempt=1)
    (granted,) = served.masters.Allocate(asked).granted
    victim = granted.node_id
    forger = "n2"
    served.register(forger)
    event = pb.TaskEvent(
        job_id=job_id, task_id="p-0", attempt=1, allocation_id=granted.allocation_id
    )
    running = pb.TaskEvent(state=pb.TASK_RUNNING)
    running.MergeFrom(event)
    served.nodes.ReportTaskEvents(rm_pb.ReportTaskEventsRequest(node_id=victim, events=[running]))
    forgeries = []
    for state in (pb.TASK_FAILED, pb.TASK_SUCCEEDED, pb.TASK_KILLED):
        for allocation_id in (granted.allocation_id, "", "job-000009-a1"):
            forged = pb.TaskEvent(state=state, exit_code=1)
            forged.MergeFrom(event)
            forged.allocation_id = allocation_id  # its container, none, or one that is not
            forgeries.append(forged)
    with caplog.at_level(logging.WARNING):
        served.nodes.ReportTaskEvents(
            rm_pb.ReportTaskEventsRequest(node_id=forger, events=forgeries)
        )
        served.nodes.Heartbeat(rm_pb.HeartbeatRequest(node_id=forger, live_tasks=forgeries))
        served.register(forger, *forgeries)
        served.nodes.ReportTaskEvents(  # a job master report naming the container
            rm_pb.ReportTaskEventsRequest(
                node_id=forger,
                events=[
                    pb.TaskEvent(
                        job_id=job_id,
                        allocation_id=granted.allocation_id,
                        state=pb.TASK_FAILED,
                        job_master=True,
                    )
                ],
            )
        )
    detail = served.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id))
    assert detail.summary.state == pb.JOB_RUNNING
    assert [(t.task_id, t.state, t.node_id) for t in detail.tasks] == [
        ("p-0", pb.TASK_RUNNING, victim)
    ]
    assert granted.allocation_id in served.core.tables.allocations  # still held
    lines = [r.getMessage() for r in caplog.records if "another node's tasks" in r.getMessage()]
    assert len(lines) == 1  # one line per period, however many (the clock stands still here)
    assert f"node {forger} reported {job_id} p-0 attempt 1" in lines[0]
    assert f"which runs on node {victim}" in lines[0]
    # the node that runs it is heard as before
    succeeded = pb.TaskEvent(state=pb.TASK_SUCCEEDED)
    succeeded.MergeFrom(event)
    served.nodes.ReportTaskEvents(rm_pb.ReportTaskEventsRequest(node_id=victim, events=[succeeded]))
    (task,) = served.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id)).tasks
    assert task.state == pb.TASK_SUCCEEDED
