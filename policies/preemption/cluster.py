"""Container-based preemption as plugins of the scheduling framework (BIG-C Sec. 4.3).

The resource monitor of the paper (Sec. 4.2) checks the queues every few seconds, computes with
the scheduler what to reclaim from the over-provisioned queues (Algorithm 1) and which
containers give it back (Algorithm 2), and sends the decision to the nodes.  Here that is the
framework's post-filter point: when a pass finds a container that fits nowhere,
:class:`ContainerPreemption` runs one cluster-wide decision (:func:`decide`) over an immutable
view of the queues the shell built for the pass, and returns the framework's preemptions.  The
shell applies them as container goals, which the nodes carry out.

Each queue's own mode says how its containers give resources back (the paper runs one mode per
experiment; with one mode for every queue this is exactly its setting):

* Algorithm 1 runs once per mode present among the queues over their share, and each queue
  takes its p_q, a_q and dominant resource from the run in its own mode;
* Algorithm 2 walks that queue's jobs in the order the shell gives (:class:`Victims`: longest
  remaining time first, line 3), in the queue's mode, with its r_GP and footprint.

A queue with ``mode: none`` is never preempted: it is shown to Algorithm 1 as holding exactly
its share when it holds more, so no part of p is assigned to it.

The other plugins, for a cluster with queues:

* :class:`QueueClaims` (reserve): capacity a preemption freed, or is freeing, for a queue is
  not free for any other queue's asks, so it is not promised twice while a freeze completes
  and nobody else takes it before the needy queue's next pass;
* :class:`QueueCap` (permit): a queue never holds more than its ``max_share``.

:func:`serving_order` ranks queues as the capacity scheduler does: the queue using least of its
share first.  All of this reads no clock and does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Protocol

from policies.preemption.amounts import QueueAmount, QueueState, preemption_amounts
from policies.preemption.queues import QueueSpec
from policies.preemption.settings import Mode
from policies.preemption.vectors import is_nothing
from policies.preemption.victims import (
    ActionKind,
    Container,
    ContainerAction,
    choose_victims_in_order,
)
from policies.scheduling.framework import (
    NodeCapacity,
    PassContext,
    PendingAsk,
    Placement,
    Preemption,
    PreemptionAction,
    Refusal,
    Reservation,
)
from policies.scheduling.resources import Resources

__all__ = [
    "ContainerPreemption",
    "QueueCap",
    "QueueClaims",
    "QueueUse",
    "Victims",
    "decide",
    "dominant_share",
    "serving_order",
]


@dataclass(frozen=True)
class QueueUse:
    """One queue as the shell sees it for a decision.

    ``allocation``: what its containers hold, less what preemptions under way are taking from
    them (so Algorithm 1 sees that capacity as free, and does not take it twice); ``demand``:
    what its pending asks want."""

    spec: QueueSpec
    allocation: Resources
    demand: Resources


class Victims(Protocol):
    def in_visit_order(self, queue: str) -> Iterable[Iterable[Container]]:
        """The queue's jobs, longest remaining time first, each with the containers that may
        be preempted (running, not preempted already) in the order to take them.  Read
        lazily: a decision visits only the containers it takes from."""
        ...


def dominant_share(used: Resources, capacity: Resources) -> float:
    """The larger of the CPU and memory fractions of ``capacity`` that ``used`` is."""
    share = 0.0
    if capacity.cpu > 0:
        share = used.cpu / capacity.cpu
    if capacity.memory_mb > 0:
        share = max(share, used.memory_mb / capacity.memory_mb)
    return share


def serving_order(queues: Sequence[QueueUse], capacity: Resources) -> list[str]:
    """Queue names, the one using least of its fair share first (the capacity scheduler's
    order); a queue with a share of 0 comes after every queue with a share; ties by name."""

    def key(queue: QueueUse) -> tuple[int, float, str]:
        share = queue.spec.share
        used = dominant_share(queue.allocation, capacity)
        return (0, used / share, queue.spec.name) if share > 0 else (1, used, queue.spec.name)

    return [q.spec.name for q in sorted(queues, key=key)]


def decide(
    capacity: Resources,
    queues: Sequence[QueueUse],
    victims: Victims,
    *,
    for_queue: str,
) -> tuple[Preemption, ...]:
    """One cluster-wide decision (module docstring): the preemptions that reclaim, from the
    queues over their share, what the queues under it ask for.  ``for_queue`` is recorded in
    each preemption as the queue the capacity is taken for (the shell holds it for that
    queue)."""
    if not capacity.is_positive() or len(queues) < 2:
        return ()
    states = [_as_state(q, capacity) for q in queues]
    by_mode: dict[Mode, dict[str, QueueAmount]] = {}
    for mode in {q.spec.mode for q in queues if q.spec.mode is not None}:
        by_mode[mode] = {a.queue: a for a in preemption_amounts(capacity, states, mode)}
    preemptions: list[Preemption] = []
    for queue in queues:
        spec = queue.spec
        if spec.mode is None:
            continue
        amount = by_mode[spec.mode][spec.name]
        if is_nothing(amount.preempt):
            continue
        visited: dict[str, Container] = {}
        plan = choose_victims_in_order(
            _recorded(victims.in_visit_order(spec.name), visited),
            amount.preempt,
            amount.over_provisioned,
            spec.mode,
            spec.settings,
            dominant=amount.dominant,
        )
        reason = (
            f"{spec.mode.value} preemption: queue {spec.name} holds more than its share "
            f"{spec.share:g}; for queue {for_queue}"
        )
        preemptions.extend(
            _preemption(action, visited[action.container_id], spec, reason, for_queue)
            for action in plan.actions
        )
    return tuple(preemptions)


def _recorded(
    jobs: Iterable[Iterable[Container]], visited: dict[str, Container]
) -> Iterator[Iterator[Container]]:
    """``jobs`` as they are, still lazy, remembering each container read (what it holds)."""
    for job in jobs:
        yield _recorded_job(job, visited)


def _recorded_job(job: Iterable[Container], visited: dict[str, Container]) -> Iterator[Container]:
    for container in job:
        visited[container.container_id] = container
        yield container


def _as_state(queue: QueueUse, capacity: Resources) -> QueueState:
    share = queue.spec.share
    if queue.spec.mode is None:
        # Never preempted: shown as holding no more than its share, so it takes no part of p.
        share = max(share, min(1.0, dominant_share(queue.allocation, capacity)))
    return QueueState(queue.spec.name, share, queue.allocation, queue.demand)


def _preemption(
    action: ContainerAction, container: Container, spec: QueueSpec, reason: str, for_queue: str
) -> Preemption:
    """A decision of Algorithm 2 as the framework's preemption (what the node is told)."""
    cid = action.container_id
    if action.kind is ActionKind.KILL:
        return Preemption(cid, PreemptionAction.KILL, reason, for_queue=for_queue)
    if action.kind is ActionKind.FREEZE or (
        action.kind is ActionKind.SUSPEND
        and not any(name == "memory_mb" for name, _ in action.limits)
    ):
        # Frozen where it is: swapping already (Alg. 2 line 8), or on a node without swap.
        return Preemption(cid, PreemptionAction.SUSPEND, reason, for_queue=for_queue)
    if action.kind is ActionKind.SUSPEND:
        # Immediate: frozen, then cut to the minimal footprint (Sec. 3.2).
        footprint = Resources(
            min(spec.minimal_footprint.cpu, container.resources.cpu),
            min(spec.minimal_footprint.memory_mb, container.resources.memory_mb),
        )
        return Preemption(
            cid, PreemptionAction.SUSPEND, reason, limits=footprint, for_queue=for_queue
        )
    return Preemption(
        cid,
        PreemptionAction.SHRINK,
        reason,
        limits=_shrunk(container.resources, action),
        step=spec.graceful_step,
        for_queue=for_queue,
    )


def _shrunk(held: Resources, action: ContainerAction) -> Resources:
    """What a container runs at after a graceful shrink: Algorithm 2's new limits (rounded,
    :func:`.victims._limits`) where it lowered them, what it holds elsewhere."""
    limits = dict(action.limits)
    return Resources(
        float(limits.get("cpu", held.cpu)), int(limits.get("memory_mb", held.memory_mb))
    )


# ------------------------------------------------------------------------------ plugins


@dataclass
class ContainerPreemption:
    """The post-filter plugin: at most one decision per pass, on the first container that fits
    nowhere, when some queue under its share has pending demand.  The capacity is taken for
    the neediest such queue (the one using least of its share).  When the shell says a
    decision is not due yet (``due`` False), it only notes that one was wanted."""

    capacity: Resources
    queues: Sequence[QueueUse]
    victims: Victims
    due: bool = True
    decided: bool = field(default=False, init=False)
    wanted: bool = field(default=False, init=False)
    name: ClassVar[str] = "ContainerPreemption"

    def preempt(self, ask: PendingAsk, context: PassContext) -> Sequence[Preemption]:
        if self.decided:
            return ()
        needy = [
            q
            for q in self.queues
            if not is_nothing(q.demand)
            and q.spec.share > 0
            and dominant_share(q.allocation, self.capacity) < q.spec.share
        ]
        if not needy:
            return ()
        if not self.due:
            self.wanted = True
            return ()
        self.decided = True
        neediest = serving_order(needy, self.capacity)[0]
        decided = decide(self.capacity, self.queues, self.victims, for_queue=neediest)
        return [replace(p, by=self.name) for p in decided]


@dataclass(frozen=True)
class QueueClaims:
    """The reserve plugin: ``claims[node][queue]`` is capacity freed (or being freed) on a node
    for a queue; it is not free for asks of any other queue."""

    claims: Mapping[str, Mapping[str, Resources]]
    by_queue: bool = True  # what it holds depends on the ask's queue alone
    name: ClassVar[str] = "QueueClaims"

    def held_for_others(self, ask: PendingAsk, node: NodeCapacity) -> Resources:
        on_node = self.claims.get(node.node_id)
        if not on_node:
            return Resources()
        held = Resources()
        for queue, amount in on_node.items():
            if queue != ask.queue:
                held = held + amount
        return held

    def on_placed(self, placement: Placement) -> Sequence[Reservation]:
        return ()


@dataclass
class QueueCap:
    """The permit plugin of ``max_share``: an ask is admitted only while its queue, with the
    container, stays within ``limits[queue]`` (absent: no cap).  ``usage`` is what each queue
    holds at the start of the pass; the plugin adds the pass's placements as it is told of
    them (it is also a reserve plugin that holds nothing)."""

    limits: Mapping[str, Resources]
    usage: dict[str, Resources]
    shape_only: bool = False  # the verdict depends on the ask's queue
    by_queue: bool = True  # (as a reserve plugin it holds nothing)
    name: ClassVar[str] = "QueueCap"

    def admit(self, ask: PendingAsk, context: PassContext) -> Refusal | None:
        limit = self.limits.get(ask.queue)
        if limit is None:
            return None
        if (self.usage.get(ask.queue, Resources()) + ask.resources).fits_in(limit):
            return None
        return Refusal(self.name, f"queue {ask.queue!r} is at its max_share ({_shown(limit)})")

    def held_for_others(self, ask: PendingAsk, node: NodeCapacity) -> Resources:
        return Resources()

    def on_placed(self, placement: Placement) -> Sequence[Reservation]:
        if placement.queue in self.limits:
            used = self.usage.get(placement.queue, Resources())
            self.usage[placement.queue] = used + placement.resources
        return ()


def _shown(amount: Resources) -> str:
    return f"{amount.cpu:g} CPU, {amount.memory_mb} MB"


def cap_of(spec: QueueSpec, capacity: Resources) -> Resources | None:
    """What ``max_share`` lets a queue hold of ``capacity`` (None: the whole cluster)."""
    if spec.max_share >= 1.0:
        return None
    return Resources(capacity.cpu * spec.max_share, math.floor(capacity.memory_mb * spec.max_share))
