"""The resource manager's view of its queues: which queue each job is in, what each queue holds
and wants, and the plugins a pass runs with when queues are configured.

The decisions are :mod:`policies.preemption.cluster`'s; this module only reads the RM's records
(:class:`~resource_manager.tables.Tables`, the pending asks, the :class:`QueueBook`) into the
immutable views those plugins take.  It changes nothing: the core applies what comes back.

Costs, per pass with queues: O(queues) to read what each queue holds (the tables keep it per
queue) and wants (the pending asks keep it); a decision then reads only the jobs it takes from
(:class:`JobVictims` sorts the queue's running jobs by remaining time, and hands out their
containers lazily).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from policies.preemption.cluster import (
    ContainerPreemption,
    QueueCap,
    QueueClaims,
    QueueUse,
    cap_of,
    serving_order,
)
from policies.preemption.queues import QueueConfig, QueueSpec
from policies.preemption.remaining import remaining_time
from policies.preemption.victims import Container
from policies.scheduling.containers import Goal, Shown
from policies.scheduling.framework import Profile
from policies.scheduling.lifecycle import JobState
from policies.scheduling.pending_asks import PendingAsks
from policies.scheduling.resources import Resources
from resource_manager.queue_book import QueueBook
from resource_manager.records import AllocationRecord, JobRecord
from resource_manager.tables import Tables

__all__ = ["JobVictims", "QueueStatus", "QueueView", "eventual_holds"]


@dataclass(frozen=True)
class QueueStatus:
    """One queue for ``sluice queues``."""

    spec: QueueSpec
    is_default: bool
    usage: Resources
    pending: Resources
    preempted: Resources  # what is taken from its containers now (grant − what they hold)
    suspended: int
    shrunk: int
    running_jobs: int


def eventual_holds(allocation: AllocationRecord) -> Resources:
    """What a container will hold once its node has carried out its goal."""
    return allocation.settles_at


class QueueView:
    """Reads the RM's records as queues (module docstring)."""

    def __init__(self, tables: Tables, pending: PendingAsks, book: QueueBook) -> None:
        self._tables = tables
        self._pending = pending
        self._book = book

    @property
    def config(self) -> QueueConfig:
        return self._book.config

    @property
    def active(self) -> bool:
        """Do queues change anything a pass does (preemption or caps)?"""
        return self.config.preempts or self.config.caps

    def queue_of(self, job: JobRecord) -> str:
        """The queue a job is charged to: the one its spec names, else the default."""
        named = job.spec.queue
        return named if named and self.config.get(named) is not None else self.config.default

    def spec_of(self, job_id: str) -> QueueSpec:
        job = self._tables.jobs.get(job_id)
        name = self.config.default if job is None else self.queue_of(job)
        spec = self.config.get(name)
        assert spec is not None  # queue_of names a configured queue
        return spec

    def _jobs_by_queue(self) -> dict[str, list[JobRecord]]:
        jobs: dict[str, list[JobRecord]] = {q.name: [] for q in self.config.queues}
        for job_id in self._tables.active_jobs:
            job = self._tables.jobs[job_id]
            jobs[self.queue_of(job)].append(job)
        return jobs

    def uses(self) -> list[QueueUse]:
        """Each queue's holding (less what preemptions under way take from it) and demand, in
        the file's order: O(queues), from totals the tables and the pending asks keep."""
        uses = []
        for spec in self.config.queues:
            held, taking = self._tables.held_by_queue(spec.name)
            # What preemptions under way are taking counts as free to Algorithm 1 (it is not
            # this queue's any more), which is what keeps the next decision from taking it
            # again; the demand stays whole, since that free capacity is what serves it.
            uses.append(QueueUse(spec, _floor0(held - taking), self._pending.demand(spec.name)))
        return uses

    def profile(
        self, base: Profile, capacity: Resources, now_wall: float, due: bool
    ) -> tuple[Profile, list[str], ContainerPreemption | None]:
        """The pass's plugins with queues: the base ones, plus the cap permit, the claims and
        the preemption post-filter where configured; the queues in serving order; the
        post-filter (to ask afterwards whether it decided)."""
        uses = self.uses()
        order = serving_order(uses, capacity)
        permits, reserves, post_filters = list(base.permits), list(base.reserves), []
        limits = {
            q.name: limit for q in self.config.queues if (limit := cap_of(q, capacity)) is not None
        }
        if limits:
            cap = QueueCap(limits, {u.spec.name: u.allocation for u in uses})
            permits.append(cap)
            reserves.append(cap)
        if self._book.has_claims():
            reserves.append(QueueClaims(self._book.claims()))
        preemption = None
        if self.config.preempts:
            preemption = ContainerPreemption(
                capacity, uses, JobVictims(self._tables, self, now_wall), due=due
            )
            post_filters.append(preemption)
        profile = Profile(
            queue_order=base.queue_order,
            permits=tuple(permits),
            filters=base.filters,
            scores=base.scores,
            reserves=tuple(reserves),
            post_filters=(*base.post_filters, *post_filters),
            nodes_to_score=base.nodes_to_score,
            exhaustive_below=base.exhaustive_below,
        )
        return profile, order, preemption

    def status(self) -> list[QueueStatus]:
        jobs = self._jobs_by_queue()
        taken: dict[str, tuple[Resources, int, int]] = {}
        for allocation in self._tables.preempted():
            queue = self.spec_of(allocation.job_id).name
            amount, suspended, shrunk = taken.get(queue, (Resources(), 0, 0))
            amount = amount + _floor0(allocation.resources - allocation.holds)
            if allocation.goal is Goal.SUSPEND or allocation.shown is Shown.SUSPENDED:
                suspended += 1
            elif allocation.goal is not Goal.STOP:
                shrunk += 1
            taken[queue] = (amount, suspended, shrunk)
        statuses = []
        for spec in self.config.queues:
            held = Resources()
            running = 0
            for job in jobs[spec.name]:
                held = held + self._tables.held_by_job(job.job_id)
                running += job.state is JobState.RUNNING
            amount, suspended, shrunk = taken.get(spec.name, (Resources(), 0, 0))
            statuses.append(
                QueueStatus(
                    spec,
                    spec.name == self.config.default,
                    held,
                    self._pending.demand(spec.name),
                    amount,
                    suspended,
                    shrunk,
                    running,
                )
            )
        return statuses


class JobVictims:
    """A queue's running jobs, longest remaining time first (:mod:`policies.preemption.remaining`:
    unknown first, the youngest first among equals), each with its preemptible containers, the
    last started first (the least work to lose): running task containers at their grant or
    shrunk, not already being suspended or stopped (the tables keep them per job).  Containers
    not yet running a task are left alone (nothing is gained by preempting a container whose
    task is still starting)."""

    def __init__(self, tables: Tables, view: QueueView, now_wall: float) -> None:
        self._tables = tables
        self._view = view
        self._now = now_wall

    def in_visit_order(self, queue: str) -> Iterable[Iterable[Container]]:
        jobs = [
            self._tables.jobs[job_id]
            for job_id in self._tables.active_jobs
            if self._tables.jobs[job_id].state is JobState.RUNNING
            and self._view.queue_of(self._tables.jobs[job_id]) == queue
        ]
        estimates = {
            job.job_id: remaining_time(job.progress, job.start_time, self._now) for job in jobs
        }
        jobs.sort(key=lambda job: (-estimates[job.job_id], -job.seq))
        return self._containers(jobs, estimates, queue)

    def _containers(
        self, jobs: list[JobRecord], estimates: dict[str, float], queue: str
    ) -> Iterator[Iterator[Container]]:
        for job in jobs:
            yield self._of_job(job, estimates[job.job_id], queue)

    def _of_job(self, job: JobRecord, remaining: float, queue: str) -> Iterator[Container]:
        """The job's running task containers, the last started first, read lazily.  A
        container on a node this RM does not know (one recovered from the store that has not
        registered since the RM restarted) is left alone: no command can reach it, and whether
        it can swap is unknown, which would turn a suspension into a kill (Alg. 2 kills a
        container that cannot swap while memory is owed)."""
        nodes = self._tables.nodes
        for a in self._tables.preemptible_of_job_newest_first(job.job_id):
            node = nodes.get(a.node_id)
            if node is None:
                continue
            yield Container(
                container_id=a.allocation_id,
                job_id=job.job_id,
                queue=queue,
                resources=eventual_holds(a),
                remaining_time=remaining if math.isfinite(remaining) else 1e18,
                swapping=a.swapping,
                can_swap=node.has_swap,
            )


def _floor0(amount: Resources) -> Resources:
    return Resources(max(amount.cpu, 0.0), max(amount.memory_mb, 0))
