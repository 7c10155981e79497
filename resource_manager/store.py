"""Durable state of the resource manager: jobs, task attempts and allocations in SQLite (WAL).

Nodes are not stored: they re-register after a restart and report what runs on them.  Every write
is its own transaction, committed before the RPC that caused it answers, so a restarted RM
loses no accepted job.  The store is not thread-safe; the RM core serialises access.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from policies.scheduling.jobspec import job_spec_to_document, parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.resources import Resources
from resource_manager.records import AllocationRecord, JobRecord, PhaseProgress, TaskRecord

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    submit_time REAL NOT NULL,
    client_mode INTEGER NOT NULL,
    kill_requested INTEGER NOT NULL,
    start_time REAL NOT NULL,
    finish_time REAL NOT NULL,
    message TEXT NOT NULL,
    progress TEXT NOT NULL,
    master_node TEXT NOT NULL,
    master_allocation TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    phase TEXT NOT NULL,
    state TEXT NOT NULL,
    node_id TEXT NOT NULL,
    allocation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    exit_code INTEGER NOT NULL,
    start_time REAL NOT NULL,
    finish_time REAL NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (job_id, task_id, attempt)
);
CREATE INDEX IF NOT EXISTS tasks_by_seq ON tasks (job_id, seq);
CREATE TABLE IF NOT EXISTS allocations (
    allocation_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    node_id TEXT NOT NULL,
    cpu REAL NOT NULL,
    memory_mb INTEGER NOT NULL,
    granted_time REAL NOT NULL,
    delivered INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class StoreError(Exception):
    """The state directory holds something this version cannot read."""


class Store:
    """SQLite-backed persistence.  ``path`` may be ``":memory:"`` for tests."""

    def __init__(self, path: Path | str) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise StoreError(f"{path}: state schema version {version}, expected {SCHEMA_VERSION}")
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    # -------------------------------------------------------------------- counters

    def next_counter(self, name: str) -> int:
        """Increment and return a durable counter (job numbers, allocation numbers, event seq)."""
        row = self._db.execute(
            "INSERT INTO counters(name, value) VALUES (?, 1) "
            "ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value",
            (name,),
        ).fetchone()
        return int(row[0])

    def counter(self, name: str) -> int:
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    # -------------------------------------------------------------------- jobs

    def save_job(self, job: JobRecord) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                job.job_id,
                job.seq,
                json.dumps(job_spec_to_document(job.spec)),
                job.state.value,
                job.submit_time,
                int(job.client_mode),
                int(job.kill_requested),
                job.start_time,
                job.finish_time,
                job.message,
                json.dumps([p.__dict__ for p in job.progress]),
                job.master_node,
                job.master_allocation,
            ),
        )

    def load_jobs(self) -> Iterator[JobRecord]:
        for row in self._db.execute("SELECT * FROM jobs ORDER BY seq"):
            yield JobRecord(
                job_id=row[0],
                seq=row[1],
                spec=parse_job_spec(json.loads(row[2])),
                state=JobState(row[3]),
                submit_time=row[4],
                client_mode=bool(row[5]),
                kill_requested=bool(row[6]),
                start_time=row[7],
                finish_time=row[8],
                message=row[9],
                progress=tuple(PhaseProgress(**p) for p in json.loads(row[10])),
                master_node=row[11],
                master_allocation=row[12],
            )

    # -------------------------------------------------------------------- tasks

    def save_task(self, task: TaskRecord) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task.job_id,
                task.task_id,
                task.attempt,
                task.phase,
                task.state.value,
                task.node_id,
                task.allocation_id,
                task.seq,
                task.exit_code,
                task.start_time,
                task.finish_time,
                task.message,
            ),
        )

    def load_tasks(self) -> Iterator[TaskRecord]:
        for row in self._db.execute("SELECT * FROM tasks ORDER BY seq"):
            yield TaskRecord(
                job_id=row[0],
                task_id=row[1],
                attempt=row[2],
                phase=row[3],
                state=TaskState(row[4]),
                node_id=row[5],
                allocation_id=row[6],
                seq=row[7],
                exit_code=row[8],
                start_time=row[9],
                finish_time=row[10],
                message=row[11],
            )

    # -------------------------------------------------------------------- allocations

    def save_allocation(self, allocation: AllocationRecord) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO allocations VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                allocation.allocation_id,
                allocation.job_id,
                allocation.phase,
                allocation.node_id,
                allocation.resources.cpu,
                allocation.resources.memory_mb,
                allocation.granted_time,
                int(allocation.delivered),
            ),
        )

    def delete_allocation(self, allocation_id: str) -> None:
        self._db.execute("DELETE FROM allocations WHERE allocation_id = ?", (allocation_id,))

    def load_allocations(self) -> Iterator[AllocationRecord]:
        for row in self._db.execute("SELECT * FROM allocations ORDER BY granted_time"):
            yield AllocationRecord(
                allocation_id=row[0],
                job_id=row[1],
                phase=row[2],
                node_id=row[3],
                resources=Resources(cpu=row[4], memory_mb=row[5]),
                granted_time=row[6],
                delivered=bool(row[7]),
            )
