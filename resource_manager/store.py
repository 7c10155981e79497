"""Durable state of the resource manager: jobs, task attempts and allocations in SQLite (WAL).

Nodes are not stored: they re-register after a restart and report what runs on them.  Writes
happen inside a transaction the caller opens with :meth:`Store.begin` and ends with
:meth:`Store.commit` or :meth:`Store.rollback`: one RPC is one transaction, committed before it
answers, so a restarted RM loses no accepted job and never sees half of a request.  The store is
not thread-safe; the RM serialises access.

Schema history: version 1 marked a job master's container with the phase name ``__master__``;
version 2 has a typed ``kind`` column, each job's ``master_attempt`` and ``idempotency_key``.
A version-1 file is migrated in place when opened.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from policies.scheduling.jobspec import SpecError, job_spec_to_document, parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.resources import Resources
from resource_manager.records import (
    AllocationKind,
    AllocationRecord,
    JobRecord,
    PhaseProgress,
    TaskRecord,
)

SCHEMA_VERSION = 2

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
    master_allocation TEXT NOT NULL,
    master_attempt INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT NOT NULL DEFAULT ''
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
    delivered INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'task'
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

# Version 1 -> 2: typed job master containers, master attempts, idempotent submissions.
_MIGRATE_1_TO_2 = """
ALTER TABLE jobs ADD COLUMN master_attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE allocations ADD COLUMN kind TEXT NOT NULL DEFAULT 'task';
UPDATE allocations SET kind = 'job_master', phase = '' WHERE phase = '__master__';
UPDATE jobs SET master_attempt = 1 WHERE master_allocation != '' OR client_mode = 1;
"""
_JOB_COLUMNS = (
    "job_id, seq, spec, state, submit_time, client_mode, kill_requested, start_time, "
    "finish_time, message, progress, master_node, master_allocation, master_attempt, "
    "idempotency_key"
)
_ALLOCATION_COLUMNS = (
    "allocation_id, job_id, phase, node_id, cpu, memory_mb, granted_time, delivered, kind"
)


class StoreError(Exception):
    """The state directory holds something this version cannot read."""


class Store:
    """SQLite-backed persistence.  ``path`` may be ``":memory:"`` for tests."""

    def __init__(self, path: Path | str) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, SCHEMA_VERSION):
            raise StoreError(f"{path}: state schema version {version}, expected {SCHEMA_VERSION}")
        self._db.execute("BEGIN IMMEDIATE")
        if version == 1:
            # 1 -> 2: the old tables exist; add what version 2 has (CREATE IF NOT EXISTS below
            # leaves them alone, so the columns must come first).
            for statement in _MIGRATE_1_TO_2.strip().split(";\n"):
                self._db.execute(statement)
        for statement in _SCHEMA.strip().split(";\n"):
            self._db.execute(statement)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._db.execute("COMMIT")
        self._in_transaction = False
        self.unreadable_jobs: list[tuple[str, str]] = []  # (job id, why), by load_jobs

    def close(self) -> None:
        self._db.close()

    # -------------------------------------------------------------------- transactions

    def begin(self) -> None:
        """Open the transaction every following write belongs to."""
        self._db.execute("BEGIN")
        self._in_transaction = True

    def commit(self) -> None:
        self._db.execute("COMMIT")
        self._in_transaction = False

    def rollback(self) -> None:
        """Undo every write since :meth:`begin`."""
        if self._in_transaction:
            self._db.execute("ROLLBACK")
            self._in_transaction = False

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    # -------------------------------------------------------------------- counters, settings

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

    def setting(self, name: str) -> str | None:
        """A value the RM keeps across restarts (its cluster id, its bound port)."""
        row = self._db.execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
        return str(row[0]) if row else None

    def save_setting(self, name: str, value: str) -> None:
        """Write one setting in a transaction of its own (called outside requests)."""
        self._db.execute(
            "INSERT INTO settings(name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    # -------------------------------------------------------------------- jobs

    def save_job(self, job: JobRecord) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO jobs ({_JOB_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                job.master_attempt,
                job.idempotency_key,
            ),
        )

    def load_jobs(self) -> Iterator[JobRecord]:
        """Every stored job.  A job whose spec this version no longer accepts (stored before a
        rule was added, e.g. a priority beyond int32) is left in the database, untouched, and
        listed in :attr:`unreadable_jobs` instead of failing the RM for every user."""
        self.unreadable_jobs = []
        for row in self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY seq"):
            try:
                spec = parse_job_spec(json.loads(row[2]))
            except (SpecError, ValueError) as error:
                self.unreadable_jobs.append((str(row[0]), str(error)))
                continue
            yield JobRecord(
                job_id=row[0],
                seq=row[1],
                spec=spec,
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
                master_attempt=row[13],
                idempotency_key=row[14],
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
            f"INSERT OR REPLACE INTO allocations ({_ALLOCATION_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                allocation.allocation_id,
                allocation.job_id,
                allocation.phase,
                allocation.node_id,
                allocation.resources.cpu,
                allocation.resources.memory_mb,
                allocation.granted_time,
                int(allocation.delivered),
                allocation.kind.value,
            ),
        )

    def delete_allocation(self, allocation_id: str) -> None:
        self._db.execute("DELETE FROM allocations WHERE allocation_id = ?", (allocation_id,))

    def load_allocations(self) -> Iterator[AllocationRecord]:
        query = f"SELECT {_ALLOCATION_COLUMNS} FROM allocations ORDER BY granted_time"
        for row in self._db.execute(query):
            yield AllocationRecord(
                allocation_id=row[0],
                job_id=row[1],
                phase=row[2],
                node_id=row[3],
                resources=Resources(cpu=row[4], memory_mb=row[5]),
                granted_time=row[6],
                delivered=bool(row[7]),
                kind=AllocationKind(row[8]),
            )
