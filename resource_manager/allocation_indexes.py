"""The RM's allocation indexes: what each job, node, kind of container and queue holds, kept in
step with every change of an allocation record (:class:`AllocationIndexes`, the base of
:class:`~resource_manager.tables.Tables`, which journals and writes the changes through).

Every query a request or a heartbeat makes of the allocations is answered here in O(what it
returns): a job's containers (and those its job master has not been told of, and per phase
those it has), a node's containers, job master containers and allocated total, what each kind
of container holds cluster-wide, the containers preempted and not resumed (per node), a job's
preemptible containers newest first, the containers kept for a downstream phase (per node), and
what each queue holds and what preemptions under way are taking from it.  What a container
holds of its node is :attr:`AllocationRecord.holds` (its grant, less what a suspension or shrink
its node has shown gives back), so capacity is freed when the node has freed it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

from policies.scheduling.framework import AllocationKind
from policies.scheduling.resources import Resources
from resource_manager.records import AllocationRecord, Goal, Shown

K = TypeVar("K")


@dataclass
class Index(Generic[K]):
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


_NONE_DELIVERED: Mapping[str, int] = MappingProxyType({})


class AllocationIndexes:
    """The allocations in memory and their indexes.  A subclass journals and stores each change
    and keeps the capacity index in step (:meth:`refresh_capacity`)."""

    def __init__(self) -> None:
        self.allocations: dict[str, AllocationRecord] = {}
        self.freed = True  # capacity was freed or added since the scheduler last looked
        self._allocations_of_job: Index[str] = Index()
        self._undelivered_of_job: Index[str] = Index()
        self._delivered_of_job: dict[str, Counter[str]] = {}
        self._allocations_of_node: Index[str] = Index()
        self._masters_of_node: Index[str] = Index()  # job master containers, per node
        self._allocated_on_node: dict[str, Resources] = {}
        self._held_by_kind: dict[AllocationKind, Resources] = {}
        self._held_by_job: dict[str, Resources] = {}  # what each job's containers hold
        # queue -> what its containers hold, and what preemptions under way take from them
        # (kept when the shell sets queue_of_job: a job id to its queue)
        self.queue_of_job: Callable[[str], str] | None = None
        self._held_by_queue: dict[str, Resources] = {}
        self._taking_by_queue: dict[str, Resources] = {}
        self._preempted_of_node: Index[str] = Index()  # containers preempted, per node
        # task containers running whole or shrunk, per job, in the order they became so
        self._preemptible_of_job: Index[str] = Index()
        self._kept_on_node: Index[str] = Index()  # node -> containers kept for a phase
        self._count_by_kind: dict[AllocationKind, int] = {}

    def refresh_capacity(self, node_id: str) -> None:
        """Bring the node's entry of the capacity index in step with what it holds now."""
        raise NotImplementedError

    def _move_delivery(self, old: AllocationRecord, new: AllocationRecord) -> None:
        self.allocations[new.allocation_id] = new
        if new.delivered and not old.delivered:
            self._undelivered_of_job.discard(new.job_id, new.allocation_id)
            self._count_delivered(new, +1)
        elif old.delivered and not new.delivered:
            self._count_delivered(old, -1)
            self._undelivered_of_job.add(new.job_id, new.allocation_id)

    def kept_on_nodes(self) -> Mapping[str, Iterable[str]]:
        """Node -> the task containers kept there for a downstream phase (a live view)."""
        return self._kept_on_node.groups

    def allocations_of_job(self, job_id: str) -> list[AllocationRecord]:
        return [self.allocations[a] for a in self._allocations_of_job.get(job_id)]

    def delivered_of_job(self, job_id: str) -> Mapping[str, int]:
        """Per phase, the job's task containers its job master has been told of.  A live view
        (every round reads it): copy it before changing the tables."""
        return self._delivered_of_job.get(job_id, _NONE_DELIVERED)

    def undelivered_of_job(self, job_id: str) -> list[AllocationRecord]:
        """The job's task containers its job master has not been told of yet."""
        return [self.allocations[a] for a in self._undelivered_of_job.get(job_id)]

    def allocations_of_node(self, node_id: str) -> list[AllocationRecord]:
        return [self.allocations[a] for a in self._allocations_of_node.get(node_id)]

    def masters_of_node(self, node_id: str) -> list[AllocationRecord]:
        """The job master containers on a node (a heartbeat's reconciliation looks at these)."""
        return [self.allocations[a] for a in self._masters_of_node.get(node_id)]

    def allocated_on(self, node_id: str) -> Resources:
        """What the node's containers hold (:attr:`AllocationRecord.holds`): their grants, less
        what suspended or shrunk ones have been shown to give back."""
        return self._allocated_on_node.get(node_id, Resources())

    def held_by_kind(self) -> dict[AllocationKind, Resources]:
        """What the allocations of each kind hold together, cluster-wide (as
        :meth:`allocated_on` counts)."""
        return dict(self._held_by_kind)

    def _index_kept(self, old: AllocationRecord | None, new: AllocationRecord | None) -> None:
        if old is not None and old.kept_for:
            self._kept_on_node.discard(old.node_id, old.allocation_id)
        if new is not None and new.kept_for:
            self._kept_on_node.add(new.node_id, new.allocation_id)

    def _index_allocation(self, old: AllocationRecord | None, new: AllocationRecord | None) -> None:
        self._index_kept(old, new)
        if (
            old is not None
            and new is not None
            and (old.allocation_id, old.job_id, old.node_id, old.kind, old.delivered)
            == (new.allocation_id, new.job_id, new.node_id, new.kind, new.delivered)
        ):
            # The same container with a new goal or what its node showed (every task start
            # and end): the indexes stay; only what it holds of its node may move.
            self.allocations[new.allocation_id] = new
            if _preemptible(old) != _preemptible(new):
                self._index_preemptible(old, -1)
                self._index_preemptible(new, +1)
            if old.preempted_at != new.preempted_at:
                self._index_preempted(old, -1)
                self._index_preempted(new, +1)
            if self.queue_of_job is not None and (old.preempted_at or new.preempted_at):
                self._add_to_queue(old, -1)  # (what it takes may move with its goal alone)
                self._add_to_queue(new, +1)
                preempting = True
            else:
                preempting = False
            old_holds, new_holds = old.holds, new.holds
            if old_holds != new_holds:
                self.freed = self.freed or not old_holds.fits_in(new_holds)
                self._add_allocated(old, -1, queue=not preempting)
                self._add_allocated(new, +1, queue=not preempting)
            return
        # The same container with another flag (delivered): what its node holds is unchanged.
        same_hold = (
            old is not None
            and new is not None
            and (old.node_id, old.holds, old.kind) == (new.node_id, new.holds, new.kind)
        )
        if old is not None:
            self.freed = self.freed or new is None or not old.holds.fits_in(new.holds)
            del self.allocations[old.allocation_id]
            self._allocations_of_job.discard(old.job_id, old.allocation_id)
            self._undelivered_of_job.discard(old.job_id, old.allocation_id)
            if old.delivered and not old.is_master:
                self._count_delivered(old, -1)
            self._allocations_of_node.discard(old.node_id, old.allocation_id)
            if old.is_master:
                self._masters_of_node.discard(old.node_id, old.allocation_id)
            self._index_preempted(old, -1)
            self._index_preemptible(old, -1)
            if not same_hold:
                self._add_allocated(old, -1)
        if new is not None:
            self.allocations[new.allocation_id] = new
            self._allocations_of_job.add(new.job_id, new.allocation_id)
            if not new.delivered and not new.is_master:
                self._undelivered_of_job.add(new.job_id, new.allocation_id)
            elif not new.is_master:
                self._count_delivered(new, +1)
            self._allocations_of_node.add(new.node_id, new.allocation_id)
            if new.is_master:
                self._masters_of_node.add(new.node_id, new.allocation_id)
            self._index_preempted(new, +1)
            self._index_preemptible(new, +1)
            if not same_hold:
                self._add_allocated(new, +1)

    def _index_preempted(self, allocation: AllocationRecord, sign: int) -> None:
        if allocation.preempted_at:
            if sign > 0:
                self._preempted_of_node.add(allocation.node_id, allocation.allocation_id)
            else:
                self._preempted_of_node.discard(allocation.node_id, allocation.allocation_id)

    def preempted_of_node(self, node_id: str) -> list[AllocationRecord]:
        """The node's containers preempted and not resumed yet, oldest grant first."""
        return [self.allocations[a] for a in self._preempted_of_node.get(node_id)]

    def preempted(self) -> list[AllocationRecord]:
        """Every container preempted and not resumed yet."""
        return [
            self.allocations[a]
            for members in self._preempted_of_node.groups.values()
            for a in members
        ]

    def _index_preemptible(self, allocation: AllocationRecord, sign: int) -> None:
        if _preemptible(allocation):
            if sign > 0:
                self._preemptible_of_job.add(allocation.job_id, allocation.allocation_id)
            else:
                self._preemptible_of_job.discard(allocation.job_id, allocation.allocation_id)

    def preemptible_of_job_newest_first(self, job_id: str) -> Iterator[AllocationRecord]:
        """The job's task containers whose task runs (whole or shrunk, not being suspended or
        stopped), the one that became so last first, read lazily: a caller that stops early
        pays for what it read."""
        members = self._preemptible_of_job.groups.get(job_id)
        if members is None:
            return
        for allocation_id in reversed(members):
            yield self.allocations[allocation_id]

    def held_by_queue(self, queue: str) -> tuple[Resources, Resources]:
        """What the queue's containers hold, and what preemptions under way are taking from
        them (what they hold beyond what they will hold once their goals are carried out)."""
        return (
            self._held_by_queue.get(queue, Resources()),
            self._taking_by_queue.get(queue, Resources()),
        )

    def regroup(self) -> None:
        """Total the queues afresh (after :attr:`queue_of_job` changed): O(allocations)."""
        self._held_by_queue, self._taking_by_queue = {}, {}
        if self.queue_of_job is not None:
            for allocation in self.allocations.values():
                self._add_to_queue(allocation, +1)

    def _add_to_queue(self, allocation: AllocationRecord, sign: int) -> None:
        assert self.queue_of_job is not None
        queue = self.queue_of_job(allocation.job_id)
        held = allocation.holds
        self._held_by_queue[queue] = self._held_by_queue.get(queue, Resources()) + held * sign
        if allocation.preempted_at:
            taking = held - allocation.settles_at
            taking = Resources(max(taking.cpu, 0.0), max(taking.memory_mb, 0))
            before = self._taking_by_queue.get(queue, Resources())
            self._taking_by_queue[queue] = before + taking * sign

    def held_by_job(self, job_id: str) -> Resources:
        """What the job's containers hold (as :meth:`allocated_on` counts)."""
        return self._held_by_job.get(job_id, Resources())

    def _count_delivered(self, allocation: AllocationRecord, sign: int) -> None:
        counts = self._delivered_of_job.get(allocation.job_id)
        if counts is None:  # (not setdefault: a Counter is built in Python, once a grant here)
            counts = self._delivered_of_job[allocation.job_id] = Counter()
        counts[allocation.phase] += sign
        if counts[allocation.phase] == 0:
            del counts[allocation.phase]
            if not counts:
                del self._delivered_of_job[allocation.job_id]

    def _add_allocated(self, allocation: AllocationRecord, sign: int, queue: bool = True) -> None:
        amount = allocation.holds * sign
        if queue and self.queue_of_job is not None:
            self._add_to_queue(allocation, sign)
        node_id = allocation.node_id
        total = self._allocated_on_node.get(node_id, Resources()) + amount
        if node_id in self._allocations_of_node.groups:
            self._allocated_on_node[node_id] = total
        else:
            self._allocated_on_node.pop(node_id, None)  # exactly zero: no drift left behind
        job_id = allocation.job_id
        if job_id in self._allocations_of_job.groups:
            self._held_by_job[job_id] = self._held_by_job.get(job_id, Resources()) + amount
        else:
            self._held_by_job.pop(job_id, None)
        count = self._count_by_kind.get(allocation.kind, 0) + sign
        self._count_by_kind[allocation.kind] = count
        self._held_by_kind[allocation.kind] = (
            self._held_by_kind.get(allocation.kind, Resources()) + amount if count else Resources()
        )
        self.refresh_capacity(node_id)


def _preemptible(allocation: AllocationRecord) -> bool:
    """A task container whose task runs and that no preemption is suspending or stopping."""
    return (
        not allocation.is_master
        and allocation.shown is Shown.RUNNING
        and allocation.goal in (Goal.RUN, Goal.SHRINK)
    )
