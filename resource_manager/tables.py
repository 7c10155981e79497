"""The resource manager's records in memory, with the indexes its requests need, written
through to the :class:`Store`, and undone as a unit when a request fails.

Every change is a ``put_*`` or ``remove_*`` of an immutable record.  Between :meth:`Tables.begin`
and :meth:`Tables.commit` each change is journalled with what it replaced, and written to the
store inside one SQLite transaction; :meth:`Tables.rollback` restores memory from the journal
and rolls the store back, so a request that raises halfway leaves both exactly as they were.

Indexes keep every request at O(what it touches): a job's tasks (with their event sequence,
so "events after n" is a bisect) and allocations (with those not yet delivered), a node's
allocations, live tasks and allocated total, what each kind of allocation holds, the jobs not
yet final, and submissions by idempotency key.  Ready nodes are kept in a
:class:`~policies.scheduling.capacity_index.CapacityIndex` for placement.

Only the *hot* state is in memory: jobs not final, or still holding a container, and their task
attempts.  When a unit of work commits, final jobs that hold nothing leave memory; they stay in
the store, and :meth:`Tables.find_job` and :meth:`Tables.tasks_of_job` read them from there.

Sequence numbers (jobs, allocations, events) are handed out in memory and each counter that
moved is written once when the unit commits: a unit costs one row per counter, not one per id.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import TypeVar

from policies.scheduling.capacity_index import CapacityIndex
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.allocation_indexes import AllocationIndexes, Index
from resource_manager.records import (
    AllocationRecord,
    JobRecord,
    NodeRecord,
    NodeState,
    TaskKey,
    TaskRecord,
    evolve,
)
from resource_manager.store import Store

_IN_EXECUTION = frozenset({JobState.STARTING, JobState.RUNNING})

K = TypeVar("K")
V = TypeVar("V")


def open_tasks(job: JobRecord) -> int:
    """A job's tasks neither succeeded nor given up on."""
    return sum(p.tasks - p.succeeded - p.dropped for p in job.progress)


class Tables(AllocationIndexes):
    """Jobs, task attempts, allocations and nodes.  Not thread-safe: one request at a time.
    The allocations' indexes are its base's (:class:`AllocationIndexes`); it journals and
    stores every change."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self._store = store
        self.jobs: dict[str, JobRecord] = {}  # the hot jobs
        self.tasks: dict[TaskKey, TaskRecord] = {}  # the hot jobs' task attempts
        self.nodes: dict[str, NodeRecord] = {}
        self.active_jobs: dict[str, None] = {}  # not final, in submission order
        # In execution: a job master's container granted (or a client's registered), not final.
        self.in_execution: dict[str, None] = {}
        # owner -> tasks of their unfinished jobs not yet done (the per-user limit)
        self.open_tasks_by_owner: dict[str, int] = {}
        self.capacity = CapacityIndex()  # ready nodes, for placement
        self.liveness: list[tuple[float, str]] = []  # (last_seen, node): a heap, lazily
        self._job_by_key: dict[str, str] = {}
        self._tasks_of_job: Index[TaskKey] = Index()
        self._events_of_job: dict[str, list[tuple[int, TaskKey]]] = {}  # ascending seq
        self._live_tasks_of_node: Index[TaskKey] = Index()
        self._counters: dict[str, int] = {}
        self._moved_counters: set[str] = set()
        self._journal: list[Callable[[], None]] | None = None
        self._store_open = False
        self.changed_jobs: set[str] = set()
        self.version = 0  # moves with every change of a job or an allocation
        self._touched_jobs: set[str] = set()
        # job -> its hot attempts in state RUNNING; with ``running_changed`` set (the DiAS sprint
        # budget watches), the jobs whose count went from or to 0 since it was last emptied
        self.running_of_job: dict[str, int] = {}
        self.running_changed: dict[str, None] | None = None
        hot = store.load_hot()
        for job in hot.jobs:
            self._index_job(None, job)
        for task in sorted(hot.tasks, key=lambda t: t.seq):
            self._index_task(None, task)
            self._events_of_job.setdefault(task.job_id, []).append((task.seq, task.key))
        for allocation in hot.allocations:
            self._index_allocation(None, allocation)

    # ------------------------------------------------------------------ units of work

    def begin(self) -> None:
        """Start a unit: every change until commit or rollback is one transaction."""
        if self._journal is not None:
            raise RuntimeError("a unit of work is already open")
        self._journal = []
        self._store_open = False  # the store's transaction begins with the unit's first write

    def commit(self) -> set[str]:
        """Make the unit durable; return the ids of the jobs it changed (for watchers).  Final
        jobs that hold nothing leave memory.

        If the store cannot take the unit (e.g. a full state directory) the unit is rolled
        back, in memory and in the store, exactly as :meth:`rollback` does, and the store's
        error is raised: nobody sees half of a unit, and the next :meth:`begin` works."""
        if self._journal is None:
            raise RuntimeError("no unit of work is open")
        try:
            if self._moved_counters:
                for name in self._moved_counters:
                    self._writing().save_counter(name, self._counters[name])
                self._moved_counters.clear()
            if self._store_open:
                self._store.commit()
                self._store_open = False
        except BaseException:
            self.rollback()
            raise
        self._journal = None
        if self._touched_jobs:
            for job_id in self._touched_jobs:
                self._evict_if_cold(job_id)
            self._touched_jobs.clear()
        changed = self.changed_jobs
        if changed:  # (a unit that changed no job, most of them, allocates no new set)
            self.changed_jobs = set()
        return changed

    def rollback(self) -> None:
        """Undo every change of the unit, in memory and in the store (memory even if the
        store's rollback fails)."""
        journal, self._journal = self._journal, None
        store_open, self._store_open = self._store_open, False
        try:
            if store_open:
                self._store.rollback()
        finally:
            for undo in reversed(journal or []):
                undo()
            self.changed_jobs = set()
            self._touched_jobs.clear()
            self._moved_counters.clear()

    def _writing(self) -> Store:
        """The store, inside this unit's transaction (begun now if this is its first write: a
        unit that writes nothing, such as a heartbeat that changes nothing, costs no
        transaction)."""
        if not self._store_open:
            self._store.begin()
            self._store_open = True
        return self._store

    @property
    def in_unit(self) -> bool:
        return self._journal is not None

    def setting(self, name: str) -> str | None:
        """A value kept across restarts (as written by committed units)."""
        return self._store.setting(name)

    def save_setting(self, name: str, value: str) -> None:
        """Keep ``value`` under ``name``, with this unit (a rolled-back unit writes nothing)."""
        self._writing().save_setting(name, value)

    def next_counter(self, name: str) -> int:
        """A durable sequence number; a rolled-back unit gives its numbers back."""
        if name not in self._counters:
            self._counters[name] = self._store.counter(name)
        value = self._counters[name] + 1
        self._counters[name] = value
        self._moved_counters.add(name)
        self.journal(lambda: self._counters.__setitem__(name, value - 1))
        return value

    def journal(self, undo: Callable[[], None]) -> None:
        """Remember how to undo a change the caller made to state of its own (soft state kept
        next to the tables), should the unit roll back."""
        if self._journal is None:
            raise RuntimeError("changes need a unit of work (begin/commit)")
        self._journal.append(undo)

    # ------------------------------------------------------------------ jobs

    def put_job(self, job: JobRecord) -> None:
        self.version += 1
        previous = self.jobs.get(job.job_id)
        self.journal(lambda: self._index_job(job, previous))
        if previous is None:
            self._writing().save_spec(job.job_id, job.spec)
        self._writing().save_job(job)
        self._index_job(previous, job)
        self.changed_jobs.add(job.job_id)
        self._touched_jobs.add(job.job_id)

    def _count_open_tasks(self, job: JobRecord, sign: int) -> None:
        if job.state.is_final or not job.owner:
            return
        count = self.open_tasks_by_owner.get(job.owner, 0) + sign * open_tasks(job)
        if count:
            self.open_tasks_by_owner[job.owner] = count
        else:
            self.open_tasks_by_owner.pop(job.owner, None)

    def find_job(self, job_id: str) -> JobRecord | None:
        """A job, hot or from the store."""
        job = self.jobs.get(job_id)
        return job if job is not None else self._store.load_job(job_id)

    def all_jobs(self) -> list[JobRecord]:
        """Every job, in submission order (the cold ones read from the store)."""
        stored = {job.job_id: job for job in self._store.list_jobs()}
        stored.update(self.jobs)
        return sorted(stored.values(), key=lambda j: j.seq)

    def job_by_key(self, key: str) -> JobRecord | None:
        job_id = self._job_by_key.get(key)
        return None if job_id is None else self.find_job(job_id)

    def _index_job(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """Replace ``old`` by ``new`` in memory (either may be None)."""
        if old is not None:
            del self.jobs[old.job_id]
            self.active_jobs.pop(old.job_id, None)
            self.in_execution.pop(old.job_id, None)
            self._count_open_tasks(old, -1)
        if new is not None:
            self.jobs[new.job_id] = new
            if not new.state.is_final:
                self.active_jobs[new.job_id] = None
            if new.state in _IN_EXECUTION:
                self.in_execution[new.job_id] = None
            self._count_open_tasks(new, +1)
            if new.idempotency_key:
                self._job_by_key[new.idempotency_key] = new.job_id
        elif old is not None and old.idempotency_key:
            self._job_by_key.pop(old.idempotency_key, None)

    def _evict_if_cold(self, job_id: str) -> None:
        """A final job holding no container leaves memory (it stays in the store).  Its
        idempotency key stays known, so a repeated submission still finds it."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.is_final or job_id in self._allocations_of_job.groups:
            return
        del self.jobs[job_id]
        self.active_jobs.pop(job_id, None)
        for key in self._tasks_of_job.get(job_id):
            task = self.tasks.pop(key)
            self._live_tasks_of_node.discard(task.node_id, key)
        self._tasks_of_job.groups.pop(job_id, None)
        self._events_of_job.pop(job_id, None)
        self.running_of_job.pop(job_id, None)  # (a final job's attempts run no more)

    # ------------------------------------------------------------------ tasks

    def put_task(self, task: TaskRecord) -> None:
        previous = self.tasks.get(task.key)
        self.journal(lambda: self._index_task(task, previous))
        self._writing().save_task(task)
        self._index_task(previous, task)
        events = self._events_of_job.setdefault(task.job_id, [])
        if not events or task.seq > events[-1][0]:
            events.append((task.seq, task.key))
            self.journal(lambda: events.remove((task.seq, task.key)))
        self._touched_jobs.add(task.job_id)

    def tasks_of_job(self, job_id: str) -> list[TaskRecord]:
        if job_id in self.jobs:
            return [self.tasks[key] for key in self._tasks_of_job.get(job_id)]
        return self._store.tasks_of_job(job_id)

    def tasks_after(self, job_id: str, seq: int) -> list[TaskRecord]:
        """A hot job's task attempts changed after event ``seq``, in sequence order: a bisect."""
        events = self._events_of_job.get(job_id)
        if not events or events[-1][0] <= seq:
            return []  # nothing new (most rounds)
        start = bisect.bisect_right(events, seq, key=_event_seq)
        changed = []
        for event_seq, key in events[start:]:
            task = self.tasks.get(key)
            if task is not None and task.seq == event_seq:  # its latest change, not a stale one
                changed.append(task)
        return changed

    def foreign_holder(
        self,
        node_id: str,
        job_id: str,
        task_id: str,
        attempt: int,
        allocation_id: str,
        job_master: bool = False,
    ) -> str | None:
        """The other node these tables put a reported process on, or None if they put it on
        ``node_id`` or know nothing of it (an unknown report changes nothing anyway).  Checked:
        the container the report names, the task attempt it names (a report is applied to the
        attempt's own container, whatever container it names), and for a job master whose
        container is gone, the job's job master node.  O(1): a node's reports cost what they
        are."""
        allocation = self.allocations.get(allocation_id)
        if allocation is not None and allocation.node_id != node_id:
            return allocation.node_id
        if job_master:
            if allocation is None:
                job = self.jobs.get(job_id)
                if (
                    job is not None
                    and job.master_allocation == allocation_id
                    and job.master_node not in ("", node_id)
                ):
                    return job.master_node
            return None
        task = self.tasks.get((job_id, task_id, attempt))
        if task is not None and task.node_id != node_id:
            return task.node_id
        return None

    def live_tasks_of_node(self, node_id: str) -> list[TaskRecord]:
        return [self.tasks[key] for key in self._live_tasks_of_node.get(node_id)]

    def nodes_holding_work(self) -> set[str]:
        """The nodes that hold a container or a live task attempt (a restarted RM waits for
        each of them to register).  O(such nodes)."""
        return set(self._allocations_of_node.groups) | set(self._live_tasks_of_node.groups)

    def _index_task(self, old: TaskRecord | None, new: TaskRecord | None) -> None:
        self._count_running(old, -1)
        self._count_running(new, 1)
        if old is not None and new is not None and old.node_id == new.node_id:
            # The same attempt in a new state (every task event): only liveness may move.
            self.tasks[new.key] = new
            if old.state.is_final != new.state.is_final:
                if new.state.is_final:
                    self._live_tasks_of_node.discard(new.node_id, new.key)
                else:
                    self._live_tasks_of_node.add(new.node_id, new.key)
            return
        if old is not None:
            del self.tasks[old.key]
            self._tasks_of_job.discard(old.job_id, old.key)
            self._live_tasks_of_node.discard(old.node_id, old.key)
        if new is not None:
            self.tasks[new.key] = new
            self._tasks_of_job.add(new.job_id, new.key)
            if not new.state.is_final:
                self._live_tasks_of_node.add(new.node_id, new.key)

    def _count_running(self, task: TaskRecord | None, sign: int) -> None:
        if task is None or task.state is not TaskState.RUNNING:
            return
        count = self.running_of_job.get(task.job_id, 0) + sign
        if count > 0:
            self.running_of_job[task.job_id] = count
        else:
            self.running_of_job.pop(task.job_id, None)
        if self.running_changed is not None and count == max(sign, 0):  # (0 -> 1, or 1 -> 0)
            self.running_changed[task.job_id] = None

    # ------------------------------------------------------------------ allocations

    def put_allocation(self, allocation: AllocationRecord) -> None:
        self.version += 1
        previous = self.allocations.get(allocation.allocation_id)
        self.journal(lambda: self._index_allocation(allocation, previous))
        self._writing().save_allocation(allocation)
        self._index_allocation(previous, allocation)
        self._touched_jobs.add(allocation.job_id)

    def remove_allocation(self, allocation_id: str) -> AllocationRecord | None:
        previous = self.allocations.get(allocation_id)
        if previous is None:
            return None
        self.version += 1
        self.journal(lambda: self._index_allocation(None, previous))
        self._writing().delete_allocation(allocation_id)
        self._index_allocation(previous, None)
        self._touched_jobs.add(previous.job_id)
        return previous

    def mark_delivered(self, allocation_id: str) -> AllocationRecord:
        """The container, now told to its job master.  What its node holds is unchanged, so
        only the delivery indexes move (every grant passes here: kept cheap)."""
        old = self.allocations[allocation_id]
        new = evolve(old, delivered=True)
        self.version += 1
        self.journal(lambda: self._move_delivery(new, old))
        self._writing().save_allocation(new)
        self._move_delivery(old, new)
        self._touched_jobs.add(new.job_id)
        return new

    # ------------------------------------------------------------------ nodes (memory only)

    def put_node(self, node: NodeRecord) -> None:
        previous = self.nodes.get(node.node_id)
        self.journal(lambda: self._set_node(node.node_id, previous))
        self._set_node(node.node_id, node)

    def silent_nodes(self, before: float) -> list[str]:
        """Ready nodes last seen before ``before`` (monotonic): O(log n) per heartbeat since the
        last call, never a scan of every node.  Entries of later heartbeats are skipped."""
        silent = []
        while self.liveness and self.liveness[0][0] < before:
            last_seen, node_id = heapq.heappop(self.liveness)
            node = self.nodes.get(node_id)
            if node is not None and node.state is NodeState.READY and node.last_seen == last_seen:
                silent.append(node_id)
                entry = (last_seen, node_id)
                self.journal(lambda entry=entry: heapq.heappush(self.liveness, entry))  # type: ignore[misc]
        return silent

    def oldest_heartbeat(self) -> float | None:
        """The earliest last_seen of a ready node (skipping stale heap entries), or None."""
        while self.liveness:
            last_seen, node_id = self.liveness[0]
            node = self.nodes.get(node_id)
            if node is not None and node.state is NodeState.READY and node.last_seen == last_seen:
                return last_seen
            heapq.heappop(self.liveness)
        return None

    def remove_node(self, node_id: str) -> None:
        previous = self.nodes.get(node_id)
        if previous is not None:
            self.journal(lambda: self._set_node(node_id, previous))
            self._set_node(node_id, None)

    def _set_node(self, node_id: str, node: NodeRecord | None) -> None:
        previous = self.nodes.get(node_id)
        if node is None:
            self.nodes.pop(node_id, None)
        else:
            self.nodes[node_id] = node
            if node.state is NodeState.READY and (
                previous is None or previous.last_seen != node.last_seen
            ):
                heapq.heappush(self.liveness, (node.last_seen, node_id))
        if (
            previous is None
            or node is None
            or previous.state is not node.state
            or previous.capacity != node.capacity
        ):
            self.refresh_capacity(node_id)

    def refresh_capacity(self, node_id: str) -> None:
        """Keep the capacity index in step: ready nodes with what is allocated on them."""
        node = self.nodes.get(node_id)
        if node is None or node.state is not NodeState.READY:
            self.capacity.remove(node_id)
        else:
            if node_id not in self.capacity:
                self.freed = True  # a node (re)joined
            self.capacity.set(node_id, node.capacity, self.allocated_on(node_id))


def _event_seq(event: tuple[int, TaskKey]) -> int:
    return event[0]
