"""Where the resource manager keeps what must survive it: the store interface, and an in-memory
store for tests and the simulator.

The resource manager's :class:`~resource_manager.tables.Tables` writes through to a
:class:`Store` inside transactions: one per RPC or per scheduling pass (group commit), opened
with :meth:`Store.begin` and ended with :meth:`Store.commit` or :meth:`Store.rollback`.  A job's
spec is written once, when it is submitted (:meth:`Store.save_spec`); every later change writes
only the job's mutable state (:meth:`Store.save_job`).

Only jobs that are not final, or still hold containers, are kept in memory (the *hot* state,
:meth:`Store.load_hot`); the others are read back from the store when asked for
(:meth:`Store.load_job`, :meth:`Store.list_jobs`, :meth:`Store.tasks_of_job`).

Two implementations: :class:`resource_manager.sqlite_store.SqliteStore` (the RM's, durable, with
schema migrations) and :class:`MemoryStore` (nothing durable: the simulator, tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from policies.scheduling.jobspec import JobSpec
from resource_manager.records import AllocationRecord, JobRecord, TaskKey, TaskRecord

K = TypeVar("K")
V = TypeVar("V")


class StoreError(Exception):
    """The state directory holds something this version cannot read."""


@dataclass(frozen=True)
class HotState:
    """What a resource manager needs in memory to resume: jobs not final (and final jobs that
    still hold containers), their task attempts, and every allocation."""

    jobs: tuple[JobRecord, ...]
    tasks: tuple[TaskRecord, ...]
    allocations: tuple[AllocationRecord, ...]


class Store(Protocol):
    """Durable records of jobs, task attempts and allocations.  Not thread-safe."""

    unreadable_jobs: list[tuple[str, str]]
    """(job id, why) of stored jobs this version cannot read, found by the last load."""

    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...

    def counter(self, name: str) -> int:
        """The last number handed out under ``name`` (0 if none)."""
        ...

    def save_counter(self, name: str, value: int) -> None: ...
    def setting(self, name: str) -> str | None: ...
    def save_setting(self, name: str, value: str) -> None: ...

    def save_spec(self, job_id: str, spec: JobSpec) -> None:
        """Write a job's spec: once, when it is submitted."""
        ...

    def save_job(self, job: JobRecord) -> None:
        """Write a job's mutable state (its spec was saved with :meth:`save_spec`)."""
        ...

    def load_job(self, job_id: str) -> JobRecord | None: ...
    def list_jobs(self) -> Iterator[JobRecord]:
        """Every readable job, in submission order."""
        ...

    def save_task(self, task: TaskRecord) -> None: ...
    def tasks_of_job(self, job_id: str) -> list[TaskRecord]: ...
    def save_allocation(self, allocation: AllocationRecord) -> None: ...
    def delete_allocation(self, allocation_id: str) -> None: ...
    def load_hot(self) -> HotState: ...


@dataclass
class MemoryStore:
    """A :class:`Store` that keeps everything in dictionaries: transactions are undo logs, and
    nothing survives the process.  For the simulator and for tests."""

    unreadable_jobs: list[tuple[str, str]] = field(default_factory=list)
    _specs: dict[str, JobSpec] = field(default_factory=dict)
    _jobs: dict[str, JobRecord] = field(default_factory=dict)
    _tasks: dict[str, dict[TaskKey, TaskRecord]] = field(default_factory=dict)
    _allocations: dict[str, AllocationRecord] = field(default_factory=dict)
    _counters: dict[str, int] = field(default_factory=dict)
    _settings: dict[str, str] = field(default_factory=dict)
    _undo: list[Callable[[], None]] | None = None

    def begin(self) -> None:
        self._undo = []

    def commit(self) -> None:
        self._undo = None

    def rollback(self) -> None:
        undo, self._undo = self._undo or [], None
        for step in reversed(undo):
            step()

    def close(self) -> None:
        pass

    def _change(self, table: dict[K, V], key: K, value: V | None) -> None:
        previous = table.get(key)
        if self._undo is not None:
            self._undo.append(lambda: _put(table, key, previous))
        _put(table, key, value)

    def counter(self, name: str) -> int:
        return self._counters.get(name, 0)

    def save_counter(self, name: str, value: int) -> None:
        self._change(self._counters, name, value)

    def setting(self, name: str) -> str | None:
        return self._settings.get(name)

    def save_setting(self, name: str, value: str) -> None:
        self._settings[name] = value

    def save_spec(self, job_id: str, spec: JobSpec) -> None:
        self._change(self._specs, job_id, spec)

    def save_job(self, job: JobRecord) -> None:
        self._change(self._jobs, job.job_id, job)

    def load_job(self, job_id: str) -> JobRecord | None:
        return self._jobs.get(job_id)

    def list_jobs(self) -> Iterator[JobRecord]:
        return iter(sorted(self._jobs.values(), key=lambda j: j.seq))

    def save_task(self, task: TaskRecord) -> None:
        self._change(self._tasks.setdefault(task.job_id, {}), task.key, task)

    def tasks_of_job(self, job_id: str) -> list[TaskRecord]:
        return list(self._tasks.get(job_id, {}).values())

    def save_allocation(self, allocation: AllocationRecord) -> None:
        self._change(self._allocations, allocation.allocation_id, allocation)

    def delete_allocation(self, allocation_id: str) -> None:
        self._change(self._allocations, allocation_id, None)

    def load_hot(self) -> HotState:
        holding = {a.job_id for a in self._allocations.values()}
        jobs = tuple(j for j in self.list_jobs() if not j.state.is_final or j.job_id in holding)
        tasks = tuple(t for j in jobs for t in self._tasks.get(j.job_id, {}).values())
        return HotState(jobs, tasks, tuple(self._allocations.values()))


def _put(table: dict[K, V], key: K, value: V | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
