"""The resource manager's durable store: SQLite in WAL mode (:class:`SqliteStore`).

Nodes are not stored: they re-register after a restart and report what runs on them.  Writes
happen inside a transaction the caller opens with :meth:`SqliteStore.begin` and ends with
:meth:`SqliteStore.commit` or :meth:`SqliteStore.rollback`: one per RPC or per scheduling pass
(group commit), committed before anyone is answered, so a restarted RM loses no accepted job
and never sees half of a request.

Durability (:class:`Durability`) is a setting: ``crash`` (the default, ``synchronous=NORMAL`` in
WAL mode) keeps every committed transaction through a crash of the RM process, but a power loss
or a kernel crash may lose the last few; ``power`` (``synchronous=FULL``) syncs the log at every
commit, so a commit survives power loss too, at the cost of one fsync per transaction.

The schema and its migrations (a newer RM opens an older state directory and migrates it in
place) are in :mod:`resource_manager.sqlite_schema`.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from policies.scheduling.containers import Goal, Shown
from policies.scheduling.jobspec import JobSpec, SpecError, job_spec_to_document, parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.resources import Resources
from resource_manager.errors import StateUnavailableError
from resource_manager.records import (
    AllocationKind,
    AllocationRecord,
    Approximation,
    Execution,
    JobRecord,
    PhaseProgress,
    PreemptionStep,
    TaskRecord,
)
from resource_manager.sqlite_schema import SCHEMA_VERSION, migrate
from resource_manager.store import HotState, StoreError

__all__ = ["SCHEMA_VERSION", "Durability", "SqliteStore", "StateUnavailableError", "StoreError"]

_FINAL_STATES = "('succeeded', 'failed', 'killed')"
_JOB_COLUMNS = (
    "job_id, seq, state, submit_time, client_mode, kill_requested, start_time, "
    "finish_time, message, progress, master_node, master_allocation, master_attempt, "
    "idempotency_key, owner, dias"
)
_TASK_COLUMNS = (
    "job_id, task_id, attempt, phase, state, node_id, allocation_id, seq, exit_code, "
    "start_time, finish_time, message, preempted, preemptions, execution"
)
_ALLOCATION_COLUMNS = (
    "allocation_id, job_id, phase, node_id, cpu, memory_mb, granted_time, delivered, kind, "
    "goal, limit_cpu, limit_memory_mb, goal_reason, shown, shown_cpu, shown_memory_mb, "
    "preempted_at, kept_for, kept_until, held_by"
)


class Durability(enum.Enum):
    """What a committed transaction survives; see the module docstring."""

    CRASH = "crash"
    POWER = "power"

    @property
    def synchronous(self) -> str:
        return "FULL" if self is Durability.POWER else "NORMAL"


class SqliteStore:
    """The :class:`~resource_manager.store.Store` of a resource manager.  ``path`` may be
    ``":memory:"`` for tests."""

    def __init__(self, path: Path | str, durability: Durability = Durability.CRASH) -> None:
        """Open (creating or migrating) the state at ``path``.  Raises StoreError for a state
        this version cannot read, and StateUnavailableError when the state directory is full,
        read-only or failing (opening writes: the schema check is a transaction)."""
        self._path = str(path)
        try:
            self._open(durability)
        except (sqlite3.OperationalError, OSError) as error:
            self._close_quietly()
            raise self._unavailable(error) from None
        except sqlite3.DatabaseError as error:  # not a database at all
            self._close_quietly()
            raise StoreError(f"{path}: {error}") from None

    def _close_quietly(self) -> None:
        with contextlib.suppress(AttributeError, sqlite3.Error):
            self._db.close()

    def _open(self, durability: Durability) -> None:
        path = self._path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={durability.synchronous}")
        migrate(self._db, path)
        self._in_transaction = False
        self._pending: dict[tuple[str, object], tuple[str, tuple[object, ...]]] = {}
        self.unreadable_jobs: list[tuple[str, str]] = []  # (job id, why), once each
        self._unreadable: set[str] = set()

    def close(self) -> None:
        self._db.close()

    # -------------------------------------------------------------------- write-behind

    def _write(self, table: str, key: object, statement: str, row: tuple[object, ...]) -> None:
        """Queue one row's write for the commit: a later write of the same row in the same
        transaction replaces it (a container granted and delivered in one request is one row
        write), and the commit sends each statement once for all its rows (executemany)."""
        self._pending[(table, key)] = (statement, row)

    def _flush(self) -> None:
        if not self._pending:
            return
        statements: dict[str, list[tuple[object, ...]]] = {}
        for statement, row in self._pending.values():
            statements.setdefault(statement, []).append(row)
        self._pending.clear()
        try:
            for statement, rows in statements.items():
                self._db.executemany(statement, rows)
        except sqlite3.OperationalError as error:
            raise self._unavailable(error) from None

    # -------------------------------------------------------------------- transactions

    def begin(self) -> None:
        """Open the transaction every following write belongs to."""
        try:
            self._db.execute("BEGIN")
        except sqlite3.OperationalError as error:
            raise self._unavailable(error) from None
        self._in_transaction = True

    def commit(self) -> None:
        """Make the transaction durable.  Raises StateUnavailableError if the state directory
        cannot take it (full, read-only, failing); the caller then calls :meth:`rollback`."""
        self._flush()
        try:
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as error:
            raise self._unavailable(error) from None
        self._in_transaction = False

    def rollback(self) -> None:
        """Undo every write since :meth:`begin`; also after a failed :meth:`commit`, whether or
        not SQLite already rolled the transaction back by itself (it does on some errors, a
        full disk among them, and a second ROLLBACK would fail)."""
        self._pending.clear()
        if self._in_transaction:
            self._in_transaction = False
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def _unavailable(self, error: sqlite3.Error | OSError) -> StateUnavailableError:
        """The one-line error a failed write of the state becomes, naming the cause: the state
        directory full (SQLite's SQLITE_FULL, ENOSPC, or almost no space left: a full disk
        may also surface as an I/O error of the shared-memory file), read-only, or failing."""
        directory = str(Path(self._path).absolute().parent)
        if isinstance(error, sqlite3.Error):
            code = getattr(error, "sqlite_errorcode", 0) & 0xFF
            full = code == sqlite3.SQLITE_FULL
            read_only = code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM)
            detail = str(error)
        else:
            full = error.errno in (errno.ENOSPC, errno.EDQUOT)
            read_only = error.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            detail = error.strerror or str(error)
        if not full and not read_only:
            full = _nearly_full(directory)
        if not full and not read_only and not os.access(directory, os.W_OK):
            read_only = True
        what = "full" if full else "read-only" if read_only else "failing"
        return StateUnavailableError(f"state directory {what}: {directory}: {detail}", full=full)

    # -------------------------------------------------------------------- counters, settings

    def save_counter(self, name: str, value: int) -> None:
        """Record the last number handed out under ``name`` (once per transaction: the tables
        hand numbers out in memory and write each counter that moved when they commit)."""
        self._write(
            "counters",
            name,
            "INSERT INTO counters(name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    def counter(self, name: str) -> int:
        self._flush()
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def setting(self, name: str) -> str | None:
        """A value the RM keeps across restarts (its cluster id, its bound port)."""
        row = self._db.execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
        return str(row[0]) if row else None

    def save_setting(self, name: str, value: str) -> None:
        """Write one setting in a transaction of its own (called outside requests)."""
        try:
            self._db.execute(
                "INSERT INTO settings(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (name, value),
            )
        except sqlite3.OperationalError as error:
            raise self._unavailable(error) from None

    # -------------------------------------------------------------------- jobs

    def save_spec(self, job_id: str, spec: JobSpec) -> None:
        self._write(
            "job_specs",
            job_id,
            "INSERT OR REPLACE INTO job_specs (job_id, spec) VALUES (?, ?)",
            (job_id, json.dumps(job_spec_to_document(spec))),
        )

    def save_job(self, job: JobRecord) -> None:
        self._write(
            "jobs",
            job.job_id,
            f"INSERT OR REPLACE INTO jobs ({_JOB_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                job.job_id,
                job.seq,
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
                job.owner,
                _dias_text(job),
            ),
        )

    def load_job(self, job_id: str) -> JobRecord | None:
        rows = self._jobs("WHERE jobs.job_id = ?", (job_id,))
        return next(rows, None)

    def list_jobs(self) -> Iterator[JobRecord]:
        return self._jobs("", ())

    def _jobs(self, where: str, parameters: tuple[str, ...]) -> Iterator[JobRecord]:
        """Jobs with their specs.  A job whose spec this version no longer accepts (stored
        before a rule was added, e.g. a priority beyond int32) is left in the database,
        untouched, and listed in :attr:`unreadable_jobs` instead of failing the RM for every
        user."""
        columns = ", ".join(f"jobs.{c.strip()}" for c in _JOB_COLUMNS.split(","))
        query = (
            f"SELECT {columns}, job_specs.spec FROM jobs "
            f"JOIN job_specs ON job_specs.job_id = jobs.job_id {where} ORDER BY jobs.seq"
        )
        self._flush()
        for row in self._db.execute(query, parameters).fetchall():
            try:
                spec = parse_job_spec(json.loads(row[16]))
            except (SpecError, ValueError) as error:
                if str(row[0]) not in self._unreadable:
                    self._unreadable.add(str(row[0]))
                    self.unreadable_jobs.append((str(row[0]), str(error)))
                continue
            yield JobRecord(
                job_id=row[0],
                seq=row[1],
                spec=spec,
                state=JobState(row[2]),
                submit_time=row[3],
                client_mode=bool(row[4]),
                kill_requested=bool(row[5]),
                start_time=row[6],
                finish_time=row[7],
                message=row[8],
                progress=tuple(PhaseProgress(**p) for p in json.loads(row[9])),
                master_node=row[10],
                master_allocation=row[11],
                master_attempt=row[12],
                idempotency_key=row[13],
                owner=row[14],
                execution=_execution_from(row[15]),
                approximation=_approximation_from(row[15]),
            )

    def load_hot(self) -> HotState:
        """Jobs not final, or final and still holding a container; their tasks; every
        allocation."""
        jobs = tuple(
            self._jobs(
                f"WHERE jobs.state NOT IN {_FINAL_STATES} "
                "OR jobs.job_id IN (SELECT job_id FROM allocations)",
                (),
            )
        )
        tasks = tuple(t for job in jobs for t in self.tasks_of_job(job.job_id))
        return HotState(jobs, tasks, tuple(self._load_allocations()))

    # -------------------------------------------------------------------- tasks

    def save_task(self, task: TaskRecord) -> None:
        self._write(
            "tasks",
            task.key,
            f"INSERT OR REPLACE INTO tasks ({_TASK_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                int(task.preempted),
                _steps_text(task.preemptions),
                task.execution,
            ),
        )

    def tasks_of_job(self, job_id: str) -> list[TaskRecord]:
        self._flush()
        rows = self._db.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE job_id = ? ORDER BY seq", (job_id,)
        )
        return [
            TaskRecord(
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
                preempted=bool(row[12]),
                preemptions=_steps_from(row[13]),
                execution=row[14],
            )
            for row in rows.fetchall()
        ]

    # -------------------------------------------------------------------- allocations

    def save_allocation(self, allocation: AllocationRecord) -> None:
        self._write(
            "allocations",
            allocation.allocation_id,
            f"INSERT OR REPLACE INTO allocations ({_ALLOCATION_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                allocation.goal.value,
                *_limits_row(allocation.limits),
                allocation.goal_reason,
                allocation.shown.value,
                *_limits_row(allocation.shown_limits),
                allocation.preempted_at,
                allocation.kept_for,
                allocation.kept_until,
                allocation.held_by,
            ),
        )

    def delete_allocation(self, allocation_id: str) -> None:
        self._write(
            "allocations",
            allocation_id,
            "DELETE FROM allocations WHERE allocation_id = ?",
            (allocation_id,),
        )

    def _load_allocations(self) -> Iterator[AllocationRecord]:
        self._flush()
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
                goal=Goal(row[9]),
                limits=_limits_from(row[10], row[11]),
                goal_reason=row[12],
                shown=Shown(row[13]),
                shown_limits=_limits_from(row[14], row[15]),
                preempted_at=row[16],
                kept_for=row[17],
                kept_until=row[18],
                held_by=row[19],
            )


_NEARLY_FULL_BYTES = 64 * 1024


def _nearly_full(directory: str) -> bool:
    """Less free space than a transaction needs (or the directory cannot be asked)."""
    try:
        found = os.statvfs(directory)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < _NEARLY_FULL_BYTES


def _limits_row(limits: Resources | None) -> tuple[float | None, int | None]:
    return (None, None) if limits is None else (limits.cpu, limits.memory_mb)


def _limits_from(cpu: float | None, memory_mb: int | None) -> Resources | None:
    return None if cpu is None or memory_mb is None else Resources(cpu=cpu, memory_mb=memory_mb)


def _steps_text(steps: tuple[PreemptionStep, ...]) -> str:
    if not steps:
        return ""
    return json.dumps(
        [
            {
                "time": step.time,
                "action": step.action,
                "limits": None if step.limits is None else list(step.limits),
                "reason": step.reason,
                "work_lost_s": step.work_lost_s,
            }
            for step in steps
        ]
    )


def _steps_from(text: str) -> tuple[PreemptionStep, ...]:
    if not text:
        return ()
    return tuple(
        PreemptionStep(
            time=float(item["time"]),
            action=str(item["action"]),
            limits=None
            if item["limits"] is None
            else Resources(cpu=float(item["limits"][0]), memory_mb=int(item["limits"][1])),
            reason=str(item["reason"]),
            work_lost_s=float(item["work_lost_s"]),
        )
        for item in json.loads(text)
    )


def _dias_text(job: JobRecord) -> str:
    """What DiAS keeps of a job, as JSON (empty when it is all defaults)."""
    record: dict[str, object] = {}
    if job.execution != Execution():
        record["execution"] = asdict(job.execution)
    if job.approximation != Approximation():
        record["approximation"] = asdict(job.approximation)
    return json.dumps(record, sort_keys=True) if record else ""


def _approximation_from(text: str) -> Approximation:
    fields = json.loads(text).get("approximation", {}) if text else {}
    return Approximation(
        drop_ratio=float(fields.get("drop_ratio", 0.0)),
        dropped_tasks=int(fields.get("dropped_tasks", 0)),
        expected_error=float(fields.get("expected_error", 0.0)),
    )


def _execution_from(text: str) -> Execution:
    if not text:
        return Execution()
    fields = json.loads(text).get("execution", {})
    return Execution(
        number=int(fields.get("number", 1)),
        dispatched_at=float(fields.get("dispatched_at", 0.0)),
        evictions=int(fields.get("evictions", 0)),
        wasted_s=float(fields.get("wasted_s", 0.0)),
        sprinted_s=float(fields.get("sprinted_s", 0.0)),
    )
