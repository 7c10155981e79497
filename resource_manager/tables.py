"""The resource manager's records in memory, with the indexes its requests need, written
through to the :class:`Store`, and undone as a unit when a request fails.

Every change is a ``put_*`` or ``remove_*`` of an immutable record.  Between :meth:`Tables.begin`
and :meth:`Tables.commit` each change is journalled with what it replaced, and written to the
store inside one SQLite transaction; :meth:`Tables.rollback` restores memory from the journal
and rolls the store back, so a request that raises halfway leaves both exactly as they were.

Indexes keep every request at O(what it touches): a job's tasks and allocations, a node's
allocations and live tasks, the jobs not yet final, and submissions by idempotency key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from resource_manager.records import (
    AllocationRecord,
    JobRecord,
    NodeRecord,
    TaskKey,
    TaskRecord,
)
from resource_manager.store import Store

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class _Index(Generic[K]):
    """group -> keys, insertion-ordered (dict as an ordered set)."""

    groups: dict[str, dict[K, None]] = field(default_factory=dict)

    def add(self, group: str, key: K) -> None:
        self.groups.setdefault(group, {})[key] = None

    def discard(self, group: str, key: K) -> None:
        members = self.groups.get(group)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self.groups[group]

    def get(self, group: str) -> Iterable[K]:
        return tuple(self.groups.get(group, ()))


class Tables:
    """Jobs, task attempts, allocations and nodes.  Not thread-safe: one request at a time."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.jobs: dict[str, JobRecord] = {}
        self.tasks: dict[TaskKey, TaskRecord] = {}
        self.allocations: dict[str, AllocationRecord] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self.active_jobs: dict[str, None] = {}  # not final, in submission order
        self._job_by_key: dict[str, str] = {}
        self._tasks_of_job: _Index[TaskKey] = _Index()
        self._live_tasks_of_node: _Index[TaskKey] = _Index()
        self._allocations_of_job: _Index[str] = _Index()
        self._allocations_of_node: _Index[str] = _Index()
        self._journal: list[Callable[[], None]] | None = None
        self.changed_jobs: set[str] = set()
        for job in store.load_jobs():
            self._index_job(None, job)
        for task in store.load_tasks():
            self._index_task(None, task)
        for allocation in store.load_allocations():
            self._index_allocation(None, allocation)

    # ------------------------------------------------------------------ units of work

    def begin(self) -> None:
        """Start a unit: every change until commit or rollback is one transaction."""
        if self._journal is not None:
            raise RuntimeError("a unit of work is already open")
        self._journal = []
        self._store.begin()

    def commit(self) -> set[str]:
        """Make the unit durable; return the ids of the jobs it changed (for watchers)."""
        if self._journal is None:
            raise RuntimeError("no unit of work is open")
        self._store.commit()
        self._journal = None
        changed, self.changed_jobs = self.changed_jobs, set()
        return changed

    def rollback(self) -> None:
        """Undo every change of the unit, in memory and in the store."""
        journal, self._journal = self._journal, None
        self._store.rollback()
        for undo in reversed(journal or []):
            undo()
        self.changed_jobs = set()

    def next_counter(self, name: str) -> int:
        """A durable sequence number; a rolled-back unit gives its numbers back."""
        return self._store.next_counter(name)

    def journal(self, undo: Callable[[], None]) -> None:
        """Remember how to undo a change the caller made to state of its own (soft state kept
        next to the tables), should the unit roll back."""
        if self._journal is None:
            raise RuntimeError("changes need a unit of work (begin/commit)")
        self._journal.append(undo)

    # ------------------------------------------------------------------ jobs

    def put_job(self, job: JobRecord) -> None:
        previous = self.jobs.get(job.job_id)
        self.journal(lambda: self._index_job(job, previous))
        self._store.save_job(job)
        self._index_job(previous, job)
        self.changed_jobs.add(job.job_id)

    def job_by_key(self, key: str) -> JobRecord | None:
        job_id = self._job_by_key.get(key)
        return None if job_id is None else self.jobs[job_id]

    def _index_job(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """Replace ``old`` by ``new`` in memory (either may be None)."""
        if old is not None:
            del self.jobs[old.job_id]
            self.active_jobs.pop(old.job_id, None)
            if old.idempotency_key:
                self._job_by_key.pop(old.idempotency_key, None)
        if new is not None:
            self.jobs[new.job_id] = new
            if not new.state.is_final:
                self.active_jobs[new.job_id] = None
            if new.idempotency_key:
                self._job_by_key[new.idempotency_key] = new.job_id

    # ------------------------------------------------------------------ tasks

    def put_task(self, task: TaskRecord) -> None:
        previous = self.tasks.get(task.key)
        self.journal(lambda: self._index_task(task, previous))
        self._store.save_task(task)
        self._index_task(previous, task)

    def tasks_of_job(self, job_id: str) -> list[TaskRecord]:
        return [self.tasks[key] for key in self._tasks_of_job.get(job_id)]

    def live_tasks_of_node(self, node_id: str) -> list[TaskRecord]:
        return [self.tasks[key] for key in self._live_tasks_of_node.get(node_id)]

    def _index_task(self, old: TaskRecord | None, new: TaskRecord | None) -> None:
        if old is not None:
            del self.tasks[old.key]
            self._tasks_of_job.discard(old.job_id, old.key)
            self._live_tasks_of_node.discard(old.node_id, old.key)
        if new is not None:
            self.tasks[new.key] = new
            self._tasks_of_job.add(new.job_id, new.key)
            if not new.state.is_final:
                self._live_tasks_of_node.add(new.node_id, new.key)

    # ------------------------------------------------------------------ allocations

    def put_allocation(self, allocation: AllocationRecord) -> None:
        previous = self.allocations.get(allocation.allocation_id)
        self.journal(lambda: self._index_allocation(allocation, previous))
        self._store.save_allocation(allocation)
        self._index_allocation(previous, allocation)

    def remove_allocation(self, allocation_id: str) -> AllocationRecord | None:
        previous = self.allocations.get(allocation_id)
        if previous is None:
            return None
        self.journal(lambda: self._index_allocation(None, previous))
        self._store.delete_allocation(allocation_id)
        self._index_allocation(previous, None)
        return previous

    def allocations_of_job(self, job_id: str) -> list[AllocationRecord]:
        return [self.allocations[a] for a in self._allocations_of_job.get(job_id)]

    def allocations_of_node(self, node_id: str) -> list[AllocationRecord]:
        return [self.allocations[a] for a in self._allocations_of_node.get(node_id)]

    def _index_allocation(self, old: AllocationRecord | None, new: AllocationRecord | None) -> None:
        if old is not None:
            del self.allocations[old.allocation_id]
            self._allocations_of_job.discard(old.job_id, old.allocation_id)
            self._allocations_of_node.discard(old.node_id, old.allocation_id)
        if new is not None:
            self.allocations[new.allocation_id] = new
            self._allocations_of_job.add(new.job_id, new.allocation_id)
            self._allocations_of_node.add(new.node_id, new.allocation_id)

    # ------------------------------------------------------------------ nodes (memory only)

    def put_node(self, node: NodeRecord) -> None:
        previous = self.nodes.get(node.node_id)
        self.journal(lambda: self._set_node(node.node_id, previous))
        self._set_node(node.node_id, node)

    def remove_node(self, node_id: str) -> None:
        previous = self.nodes.get(node_id)
        if previous is not None:
            self.journal(lambda: self._set_node(node_id, previous))
            self._set_node(node_id, None)

    def _set_node(self, node_id: str, node: NodeRecord | None) -> None:
        if node is None:
            self.nodes.pop(node_id, None)
        else:
            self.nodes[node_id] = node
