"""The resource manager's bookkeeping: jobs, nodes, allocations and task attempts.

This is the RM without its network: every method is one request or one tick, takes the time now
as an argument, writes through to the :class:`Store` and returns what the caller must send.  The
placement decision itself is the pure :func:`policies.scheduling.priority_fifo.place`.  Not
thread-safe: the gRPC layer serialises calls with one lock.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from policies.scheduling import priority_fifo
from policies.scheduling.jobspec import JobSpec, SpecError, check_fits_cluster
from policies.scheduling.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    TaskState,
    TransitionError,
    check_transition,
)
from policies.scheduling.node_liveness import lost_nodes
from policies.scheduling.resources import Resources
from resource_manager.records import (
    MASTER_PHASE,
    MASTER_TASK_ID,
    AllocationRecord,
    JobRecord,
    NodeRecord,
    NodeState,
    PhaseProgress,
    TaskObservation,
    TaskRecord,
)
from resource_manager.store import Store

log = logging.getLogger(__name__)

MASTER_RESOURCES = Resources(cpu=0.1, memory_mb=256)


class NotFoundError(KeyError):
    """An unknown job or node id."""

    def __str__(self) -> str:
        return str(self.args[0])


class ConflictError(ValueError):
    """A request that contradicts the job's state (e.g. a second job master)."""


@dataclass(frozen=True)
class LaunchMaster:
    job_id: str
    allocation_id: str
    resources: Resources


@dataclass(frozen=True)
class StopAllocation:
    job_id: str
    allocation_id: str
    reason: str


NodeCommand = LaunchMaster | StopAllocation


@dataclass(frozen=True)
class PhaseAsk:
    phase: str
    count: int
    resources: Resources


@dataclass(frozen=True)
class AllocateResult:
    granted: tuple[AllocationRecord, ...]
    events: tuple[TaskRecord, ...]
    lost_allocations: tuple[str, ...]
    kill_requested: bool


@dataclass
class _JobAsks:
    """Outstanding asks of a running job: phase -> (count still wanted, resources)."""

    by_phase: dict[str, PhaseAsk] = field(default_factory=dict)


class ResourceManagerCore:
    """All state transitions of the RM.  See the module docstring."""

    def __init__(self, store: Store, *, node_timeout: float = 10.0) -> None:
        self._store = store
        self._node_timeout = node_timeout
        self.jobs: dict[str, JobRecord] = {}
        self.tasks: dict[tuple[str, str, int], TaskRecord] = {}
        self.allocations: dict[str, AllocationRecord] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self._asks: dict[str, _JobAsks] = defaultdict(_JobAsks)
        self._commands: dict[str, list[NodeCommand]] = defaultdict(list)
        self._lost_allocations: dict[str, list[str]] = defaultdict(list)
        self.version = 0  # bumped on every change a watcher could see
        for job in store.load_jobs():
            self.jobs[job.job_id] = job
        for task in store.load_tasks():
            self.tasks[task.key] = task
        for allocation in store.load_allocations():
            self.allocations[allocation.allocation_id] = allocation
        # Commands live in memory: a LaunchMaster not yet delivered died with the previous RM.
        # Send it again; an agent that already runs that job master ignores the repeat.
        for job in self.jobs.values():
            master = self.allocations.get(job.master_allocation)
            if job.state is JobState.STARTING and master is not None:
                self._commands[master.node_id].append(
                    LaunchMaster(job.job_id, master.allocation_id, master.resources)
                )

    # ================================================================ clients

    def submit(self, spec: JobSpec, *, client_mode: bool, now: float) -> JobRecord:
        """Accept a validated spec.  Raises SpecError when a phase fits on no node."""
        check_fits_cluster(spec, [n.capacity for n in self._ready_nodes()])
        if not client_mode:
            check_fits_master([n.capacity for n in self._ready_nodes()])
        seq = self._store.next_counter("job")
        job = JobRecord(
            job_id=f"job-{seq:06d}",
            seq=seq,
            spec=spec,
            state=JobState.SUBMITTED,
            submit_time=now,
            client_mode=client_mode,
            progress=tuple(PhaseProgress(p.name, p.tasks, pending=p.tasks) for p in spec.phases),
        )
        self.jobs[job.job_id] = job
        self._save_job(job)
        log.info("job %s (%s, priority %d) submitted", job.job_id, spec.name, spec.priority)
        self._schedule(now)
        return job

    def job(self, job_id: str) -> JobRecord:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise NotFoundError(f"job {job_id!r} not found") from None

    def job_tasks(self, job_id: str) -> list[TaskRecord]:
        self.job(job_id)
        return sorted(
            (t for t in self.tasks.values() if t.job_id == job_id),
            key=lambda t: (t.phase, t.task_id, t.attempt),
        )

    def kill(self, job_id: str, *, now: float, reason: str = "killed by user") -> JobRecord:
        """Kill a job: final at once; its containers are stopped through the nodes' heartbeats."""
        job = self.job(job_id)
        if job.state.is_final:
            return job
        job.kill_requested = True
        self._finish(job, JobState.KILLED, reason, now)
        return job

    # ================================================================ node agents

    def register_node(
        self,
        node_id: str,
        address: str,
        runtime: str,
        capacity: Resources,
        live_tasks: Sequence[TaskObservation],
        *,
        now: float,
    ) -> None:
        previous = self.nodes.get(node_id)
        self.nodes[node_id] = NodeRecord(
            node_id=node_id, address=address, runtime=runtime, capacity=capacity, last_heartbeat=now
        )
        log.info(
            "node %s %s at %s (%s, %g cpu, %d MiB)",
            node_id,
            "re-registered" if previous else "registered",
            address,
            runtime,
            capacity.cpu,
            capacity.memory_mb,
        )
        self._reconcile(node_id, live_tasks, now)
        self._touch()
        self._schedule(now)

    def heartbeat(
        self,
        node_id: str,
        used: Resources,
        live_tasks: Sequence[TaskObservation],
        *,
        now: float,
    ) -> tuple[bool, list[NodeCommand]]:
        """Record a heartbeat; return (must re-register, commands for the node)."""
        node = self.nodes.get(node_id)
        if node is None or node.state is NodeState.LOST:
            return True, []
        node.last_heartbeat = now
        node.used = used
        node.running_tasks = sum(1 for t in live_tasks if not t.state.is_final)
        self._reconcile(node_id, live_tasks, now)
        commands = self._commands.pop(node_id, [])
        self._schedule(now)
        return False, commands

    def report_events(self, node_id: str, events: Iterable[TaskObservation], *, now: float) -> None:
        for event in events:
            self._observe_task(node_id, event, now)
        self._schedule(now)

    def tick(self, now: float) -> None:
        """Periodic housekeeping: declare silent nodes lost and release what they held."""
        ready = {n.node_id: n.last_heartbeat for n in self._ready_nodes()}
        for node_id in sorted(lost_nodes(ready, now, self._node_timeout)):
            self._lose_node(node_id, now)

    # ================================================================ job masters

    def register_master(
        self, job_id: str, *, now: float
    ) -> tuple[JobRecord, list[AllocationRecord]]:
        job = self.job(job_id)
        if job.state in (JobState.SUBMITTED, JobState.STARTING):
            if job.state is JobState.SUBMITTED and not job.client_mode:
                raise ConflictError(f"job {job_id} has no job master allocation yet")
            self._move(job, JobState.RUNNING)
            job.start_time = now
            self._save_job(job)
            log.info("job %s: job master registered", job_id)
        held = [
            a for a in self.allocations.values() if a.job_id == job_id and a.phase != MASTER_PHASE
        ]
        return job, held

    def allocate(
        self,
        job_id: str,
        asks: Sequence[PhaseAsk],
        releases: Sequence[str],
        progress: Sequence[PhaseProgress],
        events_after: int,
        *,
        now: float,
    ) -> AllocateResult:
        job = self.job(job_id)
        for allocation_id in releases:
            allocation = self.allocations.get(allocation_id)
            if allocation is not None and allocation.job_id == job_id:
                self._release(allocation)
        if progress and tuple(progress) != job.progress:
            job.progress = tuple(progress)
            self._save_job(job)
        if job.state is JobState.RUNNING and not job.kill_requested:
            # The master counts only containers it has been told of; grants made since its last
            # call (not yet delivered) already serve part of its absolute ask.
            undelivered = Counter(
                a.phase for a in self.allocations.values() if a.job_id == job_id and not a.delivered
            )
            self._asks[job_id] = _JobAsks(
                {
                    a.phase: replace(a, count=a.count - undelivered[a.phase])
                    for a in asks
                    if a.count > undelivered[a.phase]
                }
            )
            self._schedule(now)
        else:
            self._asks.pop(job_id, None)
        granted = []
        for allocation in list(self.allocations.values()):
            if (
                allocation.job_id == job_id
                and not allocation.delivered
                and allocation.phase != MASTER_PHASE
            ):
                delivered = replace(allocation, delivered=True)
                self.allocations[allocation.allocation_id] = delivered
                self._store.save_allocation(delivered)
                granted.append(delivered)
        events = sorted(
            (t for t in self.tasks.values() if t.job_id == job_id and t.seq > events_after),
            key=lambda t: t.seq,
        )
        return AllocateResult(
            granted=tuple(granted),
            events=tuple(e for e in events if e.task_id != MASTER_TASK_ID),
            lost_allocations=tuple(self._lost_allocations.pop(job_id, [])),
            kill_requested=job.kill_requested or job.state.is_final,
        )

    def finish_job(
        self,
        job_id: str,
        state: JobState,
        message: str,
        progress: Sequence[PhaseProgress],
        *,
        now: float,
    ) -> JobRecord:
        job = self.job(job_id)
        if not state.is_final:
            raise ConflictError(f"{state.value} is not a final job state")
        if job.state.is_final:
            return job
        if progress:
            job.progress = tuple(progress)
        self._finish(job, state, message, now)
        return job

    # ================================================================ views

    def node_allocated(self, node_id: str) -> Resources:
        total = Resources()
        for allocation in self.allocations.values():
            if allocation.node_id == node_id:
                total = total + allocation.resources
        return total

    def node_address(self, node_id: str) -> str:
        node = self.nodes.get(node_id)
        return node.address if node else ""

    # ================================================================ internals

    def _ready_nodes(self) -> list[NodeRecord]:
        return [n for n in self.nodes.values() if n.state is NodeState.READY]

    def _touch(self) -> None:
        self.version += 1

    def _save_job(self, job: JobRecord) -> None:
        self._store.save_job(job)
        self._touch()

    def _move(self, job: JobRecord, state: JobState) -> None:
        job.state = check_transition(JOB_TRANSITIONS, job.state, state)

    def _finish(self, job: JobRecord, state: JobState, message: str, now: float) -> None:
        self._move(job, state)
        job.finish_time = now
        job.message = message
        self._save_job(job)
        self._asks.pop(job.job_id, None)
        log.info("job %s %s%s", job.job_id, state.value, f": {message}" if message else "")
        for allocation in [a for a in self.allocations.values() if a.job_id == job.job_id]:
            # The job master's own process ends by itself after reporting; anything else of a
            # final job is stopped by its node.
            if allocation.phase != MASTER_PHASE or state is not JobState.SUCCEEDED:
                self._commands[allocation.node_id].append(
                    StopAllocation(job.job_id, allocation.allocation_id, f"job {state.value}")
                )
            if allocation.phase != MASTER_PHASE:
                self._release(allocation)
        self._schedule(now)

    def _release(self, allocation: AllocationRecord) -> None:
        self.allocations.pop(allocation.allocation_id, None)
        self._store.delete_allocation(allocation.allocation_id)
        self._touch()

    def _schedule(self, now: float) -> None:
        """Grant containers to the outstanding asks (master asks included) in priority order."""
        asks: list[priority_fifo.Ask] = []
        for job in self.jobs.values():
            if job.kill_requested or job.state.is_final:
                continue
            if job.state is JobState.SUBMITTED and not job.client_mode:
                asks.append(
                    priority_fifo.Ask(
                        job.job_id, job.spec.priority, job.seq, MASTER_PHASE, 1, MASTER_RESOURCES
                    )
                )
            elif job.state is JobState.RUNNING:
                for ask in self._asks.get(job.job_id, _JobAsks()).by_phase.values():
                    asks.append(
                        priority_fifo.Ask(
                            job.job_id,
                            job.spec.priority,
                            job.seq,
                            ask.phase,
                            ask.count,
                            ask.resources,
                        )
                    )
        if not asks:
            return
        # One pass over the allocations, not one per node: this runs on every heartbeat.
        allocated: dict[str, Resources] = defaultdict(Resources)
        for allocation in self.allocations.values():
            allocated[allocation.node_id] = allocated[allocation.node_id] + allocation.resources
        nodes = [
            priority_fifo.NodeSlot(n.node_id, n.capacity, allocated[n.node_id])
            for n in self._ready_nodes()
        ]
        for placement in priority_fifo.place(nodes, asks):
            self._grant(placement, now)

    def _grant(self, placement: priority_fifo.Placement, now: float) -> None:
        number = self._store.next_counter("allocation")
        allocation = AllocationRecord(
            allocation_id=f"{placement.job_id}-a{number}",
            job_id=placement.job_id,
            phase=placement.phase,
            node_id=placement.node_id,
            resources=placement.resources,
            granted_time=now,
        )
        self.allocations[allocation.allocation_id] = allocation
        self._store.save_allocation(allocation)
        job = self.jobs[placement.job_id]
        if placement.phase == MASTER_PHASE:
            self._move(job, JobState.STARTING)
            job.master_node = placement.node_id
            job.master_allocation = allocation.allocation_id
            self._save_job(job)
            self._commands[placement.node_id].append(
                LaunchMaster(job.job_id, allocation.allocation_id, allocation.resources)
            )
            log.info("job %s: job master placed on %s", job.job_id, placement.node_id)
            return
        asks = self._asks[placement.job_id].by_phase
        ask = asks.get(placement.phase)
        if ask is not None:
            remaining = ask.count - 1
            if remaining > 0:
                asks[placement.phase] = replace(ask, count=remaining)
            else:
                del asks[placement.phase]
        self._touch()

    def _reconcile(self, node_id: str, live: Sequence[TaskObservation], now: float) -> None:
        """Apply a node's report of what runs there; stop what no job should be running."""
        for observation in live:
            allocation = self.allocations.get(observation.allocation_id)
            job = self.jobs.get(observation.job_id)
            orphan = (
                allocation is None
                or job is None
                or (job.state.is_final and observation.task_id != MASTER_TASK_ID)
            )
            if orphan and not observation.state.is_final:
                self._commands[node_id].append(
                    StopAllocation(
                        observation.job_id, observation.allocation_id, "no such allocation or job"
                    )
                )
                continue
            self._observe_task(node_id, observation, now)

    def _observe_task(self, node_id: str, event: TaskObservation, now: float) -> None:
        if event.task_id == MASTER_TASK_ID:
            self._observe_master(node_id, event, now)
            return
        key = (event.job_id, event.task_id, event.attempt)
        task = self.tasks.get(key)
        if task is None:
            if event.job_id not in self.jobs:
                return
            allocation = self.allocations.get(event.allocation_id)
            task = TaskRecord(
                job_id=event.job_id,
                task_id=event.task_id,
                attempt=event.attempt,
                phase=allocation.phase if allocation else event.task_id.rsplit("-", 1)[0],
                state=TaskState.LAUNCHING,
                node_id=node_id,
                allocation_id=event.allocation_id,
                seq=0,
                start_time=event.start_time or event.timestamp or now,
            )
        if task.state == event.state:
            return
        try:
            check_transition(TASK_TRANSITIONS, task.state, event.state)
        except TransitionError:
            log.debug("ignoring stale report %s for %s", event.state.value, key)
            return
        task.state = event.state
        task.exit_code = event.exit_code
        task.message = event.message
        if event.state.is_final:
            task.finish_time = event.timestamp or now
        task.seq = self._store.next_counter("event")
        self.tasks[key] = task
        self._store.save_task(task)
        self._touch()

    def _observe_master(self, node_id: str, event: TaskObservation, now: float) -> None:
        """The job master's process ended: release its allocation; fail the job if unfinished."""
        if not event.state.is_final:
            return
        allocation = self.allocations.get(event.allocation_id)
        if allocation is not None:
            self._release(allocation)
        job = self.jobs.get(event.job_id)
        if job is None or job.state.is_final or job.master_allocation != event.allocation_id:
            return
        reason = f"job master exited with code {event.exit_code} before reporting a final state"
        self._finish(job, JobState.FAILED, reason, now)

    def _lose_node(self, node_id: str, now: float) -> None:
        node = self.nodes[node_id]
        node.state = NodeState.LOST
        log.warning("node %s lost: no heartbeat for %.1f s", node_id, now - node.last_heartbeat)
        for allocation in [a for a in self.allocations.values() if a.node_id == node_id]:
            self._release(allocation)
            job = self.jobs.get(allocation.job_id)
            if job is None or job.state.is_final:
                continue
            if allocation.phase == MASTER_PHASE:
                if job.state is JobState.STARTING:
                    self._move(job, JobState.SUBMITTED)  # ask for a new job master container
                    job.master_node = job.master_allocation = ""
                    self._save_job(job)
                else:
                    self._finish(job, JobState.FAILED, f"job master's node {node_id} was lost", now)
            else:
                self._lost_allocations[job.job_id].append(allocation.allocation_id)
        for task in self.tasks.values():
            if task.node_id == node_id and not task.state.is_final:
                self._observe_task(
                    node_id,
                    TaskObservation(
                        task.job_id,
                        task.task_id,
                        task.attempt,
                        task.allocation_id,
                        TaskState.LOST,
                        message=f"node {node_id} lost",
                        timestamp=now,
                    ),
                    now,
                )
        self._commands.pop(node_id, None)
        self._touch()


def check_fits_master(capacities: Sequence[Resources]) -> None:
    """Refuse a job whose job master could run on no node (only when nodes are known)."""
    if capacities and not any(MASTER_RESOURCES.fits_in(c) for c in capacities):
        raise SpecError(
            "cluster",
            f"no node can host a job master ({MASTER_RESOURCES.cpu:g} cpu, "
            f"{MASTER_RESOURCES.memory_mb} MiB)",
        )
