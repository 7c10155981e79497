"""The scheduling pass in the RM core, and the application of its plan.

A pass is :func:`policies.scheduling.framework.schedule_pass` with the core's plugins (the
baseline: strict priority, FIFO within a priority, least-allocated node, the job master share
at the permit point; the queues' shares and preemption when queues are active; the slot
reservation override) over the pending asks, kept in serving order, and the ready nodes, kept
in a capacity index.  The pass decides; this module checks each placement of the plan against
the records as they are now (:func:`grant`), has the container goals applied
(:mod:`resource_manager.goals`), evicts for preemptive dispatch (:mod:`resource_manager.dias`)
and arms the locality timers of asks held back for a preferred node (delay scheduling).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import replace
from typing import NamedTuple

from policies.approximation.dispatch import DispatchMode
from policies.preemption.cluster import ContainerPreemption
from policies.scheduling.framework import (
    AllocationKind,
    PassContext,
    Placement,
    Plan,
    Profile,
    schedule_pass,
)
from policies.scheduling.lifecycle import JobState
from resource_manager.dias import evictions_for_waiting
from resource_manager.jobs import move
from resource_manager.plans import apply_plan, update_sprints
from resource_manager.records import AllocationRecord, NodeState, Now
from resource_manager.reservations import override_plugin
from resource_manager.state import CoreState, log


def needs_pass(state: CoreState) -> bool:
    """Could a pass place something now?  True after an ask appeared or grew, or capacity
    was freed or added, since the last pass; a heartbeat that changes neither leaves it."""
    return bool(state.pending) and (state.asks_grew or state.tables.freed or state.cut_short)


def schedule(state: CoreState, now: Now) -> Plan:
    """One scheduling pass, if anything changed since the last: plan it with the framework,
    check the plan and apply it.  Run it as a unit of work of its own."""
    if not needs_pass(state):
        return Plan()
    state.start_pass()
    pending, tables = state.pending, state.tables
    if not pending:
        return Plan()
    if state.queues.active:
        state.book.expire(now.monotonic, set(pending.queues()))
    setup = pass_setup(state, now, due=state.decision_due(now))
    context, profile, preemption = setup.context, setup.profile, setup.preemption
    asks = pending.in_queues(setup.order) if setup.order is not None else iter(pending)
    granted: Counter[tuple[str, str]] = Counter()
    # The pass places tentatively in the capacity index; applying its plan makes the records
    # say the same, so the index keeps the pass's changes instead of undoing and redoing them.
    scratch = tables.capacity.scratch()
    with scratch:
        plan = schedule_pass(
            asks,
            context,
            profile,
            pending.shapes(),
            state.nowhere,
            state.settings.max_placements_per_pass,
        )
        state.cut_short = plan.cut_short
        for held_back in (w.ask for w in plan.waiting):
            if held_back.local_only(now.monotonic) and held_back.local_until < math.inf:
                entry = (held_back.local_until, held_back.job_id, held_back.phase)
                if entry not in state.locality_armed:
                    state.locality_armed.add(entry)
                    heapq.heappush(state.locality_ends, entry)
        for placement in plan.placements:
            if grant(state, placement, now) and placement.kind is AllocationKind.TASK:
                granted[placement.job_id, placement.phase] += 1
        scratch.keep()
    for (job_id, phase), count in granted.items():
        ask = pending.get((job_id, AllocationKind.TASK, phase))
        if ask is not None:
            state.put_ask(replace(ask, count=max(0, ask.count - count)))
    if preemption is not None:
        if preemption.decided:
            state.book.decided(now.monotonic)
        elif preemption.wanted:
            state.book.wanted = True  # (soft: at worst a pass runs for nothing)
    apply_plan(state, plan, now)  # (its placements are granted above)
    if state.settings.dispatch is DispatchMode.PREEMPTIVE:
        apply_plan(state, evictions_for_waiting(state, plan), now)
    update_sprints(state, now)
    return plan


class PassSetup(NamedTuple):
    """What a pass runs with: its context, its plugins, the queues' serving order (None: no
    queues, the asks' own order) and the queues' preemption post-filter (None: none)."""

    context: PassContext
    profile: Profile
    order: list[str] | None
    preemption: ContainerPreemption | None


def pass_setup(state: CoreState, now: Now, *, due: bool) -> PassSetup:
    """The context and plugins of a pass now: the core's profile, with the queues' shares and
    preemption when queues are active (``due``: may the preemption decide now), DiAS's rule
    that the queues never evict, and the slot reservation override.  A read: the pass
    (:func:`schedule`) and the pending diagnosis (:mod:`resource_manager.pending_why`) both
    build theirs here, so a reason given is the next pass's."""
    tables = state.tables
    context = PassContext(
        now=now.monotonic,
        cluster=tables.capacity,
        held=tables.held_by_kind(),
        jobs_in_execution=len(tables.in_execution),
    )
    profile, order, preemption = state.profile, None, None
    if state.queues.active:
        profile, order, preemption = state.queues.profile(
            state.profile, tables.capacity.total_capacity, now.wall, due=due
        )
        if state.settings.dispatch is DispatchMode.DIAS:
            # DiAS never evicts (Sec. 3.2): the queues' preemption stays off.
            profile, preemption = replace(profile, post_filters=state.profile.post_filters), None
    override = override_plugin(tables, now.wall)
    if override is not None:  # (slot reservation: kept containers yield to a higher priority)
        profile = replace(profile, post_filters=(*profile.post_filters, override))
    return PassSetup(context, profile, order, preemption)


def grant(state: CoreState, placement: Placement, now: Now) -> bool:
    """Apply one placement of a plan, after checking it still holds.  The caller lowers the
    job's pending ask (once per plan, not per container)."""
    tables = state.tables
    job = state.jobs.get(placement.job_id)
    node = state.nodes.get(placement.node_id)
    # Checked against the records, not the capacity index (which holds the pass's
    # tentative placements already).
    fits = (
        node is not None
        and node.state is NodeState.READY
        and (placement.resources + tables.allocated_on(node.node_id)).fits_in(node.capacity)
    )
    if job is None or not fits:
        if node is not None:
            tables.refresh_capacity(node.node_id)  # undo the tentative placement
        log.warning("dropping a stale placement for %s on %s", placement.job_id, placement.node_id)
        return False
    master = placement.kind is AllocationKind.JOB_MASTER
    number = tables.next_counter("allocation")
    allocation = AllocationRecord(
        allocation_id=f"{placement.job_id}-a{number}",
        job_id=placement.job_id,
        kind=placement.kind,
        phase=placement.phase,
        node_id=placement.node_id,
        resources=placement.resources,
        granted_time=now.wall,
    )
    tables.put_allocation(allocation)
    if placement.queue:
        state.book.consume(placement.node_id, placement.queue, placement.resources)
    state.add_placed(placement)
    if master:
        move(
            state,
            job,
            JobState.STARTING,
            master_node=placement.node_id,
            master_allocation=allocation.allocation_id,
            master_attempt=job.master_attempt + 1,
            execution=job.execution
            if job.execution.dispatched_at
            else replace(job.execution, dispatched_at=now.wall),
        )
        log.info(
            "job %s: job master attempt %d placed on %s",
            job.job_id,
            job.master_attempt + 1,
            placement.node_id,
        )
    return True


def end_locality_waits(state: CoreState, now: Now) -> None:
    """Asks whose locality wait is over may now take any node: a pass is due.  O(what is
    due)."""
    ends = state.locality_ends
    if ends and ends[0][0] <= now.monotonic:
        while ends and ends[0][0] <= now.monotonic:
            state.locality_armed.discard(heapq.heappop(ends))
        state.asks_grew = True


def next_locality_end(state: CoreState) -> float | None:
    """When (monotonic) the earliest held-back ask's locality wait ends, if any."""
    return state.locality_ends[0][0] if state.locality_ends else None
